"""SkyPilot plans launched and followed to their end like Hugging Face Jobs, through the operator's own `sky` (a
stand-in on this machine speaking the commands and JSON of skypilot 0.14.1's CLI): launched as a managed job,
followed (state, log lines, metrics from the checkpoint store), completed and imported as a model version with its
files checked against their digests, or cancelled from `training stop`; its GPU-hour reservation settled either way.
Plus the refusals: an unconfigured engine says what to set, and a tenant without training.stop cannot cancel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.ledger.store import Ledger

from tests.support.factories import sft_data, training_request
from tests.support.helpers import inprocess_daemon
from tests.support.helpers import wait_external_job as wait_job
from tests.support.sky_standin import SkyStandIn

pytestmark = pytest.mark.anyio
STORE = "s3://acme-ckpt/nightly"
ENVIRON = {"HF_TOKEN": "hf_daemon_" + "Dq7" * 10, "HF_JOB_TOKEN": "hf_job_" + "Jb4" * 10}


@pytest.fixture
def sky(tmp_path: Path) -> SkyStandIn:
    return SkyStandIn(tmp_path / "sky", {"s3://acme-ckpt": tmp_path / "bucket"})


@pytest.fixture
async def api(ledger: Ledger, tmp_path: Path, sky: SkyStandIn) -> AsyncIterator[httpx.AsyncClient]:
    settings = {
        "skypilot_bin": str(sky.executable),
        "engine_outputs": {"s3://acme-ckpt": tmp_path / "bucket"},
        "external_poll_s": 0.05,
    }
    async with inprocess_daemon(ledger, tmp_path / "home", ENVIRON, **settings) as client:
        await client.post("/v1/projects", json={"project_id": "nightly", "name": "Nightly SFT"})
        budget = {"gpu_hours": 10.0, "runs": 5, "reason": "the month's allowance"}
        assert (await client.post("/v1/projects/nightly/budget/limit", json=budget)).status_code == 201
        yield client


def plan(tmp_path: Path, **options: Any) -> dict[str, Any]:
    request = training_request(tmp_path, sft_data(tmp_path, rows=4), base_model="acme/tiny-base", max_steps=2)
    keep = {"method", "base_model", "dataset_path", "max_steps", "tracking_context"}
    request = {k: v for k, v in request.items() if k in keep}
    chosen = {"accelerators": "H100:2", "checkpoint_store": STORE, "timeout_minutes": 90, **options}
    return {"engine": "skypilot", "request": request, "options": chosen, "launch": True}


async def budget_rows(ledger: Ledger, run_id: str) -> dict[str, float]:
    rows = await ledger.read(
        lambda conn: conn.execute(
            "SELECT kind, gpu_hours FROM budget_entries WHERE run_id = ? ORDER BY kind", (run_id,)
        ).fetchall()
    )
    return {str(kind): float(hours) for kind, hours in rows}


async def test_a_skypilot_plan_is_launched_followed_completed_and_imported(
    api: httpx.AsyncClient, ledger: Ledger, sky: SkyStandIn, tmp_path: Path
) -> None:
    answer = await api.post("/v1/compute/plans", json=plan(tmp_path))
    assert answer.status_code == 201, answer.text
    shown = answer.json()
    assert shown["validation"] == {
        "checked": True, "valid": True, "library": f"sky ({sky.executable})", "reason": "sky launch --dryrun"
    }  # fmt: skip
    assert shown["launched"] is True, shown
    job = shown["job"]
    assert job["surface"] == "skypilot" and job["upstream_job_id"] == "1" and job["destination"] == STORE
    # SkyPilot's own check ran first, then the launch; the job token went in sky's environment, never an argument.
    calls = sky.calls()
    assert calls[0][:2] == ["launch", "--dryrun"] and calls[1][:2] == ["jobs", "launch"]
    assert not any(ENVIRON["HF_JOB_TOKEN"] in part for call in calls for part in call)
    [launched] = sky.jobs()
    assert launched["secrets_seen"] == ["HF_TOKEN"] and launched["env"] == {"BASHGYM_JOB_ID": job["job_id"]}
    assert await budget_rows(ledger, job["run_id"]) == {"reserve": 3.0}, "90 minutes times 2 GPUs"

    done = await wait_job(api, job, {"completed", "failed", "cancelled", "unknown"})
    assert done["state"] == "completed" and done["compute_started"], done
    run = (await api.get(f"/v1/projects/nightly/runs/{job['run_id']}")).json()
    assert run["status"] == "completed", run
    assert {a["uri"].rsplit("/", 2)[-2] + "/" + a["uri"].rsplit("/", 1)[-1] for a in run["artifacts"]} >= {
        "final/config.json", "final/adapter_model.safetensors"
    }  # fmt: skip
    profile = json.loads((tmp_path / "bucket" / "nightly" / "run" / "model_profile.json").read_text())
    digests = {entry["sha256"] for entry in profile["files"]}
    assert digests <= {a["sha256"] for a in run["artifacts"]}
    assert run["metric_summary"]["train.loss"]["latest"] == 1.25, run["metric_summary"]
    observations = (await api.get(f"/v1/projects/nightly/jobs/{job['job_id']}/observations")).json()["observations"]
    lines = [line for o in observations if o["kind"] == "log" for line in o["data"]["lines"]]
    assert "bashgym: trainer exited with code 0" in lines
    assert any(f"mv-{job['run_id']}" in o["message"] for o in observations if o["kind"] == "result")
    version = await api.get(f"/v1/projects/nightly/model-versions/mv-{job['run_id']}")
    assert version.status_code == 200, version.text
    rows = await budget_rows(ledger, job["run_id"])
    assert set(rows) == {"reserve", "release", "settle"} and rows["settle"] >= 0, rows


async def test_training_stop_cancels_a_skypilot_job_and_settles_its_budget(
    api: httpx.AsyncClient, ledger: Ledger, sky: SkyStandIn, tmp_path: Path
) -> None:
    sky.finish_after(10_000)
    job = (await api.post("/v1/compute/plans", json=plan(tmp_path))).json()["job"]
    await wait_job(api, job, {"running"})
    # The least-privileged tenant that can see it: a viewer holds no training.stop and cannot cancel it.
    issued = await api.post("/v1/auth/tokens", json={"actor_id": "vera", "profile": "viewer"})
    viewer = {"Authorization": f"Bearer {issued.json()['token']}"}
    refused = await api.post(f"/v1/projects/nightly/runs/{job['run_id']}/stop", headers=viewer)
    assert refused.status_code == 403, refused.text
    assert not any(call[:2] == ["jobs", "cancel"] for call in sky.calls())

    stopped = await api.post(f"/v1/projects/nightly/runs/{job['run_id']}/stop")
    assert stopped.status_code == 200, stopped.text
    assert ["jobs", "cancel", "-y", "1"] in sky.calls()
    done = await wait_job(api, job, {"cancelled", "failed", "completed"})
    assert done["state"] == "cancelled", done
    run = (await api.get(f"/v1/projects/nightly/runs/{job['run_id']}")).json()
    assert run["status"] == "cancelled"
    observations = (await api.get(f"/v1/projects/nightly/jobs/{job['job_id']}/observations")).json()["observations"]
    assert any(o["kind"] == "cancel" for o in observations), [o["kind"] for o in observations]
    rows = await budget_rows(ledger, job["run_id"])
    assert set(rows) == {"reserve", "release", "settle"}, rows


async def test_a_launch_without_skypilot_configured_says_what_to_set_and_records_no_job(
    ledger: Ledger, tmp_path: Path
) -> None:
    outputs = {"s3://acme-ckpt": tmp_path / "bucket"}
    async with inprocess_daemon(ledger, tmp_path / "home", ENVIRON, engine_outputs=outputs) as api:
        answer = (await api.post("/v1/compute/plans", json=plan(tmp_path))).json()
        assert answer["launched"] is False and "BASHGYM_SKYPILOT_BIN" in answer["reason"], answer
        assert (await api.get("/v1/jobs")).json()["jobs"] == []
        unmapped = (await api.post("/v1/compute/plans", json=plan(tmp_path, checkpoint_store="s3://other"))).json()
        assert "BASHGYM_ENGINE_OUTPUTS" in unmapped["reason"], unmapped


async def test_jobs_cancel_of_a_skypilot_job_whose_engine_is_gone_says_what_to_set(
    ledger: Ledger, tmp_path: Path, sky: SkyStandIn
) -> None:
    sky.finish_after(10_000)
    outputs = {"s3://acme-ckpt": tmp_path / "bucket"}
    home = tmp_path / "home"
    async with inprocess_daemon(ledger, home, ENVIRON, skypilot_bin=str(sky.executable), engine_outputs=outputs) as api:
        job = (await api.post("/v1/compute/plans", json=plan(tmp_path))).json()["job"]
    async with inprocess_daemon(ledger, home, ENVIRON, engine_outputs=outputs) as api:
        answer = await api.post(f"/v1/projects/nightly/jobs/{job['job_id']}/cancel")
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert "SkyPilot is not configured" in error["message"] and "BASHGYM_SKYPILOT_BIN" in error["hint"], error
        observations = (await api.get(f"/v1/projects/nightly/jobs/{job['job_id']}/observations")).json()
        assert not any(o["kind"] == "cancel" for o in observations["observations"]), "nothing recorded"


# -- dstack: the follower over the dstack server's REST API (a stand-in of its documented routes) -------------------


async def test_a_dstack_run_is_followed_and_stopped_through_the_servers_api(tmp_path: Path) -> None:
    from bashgym.daemon.external.dstack_runs import DstackUpstream
    from bashgym.daemon.external.hf_jobs import UpstreamError
    from bashgym.daemon.external.upstreams import StoreOutputs

    from tests.support.dstack_standin import DstackStandIn, StandInRun

    with DstackStandIn("acme", "dstack-token-1") as server:
        home = tmp_path / "home"
        (home / ".dstack").mkdir(parents=True)
        projects = [{"name": "acme", "url": server.url, "token": "dstack-token-1", "default": True}]
        (home / ".dstack" / "config.yml").write_text(json.dumps({"projects": projects}))
        run_folder = tmp_path / "volume" / "run"
        run_folder.mkdir(parents=True)
        (run_folder / "request.json").write_text("{}")
        (run_folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "metrics": {"train.loss": 2.0}}) + "\n")
        upstream = DstackUpstream(home, StoreOutputs({"ckpt-vol": tmp_path / "volume"}))
        job = {
            "job_id": "ext-1", "run_id": "run-1", "upstream_job_id": "bashgym-sft-1", "destination": "ckpt-vol",
            "lineage": {"engine_name": "bashgym-sft-1", "engine_project": "acme", "launched_epoch": 0},
        }  # fmt: skip
        assert await upstream.find(job) is None, "no run of that name: the launch never reached dstack"
        server.runs["bashgym-sft-1"] = run = StandInRun("bashgym-sft-1", logs=["bashgym: training sft"])
        seen: dict[str, Any] = {"logs_through": 0}
        look = await upstream.look(job, seen)
        assert (look.state, look.upstream_state, look.new_logs) == ("submitted", "submitted", ["bashgym: training sft"])
        run.status = "running"
        run.logs.append("step 1 loss 2.0")
        look = await upstream.look(job, seen)
        assert look.state == "running" and look.new_logs == ["step 1 loss 2.0"] and look.metrics == [
            (1, {"train.loss": 2.0})
        ]  # fmt: skip
        await upstream.cancel(job)
        assert run.stops == [{"runs_names": ["bashgym-sft-1"], "abort": False}]
        assert (await upstream.look(job, seen)).state == "running", "terminating still holds its compute"
        run.status = "terminated"
        assert (await upstream.look(job, seen)).state == "cancelled"
        run.termination_reason = "server_error"
        assert (await upstream.look(job, seen)).state == "failed", "terminated by the server is no cancel"
        run.status, run.termination_reason = "done", "all_jobs_done"
        assert (await upstream.look(job, seen)).state == "completed"
        server.token = "rotated"
        with pytest.raises(UpstreamError) as refused:
            await upstream.look(job, seen)
        assert refused.value.status == 403 and not refused.value.transient
