"""Scale-out through the daemon (issue 14): one run, two processes, through `accelerate launch` on the CPU (gloo).

The tiny model trains for real in two ranks; the ledger must see one run with one set of metrics and artifacts,
its world size, and GPU-hours for every rank; a stop or a dead rank must leave no process behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, running_daemon
from tests.support.helpers import wait_for_run as wait_for

TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    # One GPU per local run, as the daemon's accounting setting: a run of two ranks is charged for two.
    env = {"BASHGYM_LOCAL_SLOTS": "1", "BASHGYM_LOCAL_GPUS": "1"}
    with running_daemon(tmp_path_factory.mktemp("home"), env=env) as running:
        yield running


def processes_of(run_dir: Path) -> list[str]:
    """Every live process whose command line names the run directory: the launcher and its ranks."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if entry.name.isdigit() and str(run_dir).encode() in cmdline and state != "Z":
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def hours(run: dict[str, Any]) -> float:
    start, end = (datetime.fromisoformat(run[k].replace("Z", "+00:00")) for k in ("started_at", "ended_at"))
    return (end - start).total_seconds() / 3600


def project(name: str) -> dict[str, Any]:
    return tracking_context(project_id=name, project_display_name=name)


def test_two_processes_train_one_run_with_one_set_of_metrics_and_artifacts(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    request = training_request(tiny, sft_data(tmp_path), num_processes=2, tracking_context=project("ddp"))
    with daemon.client() as client:
        started = client.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run = wait_for(client, "ddp", started.json()["run_id"], TERMINAL)
        budget = client.get("/v1/projects/ddp/budget").json()
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
    topology = run["topology"]
    assert (topology["world_size"], topology["num_machines"], topology["launcher"]) == (2, 1, "accelerate")
    assert topology["members"] == [{"machine_rank": 0, "device_id": "local"}]
    # One set of metrics: one train.loss per step, written by rank 0 alone.
    assert run["metric_summary"]["train.loss"]["count"] == 4
    assert sorted(a["kind"] for a in run["artifacts"]) == ["adapter"] * (len(run["artifacts"]) - 1) + ["config"]
    assert len({a["uri"] for a in run["artifacts"]}) == len(run["artifacts"]) > 0
    run_dir = daemon.home / "runs" / run["run_id"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # The training metrics (the system sampler's system.* lines share their steps; it runs on rank 0 alone too).
    steps = [r["step"] for r in records if not all(name.startswith("system.") for name in r["metrics"])]
    assert steps == sorted(set(steps)), "each step logged once"
    sampled = [r["step"] for r in records if all(name.startswith("system.") for name in r["metrics"])]
    assert sampled == sorted(set(sampled)), "the system sampler records a step once"
    config = (run_dir / "accelerate_config.yaml").read_text()
    assert "num_processes: 2" in config and "distributed_type: MULTI_GPU" in config
    profile = json.loads((run_dir / "model_profile.json").read_text())
    assert profile["distributed"]["world_size"] == 2 and profile["distributed"]["backend"] == "gloo"
    # GPU-hours for every rank: two ranks on a lane counted at one GPU per run each hold one.
    assert budget["settled"]["gpu_hours"] == pytest.approx(2 * hours(run), rel=1e-6)
    assert cli(daemon.env(), "ledger", "verify").code == 0


@pytest.mark.slow  # 15 s of two ranks pausing and resuming: make test keeps its 10 minutes, CI still runs it
def test_pause_resume_and_stop_act_on_every_rank(daemon: RunningDaemon, tiny: Path, tmp_path: Path) -> None:
    request = training_request(
        tiny,
        sft_data(tmp_path, 64),
        num_processes=2,
        max_steps=20_000,  # still training whenever the test acts on it; the test stops it
        save_steps=1000,
        learning_rate=1e-4,
        tracking_context=project("ddp-control"),
    )
    env = daemon.env()
    with daemon.client() as client:
        run_id = client.post("/v1/training/start", json=request).json()["run_id"]
        run_dir = daemon.home / "runs" / run_id
        wait_for(client, "ddp-control", run_id, {"running"})
        assert len(processes_of(run_dir)) == 3, "the launcher and two ranks"
        assert cli(env, "training", "pause", run_id, "--project", "ddp-control").code == 0
        paused = wait_for(client, "ddp-control", run_id, {"paused", *TERMINAL})
        assert paused["status"] == "paused", paused["attempts"][-1]["error_summary"]
        assert processes_of(run_dir) == []
        checkpoint = json.loads(next(run_dir.glob("checkpoint-*/checkpoint_complete.json")).read_text())
        assert checkpoint["world_size"] == 2
        assert cli(env, "training", "resume", run_id, "--project", "ddp-control").code == 0
        wait_for(client, "ddp-control", run_id, {"running"})
        assert cli(env, "training", "stop", run_id, "--project", "ddp-control").code == 0
        stopped = wait_for(client, "ddp-control", run_id, TERMINAL)
    assert stopped["status"] == "cancelled"
    assert processes_of(run_dir) == []
    # Resumed from the checkpoint both ranks wrote, not from step 0: it logged steps past it.
    assert stopped["metric_summary"]["train.loss"]["last_step"] > checkpoint["step"]


def test_a_rank_that_dies_fails_the_run_naming_it_and_leaves_no_process(
    tmp_path_factory: pytest.TempPathFactory, tiny: Path, tmp_path: Path
) -> None:
    # Rank 1 SIGKILLs itself at its second step; rank 0 then fails on the broken connection.
    env = {"BASHGYM_FAILPOINT": "trainer.step:rank1@2"}
    request = training_request(tiny, sft_data(tmp_path), num_processes=2, max_steps=50, tracking_context=None)
    with running_daemon(tmp_path_factory.mktemp("home"), env=env) as running, running.client() as client:
        run_id = client.post("/v1/training/start", json=request).json()["run_id"]
        run = wait_for(client, "unassigned", run_id, TERMINAL)
        run_dir = running.home / "runs" / run_id
        remaining = processes_of(run_dir)
    assert run["status"] == "failed"
    error = run["attempts"][-1]["error_summary"]
    assert error.startswith("rank 1 (machine 0, local rank 1, pid "), error
    assert "killed by SIGKILL" in error
    assert remaining == []
    record = json.loads((run_dir / "launch.json").read_text())
    assert record["first_rank"] == 1
