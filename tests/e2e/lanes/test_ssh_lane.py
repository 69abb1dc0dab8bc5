"""The SSH lane end to end: the daemon's API, a real asyncssh server on 127.0.0.1, real tiny trainings."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.daemon.lanes.ssh import Device, RemoteRun
from bashgym.daemon.lanes.supervisor import ArtifactMismatch
from bashgym.daemon.version import bashgym_version
from bashgym.ledger.store import Ledger
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import sft_data, training_request
from tests.support.helpers import cli_async, inprocess_daemon, running_daemon, wait_for_status
from tests.support.ssh_standin import SshServer, ssh_server

pytestmark = pytest.mark.anyio
TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


def live_members(pgid: int) -> list[int]:
    """Processes of a group that still run (a zombie awaiting its reaper does not count)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@dataclass
class Lane:
    api: httpx.AsyncClient
    ssh: SshServer
    ledger: Ledger
    home: Path

    def device(self, device_id: str = "gpu1", **overrides: Any) -> dict[str, Any]:
        return self.ssh.device(device_id, **{"work_dir": "work", **overrides})

    async def wait_for(self, project: str, run_id: str, statuses: set[str]) -> Any:
        return await wait_for_status(self.api, project, run_id, statuses)


@pytest.fixture
async def lane(ledger: Ledger, tmp_path: Path) -> AsyncIterator[Lane]:
    home = tmp_path / "home"
    async with ssh_server(tmp_path / "ssh") as ssh, inprocess_daemon(ledger, home, ssh_poll_s=0.2, grace_s=20) as api:
        yield Lane(api, ssh, ledger, home)


async def test_a_device_is_preflighted_then_trains_pauses_resumes_and_brings_verified_artifacts_home(
    lane: Lane, tiny: Path, tmp_path: Path
) -> None:
    added = await lane.api.post("/v1/devices", json=lane.device())
    assert added.status_code == 201, added.text
    body = training_request(tiny, sft_data(tmp_path, 32), max_steps=150, save_steps=50, compute_target="ssh:gpu1")

    never_checked = await lane.api.post("/v1/training/start", json=body)
    assert never_checked.status_code == 422
    assert "never been preflighted" in never_checked.json()["error"]["message"]
    assert lane.ssh.commands == [] and lane.ssh.sftp_ops == [], "refused before anything reached the device"

    checked = (await lane.api.post("/v1/devices/gpu1/preflight")).json()["record"]
    assert checked["ready"], checked["preflight"]["reasons"]
    assert checked["preflight"]["facts"]["torch"] and checked["preflight"]["facts"]["disk_free_gib"] > 1
    plan = (await lane.api.post("/v1/training/plan", json=body)).json()
    assert (plan["lane"], plan["device_id"], plan["lane_preflight"]["ready"]) == ("ssh", "gpu1", True)

    started = (await lane.api.post("/v1/training/start", json=body)).json()
    assert (started["lane"], started["device_id"], started["status"]) == ("ssh", "gpu1", "queued")
    project, run_id = started["project_id"], started["run_id"]
    run = await lane.wait_for(project, run_id, {"running", *TERMINAL})
    assert run["status"] == "running", run["attempts"][-1]["error_summary"]
    remote_dir = lane.ssh.home / "work" / run_id
    assert (remote_dir / "dataset.jsonl").read_bytes() == Path(body["dataset_path"]).read_bytes()
    assert json.loads((remote_dir / "request.json").read_text())["dataset_path"] == "dataset.jsonl"

    paused = await lane.api.post(f"/v1/projects/{project}/runs/{run_id}/pause")
    assert paused.status_code == 202, paused.text
    run = await lane.wait_for(project, run_id, {"paused", *TERMINAL})
    assert run["status"] == "paused", run["attempts"][-1]["error_summary"]
    assert (await lane.api.post(f"/v1/projects/{project}/runs/{run_id}/resume")).status_code == 202
    run = await lane.wait_for(project, run_id, TERMINAL)
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]

    page = (await lane.api.get(f"/v1/projects/{project}/events", params={"limit": 1000})).json()
    kinds = [e["event_type"] for e in page["events"]]
    assert {"run.started", "run.paused", "run.resumed", "run.checkpoint", "run.completed"} <= set(kinds)
    assert run["metric_summary"]["train.loss"]["count"] == 150, "streamed once each, across the pause"
    local_dir = lane.home / "runs" / run_id
    assert run["artifacts"], "the adapter is registered"
    for artifact in run["artifacts"]:
        relative = artifact["uri"].removeprefix(f"bashgym://runs/{run_id}/")
        assert hashlib.sha256((local_dir / relative).read_bytes()).hexdigest() == artifact["sha256"]
    assert (local_dir / "training.log").stat().st_size > 0, "the remote log is mirrored home"
    assert not remote_dir.exists(), "the device's copy is removed once everything kept is home and verified"
    assert any("setsid" in command for command in lane.ssh.commands)


async def test_stop_ends_a_remote_run_cancelled_and_its_process_group_gone(
    lane: Lane, tiny: Path, tmp_path: Path
) -> None:
    await lane.api.post("/v1/devices", json=lane.device())
    await lane.api.post("/v1/devices/gpu1/preflight")
    body = training_request(
        tiny, sft_data(tmp_path, 64), max_steps=20_000, save_steps=1000, learning_rate=1e-4, compute_target="ssh:gpu1"
    )
    started = (await lane.api.post("/v1/training/start", json=body)).json()
    project, run_id = started["project_id"], started["run_id"]
    await lane.wait_for(project, run_id, {"running", *TERMINAL})
    stopped = await lane.api.post(f"/v1/projects/{project}/runs/{run_id}/stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "cancelled"
    pgid = int((lane.ssh.home / "work" / run_id / "pgid").read_text())
    async with asyncio.timeout(10):  # the wrapper shell exits just after it records the exit code
        while live_members(pgid):  # noqa: ASYNC110 - /proc offers nothing to await
            await asyncio.sleep(0.1)
    assert (await lane.api.get("/v1/ledger/verify")).json()["ok"]


async def test_unknown_and_unverifiable_devices_are_refused_before_any_upload(
    lane: Lane, tiny: Path, tmp_path: Path
) -> None:
    body = training_request(tiny, sft_data(tmp_path), compute_target="ssh:nowhere")
    refused = await lane.api.post("/v1/training/start", json=body)
    assert refused.status_code == 422
    assert "No device 'nowhere'" in refused.json()["error"]["message"]

    impostor = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    await lane.api.post("/v1/devices", json=lane.device("spoofed", host_key=impostor))
    verdict = (await lane.api.post("/v1/devices/spoofed/preflight")).json()["record"]
    assert not verdict["ready"]
    assert "could not be verified" in verdict["preflight"]["reasons"][0]
    assert lane.ssh.commands == []
    refused = await lane.api.post("/v1/training/start", json={**body, "compute_target": "ssh:spoofed"})
    assert refused.status_code == 422 and "not ready" in refused.json()["error"]["message"]

    await lane.api.post("/v1/devices", json=lane.device("nopython", python="work/venv/bin/python"))
    missing = (await lane.api.post("/v1/devices/nopython/preflight")).json()["record"]["preflight"]
    assert "bashgym device bootstrap nopython" in missing["reasons"][0]


async def test_a_tampered_remote_artifact_fails_the_download_check(lane: Lane, tmp_path: Path) -> None:
    remote = lane.ssh.home / "work" / "run-tampered"
    (remote / "final").mkdir(parents=True)
    weights = b"adapter weights " * 1000
    (remote / "final" / "adapter_model.safetensors").write_bytes(weights)
    profile = {
        "use_lora": True,
        "files": [
            {
                "path": "final/adapter_model.safetensors",
                "sha256": hashlib.sha256(weights).hexdigest(),
                "size_bytes": len(weights),
            }
        ],
    }
    (remote / "model_profile.json").write_text(json.dumps(profile))
    local = tmp_path / "local"
    local.mkdir()
    record = {**Lane.device(lane), "slots": 1, "gpus": 0, "known_hosts": ""}
    run = RemoteRun(Device.from_record(record), "run-tampered", local)
    await run.open()
    try:
        await run.download_artifacts()
        assert (local / "final" / "adapter_model.safetensors").read_bytes() == weights

        (remote / "final" / "adapter_model.safetensors").write_bytes(weights.replace(b"adapter", b"backdoor"))
        (local / "final" / "adapter_model.safetensors").unlink()
        with pytest.raises(ArtifactMismatch, match="changed after training"):
            await run.download_artifacts()
    finally:
        await run.close()
    assert not (local / "final" / "adapter_model.safetensors").exists()
    assert not list(local.rglob("*.part")), "a file that failed its check is not left behind"


async def test_the_device_cli_registers_preflights_lists_and_removes(tmp_path: Path) -> None:
    async with ssh_server(tmp_path / "ssh") as ssh:
        with running_daemon(tmp_path / "home") as daemon:
            env = daemon.env()
            where = ["--host", ssh.host, "--port", str(ssh.port), "--user", ssh.user, "--work-dir", "work"]
            no_key = await cli_async(env, "device", "add", "gpu1", *where, "--key-path", str(tmp_path / "nokey"))
            assert no_key.code == 7 and "not a file" in no_key.stderr
            added = await cli_async(
                env,
                "device", "add", "gpu1", *where,
                "--key-path", str(ssh.key_path),
                "--known-hosts", str(ssh.known_hosts),
                "--python", sys.executable,
                "--json",
            )  # fmt: skip
            assert added.code == 0, added.stderr
            checked = await cli_async(env, "device", "preflight", "gpu1", "--json")
            assert checked.code == 0, checked.stdout + checked.stderr
            assert json.loads(checked.stdout)["preflight"]["facts"]["python"]
            listed = json.loads((await cli_async(env, "device", "list", "--json")).stdout)
            assert [(d["device_id"], d["ready"]) for d in listed["devices"]] == [("gpu1", True)]
            removed = await cli_async(env, "device", "remove", "gpu1", "--yes")
            assert removed.code == 0, removed.stderr
            listed = json.loads((await cli_async(env, "device", "list", "--json")).stdout)
            assert listed["devices"] == []


@pytest.mark.slow  # make test-slow: the default suite keeps to its 10 minutes
async def test_a_remote_run_outlives_a_daemon_restart_and_is_reattached_once(
    ledger: Ledger, tiny: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    body = training_request(tiny, sft_data(tmp_path, 32), max_steps=120, save_steps=1000, compute_target="ssh:gpu1")
    async with ssh_server(tmp_path / "ssh") as ssh:
        async with inprocess_daemon(ledger, home, ssh_poll_s=0.2) as api:
            first = Lane(api, ssh, ledger, home)
            await api.post("/v1/devices", json=first.device())
            await api.post("/v1/devices/gpu1/preflight")
            info = (await api.post("/v1/training/start", json=body)).json()
            project, run_id = info["project_id"], info["run_id"]
            await first.wait_for(project, run_id, {"running", *TERMINAL})
        # The daemon is gone; the trainer on the device is not.
        assert (await ledger.get_run("default", project, run_id))["status"] == "running"
        async with inprocess_daemon(ledger, home, ssh_poll_s=0.2) as api:
            run = await wait_for_status(api, project, run_id, TERMINAL)
            assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
            assert run["metric_summary"]["train.loss"]["count"] == 120, "each step once, across the restart"
            assert len(run["artifacts"]) >= 1
            events = (await api.get(f"/v1/projects/{project}/events", params={"limit": 1000})).json()["events"]
            assert [e["event_type"] for e in events if e["run_id"] == run_id].count("run.completed") == 1
            assert (await api.get("/v1/ledger/verify")).json()["ok"]


def build_own_wheel(tmp: Path) -> Path:
    """A wheel of this checkout, built from a copy so the test writes nothing into the source tree."""
    repo = Path(__file__).resolve().parents[3]
    source = tmp / "src"
    # Every folder the package installs, as pyproject.toml maps them: a new top-level folder travels too.
    folders = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    for name in sorted(set(folders)):
        shutil.copytree(repo / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, source / name)
    out = tmp / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    return next(out.glob("bashgym-*.whl"))


async def test_bootstrap_installs_the_daemons_version_into_the_work_dir_venv(lane: Lane, tmp_path: Path) -> None:
    await lane.api.post("/v1/devices", json={k: v for k, v in lane.device().items() if k != "python"})
    before = (await lane.api.post("/v1/devices/gpu1/preflight")).json()["record"]["preflight"]
    assert "bootstrap gpu1" in before["reasons"][0], "no venv yet: preflight says what to do"

    unreachable = await lane.api.post(
        "/v1/devices/gpu1/bootstrap",
        json={
            "base_python": sys.executable,
            "pip_args": ["--index-url", "http://127.0.0.1:9/simple", "--retries", "0"],
        },
    )
    assert unreachable.status_code == 422
    assert "Bootstrapping gpu1 failed" in unreachable.json()["error"]["message"]

    wheel = await asyncio.to_thread(build_own_wheel, tmp_path)
    stored = (await lane.api.put("/v1/blobs", content=wheel.read_bytes())).json()
    done = await lane.api.post(
        "/v1/devices/gpu1/bootstrap",
        json={
            "base_python": sys.executable,
            "pip_args": ["--no-deps", "--no-index"],  # this host has no index; the daemon's deps are not needed here
            "wheel_sha256": stored["sha256"],
            "wheel_name": wheel.name,
        },
    )
    assert done.status_code == 200, done.text
    facts = done.json()["device"]["preflight"]["facts"]
    assert facts["bashgym"] == bashgym_version() and facts["executable"].endswith("work/venv/bin/python")
    # Without its dependencies torch does not import there, and the verdict says so.
    assert any("torch" in reason for reason in done.json()["device"]["preflight"]["reasons"])


async def test_an_evaluation_runs_on_the_device_and_its_result_comes_home(lane: Lane) -> None:
    await lane.api.post("/v1/projects", json={"project_id": "evals", "name": "Evals"})
    await lane.api.post("/v1/devices", json=lane.device())
    await lane.api.post("/v1/devices/gpu1/preflight")
    body = {"gold": True, "limit_tasks": 6, "compute_target": "ssh:gpu1"}
    job = (await lane.api.post("/v1/projects/evals/evaluations", json=body)).json()
    async with asyncio.timeout(180):
        while job["status"] in {"queued", "running"}:
            await asyncio.sleep(0.3)
            job = (await lane.api.get(f"/v1/projects/evals/evaluations/{job['evaluation_id']}")).json()
    assert job["status"] == "completed", job["error"]
    assert any("bashgym.trainers.evaluate" in command for command in lane.ssh.commands)
    results = (await lane.api.get("/v1/projects/evals/evaluations")).json()["results"]
    (result,) = [r for r in results if r["result_id"] == job["result_id"]]
    assert result["metrics"]["pass@1"] == 1.0 and result["sample_count"] == 6
    assert result["details"]["canaries"]["guard_rate"] == 1.0
    assert not (lane.ssh.home / "work" / job["evaluation_id"]).exists(), "the device's copy is cleaned up"


@pytest.mark.slow  # make test-slow: the default suite keeps to its 10 minutes
async def test_a_trainer_and_an_evaluator_on_a_device_with_two_slots_take_half_its_cores(
    lane: Lane, tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon cannot know a device's cores: each run there divides them by the device's slots itself.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the device's login environment sets no limit of its own
    await lane.api.post("/v1/devices", json=lane.device(slots=2))
    await lane.api.post("/v1/devices/gpu1/preflight")
    body = training_request(tiny, sft_data(tmp_path), max_steps=2, compute_target="ssh:gpu1")
    started = (await lane.api.post("/v1/training/start", json=body)).json()
    run = await lane.wait_for(started["project_id"], started["run_id"], TERMINAL)
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
    profile = json.loads((lane.home / "runs" / run["run_id"] / "model_profile.json").read_text())

    evaluation = {"run_id": run["run_id"], "limit_tasks": 2, "max_new_tokens": 4, "compute_target": "ssh:gpu1"}
    job = (await lane.api.post(f"/v1/projects/{started['project_id']}/evaluations", json=evaluation)).json()
    async with asyncio.timeout(180):
        while job["status"] in {"queued", "running"}:
            await asyncio.sleep(0.3)
            job = (
                await lane.api.get(f"/v1/projects/{started['project_id']}/evaluations/{job['evaluation_id']}")
            ).json()
    assert job["status"] == "completed", job["error"]
    results = (await lane.api.get(f"/v1/projects/{started['project_id']}/evaluations")).json()["results"]
    (result,) = [r for r in results if r["result_id"] == job["result_id"]]

    cpus = os.cpu_count() or 1
    threads = result["details"]["cpu_threads"]
    assert any("--share-of 2" in command for command in lane.ssh.commands)
    assert 1 <= threads <= max(1, cpus // 2), "half the device's cores, fewer where its load keeps some busy"
    trained = int(profile["speed"]["cpu_threads"].split()[2])
    assert 1 <= trained <= max(1, cpus // 2)
    assert cpus == 1 or profile["speed"]["cpu_threads"] == (
        f"auto -> {trained} ({trained} of {cpus} CPUs: OMP_NUM_THREADS, the daemon's share, or the load at start)"
    )
