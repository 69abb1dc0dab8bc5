"""The Slurm lane end to end against a real single-node Slurm (tests/support/slurm.py): a daemon on a free port
submits the tiny model's SFT as a batch job, follows it from pending to completion, brings its artifacts home
verified and settles its GPU-hours from Slurm's accounting; a stop is Slurm's cancel; a job killed by its time
limit fails the run saying so; a daemon killed after `sbatch` finds its job again at its restart."""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, eventually, running_daemon, wait_for_run
from tests.support.slurm import SlurmCluster, daemon_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
TERMINAL = {"completed", "failed", "cancelled", "unknown"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


def register(client: httpx.Client, cluster: SlurmCluster, cluster_id: str, time_limit_min: int = 5) -> None:
    body = {
        "cluster_id": cluster_id,
        "kind": "slurm",
        "partition": cluster.partition,
        "gpus_per_node": 1,
        "time_limit_min": time_limit_min,
        "shared_dir": str(cluster.shared_dir),
        "python": sys.executable,  # this checkout's bashgym, as the nodes' environment
    }
    added = client.post("/v1/clusters", json=body)
    assert added.status_code in {200, 201}, added.text


@pytest.fixture(scope="module")
def daemon(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("home"), env=daemon_env(slurm_cluster)) as running:
        with running.client() as admin:
            register(admin, slurm_cluster, "hpc")
            register(admin, slurm_cluster, "short", time_limit_min=1)
        yield running


@pytest.fixture(scope="module")
def time_limited_run(daemon: RunningDaemon, tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run on the cluster of a 1-minute limit that trains longer, started with the module: the minute it takes
    passes while the other tests run."""
    context = tracking_context(environment_id="slurm-short")  # an environment is one compute target
    body = training_request(
        tiny, sft_data(tmp_path_factory.mktemp("short")), compute_target="slurm:short", max_steps=100000,
        save_steps=1000, tracking_context=context,
    )  # fmt: skip
    with daemon.client() as client:
        return str(start(client, body)["run_id"])


def start(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    started = client.post("/v1/training/start", json=body)
    assert started.status_code == 201, started.text
    return dict(started.json())


def wait_for(client: httpx.Client, run_id: str, statuses: set[str], timeout_s: float = 180) -> dict[str, Any]:
    return dict(wait_for_run(client, "nightly", run_id, statuses, timeout_s=timeout_s))


def remote_logs(client: httpx.Client, run_id: str) -> list[str]:
    page = client.get("/v1/projects/nightly/events", params={"type": "run.remote_log", "limit": 1000}).json()
    return [e["payload"]["message"] for e in page["events"] if e["run_id"] == run_id]


def wait_for_log(client: httpx.Client, run_id: str, text: str, timeout_s: float = 60) -> list[str]:
    def said() -> list[str]:
        logs = remote_logs(client, run_id)
        return logs if any(text in line for line in logs) else []

    return list(eventually(f"a remote log of run {run_id} saying {text!r}", said, timeout_s, every_s=0.3))


def lane_of(daemon: RunningDaemon, run_id: str) -> dict[str, Any]:
    return dict(json.loads((daemon.home / "runs" / run_id / "lane.json").read_text()))


def settled_gpu_hours(daemon: RunningDaemon, run_id: str) -> float:
    with sqlite3.connect(f"file:{daemon.home / 'ledger.sqlite3'}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT gpu_hours FROM budget_entries WHERE entry_id = ?", (f"{run_id}.settle",)).fetchone()
    assert row is not None, f"run {run_id} has no settle entry"
    return float(row[0])


@pytest.mark.usefixtures("time_limited_run")  # started first: its minute runs meanwhile
def test_a_run_is_one_job_from_pending_to_verified_artifacts_and_settled_gpu_hours(
    daemon: RunningDaemon, slurm_cluster: SlurmCluster, tiny: Path, tmp_path: Path
) -> None:
    # The node takes no new job (drained, as an admin does for maintenance), so the run's job waits and says why;
    # then it runs. Jobs already running there (the time-limit test's) go on.
    node = slurm_cluster.node_name
    slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=bashgym-test")
    try:
        with daemon.client() as client:
            run = start(client, training_request(tiny, sft_data(tmp_path), compute_target="slurm:hpc"))
            run_id = run["run_id"]
            assert run["lane"] == "slurm"
            wait_for_log(client, run_id, "is pending (")
            assert client.get(f"/v1/projects/nightly/runs/{run_id}").json()["status"] == "preparing"
    finally:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    with daemon.client() as client:
        ended = wait_for(client, run_id, TERMINAL)
        assert ended["status"] == "completed", ended["attempts"][-1]
        logs = remote_logs(client, run_id)
        job_id = lane_of(daemon, run_id)["job_id"]
        assert logs[0].startswith(f"submitted Slurm job {job_id} to partition {slurm_cluster.partition}")
        assert any(f"Slurm job {job_id} is pending (" in line for line in logs)
        assert any(line.startswith(f"Slurm job {job_id} is running on {slurm_cluster.node_name}") for line in logs)

    assert ended["metric_summary"]["train.loss"]["count"] == 4, "the metrics came back through the shared directory"
    assert "adapter" in {a["kind"] for a in ended["artifacts"]}
    run_dir = daemon.home / "runs" / run_id
    for artifact in ended["artifacts"]:
        path = run_dir / artifact["uri"].removeprefix(f"bashgym://runs/{run_id}/")
        assert hashlib.sha256(path.read_bytes()).hexdigest() == artifact["sha256"], path
    assert (run_dir / "training.log").stat().st_size > 0, "the job's log is mirrored home"
    assert (run_dir / "job.sbatch").read_text().startswith("#!/bin/bash\n#SBATCH --job-name=bashgym-")
    assert not (slurm_cluster.shared_dir / run_id).exists(), "a completed run leaves nothing in the shared directory"

    job = slurm_cluster.job(job_id)
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0")
    assert job["Comment"] == f"bashgym:{run_id}:{run_id}.a1:1"
    if slurm_cluster.has_accounting:
        accounted = slurm_cluster.wait_for_accounting(job_id, {"COMPLETED"})
        assert "gres/gpu=1" in accounted["AllocTRES"]
        assert settled_gpu_hours(daemon, run_id) == pytest.approx(int(accounted["ElapsedRaw"]) / 3600, abs=2 / 3600)
    assert settled_gpu_hours(daemon, run_id) > 0, "elapsed time x the one GPU allocated"

    # What came home is evidence like a local run's: the daemon evaluates it and the gate reads that evaluation.
    with daemon.client() as client:
        asked = client.post("/v1/projects/nightly/evaluations", json={"run_id": run_id, "limit_tasks": 2, "samples": 1})
        assert asked.status_code == 202, asked.text
        evaluation = f"/v1/projects/nightly/evaluations/{asked.json()['evaluation_id']}"
        job = eventually("the evaluation's end", lambda: terminal_job(client.get(evaluation).json()), 240, every_s=0.5)
        assert job["status"] == "completed", job
        result = client.get(f"/v1/projects/nightly/eval-results/{job['result_id']}").json()["result"]
        assert (result["run_id"], result["provenance"]) == (run_id, "measured")
        gate = client.get(f"/v1/projects/nightly/runs/{run_id}/gate").json()
    assert "no_evaluation" not in {b["code"] for b in gate["blockers"]}, gate


def terminal_job(job: dict[str, Any]) -> dict[str, Any] | None:
    return job if job["status"] in {"completed", "failed"} else None


@pytest.mark.usefixtures("time_limited_run")  # started first: its minute runs meanwhile
def test_pause_checkpoints_and_ends_the_job_resume_submits_again_and_stop_is_slurms_cancel(
    daemon: RunningDaemon, slurm_cluster: SlurmCluster, tiny: Path, tmp_path: Path
) -> None:
    body = training_request(tiny, sft_data(tmp_path), compute_target="slurm:hpc", max_steps=100000, save_steps=5)
    with daemon.client() as client:
        run_id = start(client, body)["run_id"]
        wait_until_checkpoint(slurm_cluster.shared_dir / run_id)  # a trainer that answers SIGUSR1 by now
        first_job = lane_of(daemon, run_id)["job_id"]
        busy = client.delete("/v1/clusters/hpc")
        assert busy.status_code == 409 and f"Cluster hpc has active runs: {run_id}" in busy.text, busy.text
        assert client.post(f"/v1/projects/nightly/runs/{run_id}/pause").status_code == 202
        paused = wait_for(client, run_id, {"paused", *TERMINAL}, timeout_s=60)
        assert paused["status"] == "paused", paused["attempts"][-1]
        assert slurm_cluster.job(first_job)["JobState"] != "RUNNING", "a paused run holds no allocation"
        assert list((slurm_cluster.shared_dir / run_id).glob("checkpoint-*")), "the trainer checkpointed first"

        assert client.post(f"/v1/projects/nightly/runs/{run_id}/resume").status_code == 202
        wait_for_log(client, run_id, "submitted Slurm job", timeout_s=30)
        wait_for(client, run_id, {"running"})
        lane = lane_of(daemon, run_id)
        assert lane["job_id"] != first_job and lane["jobs"] == [first_job, lane["job_id"]]
        script = (daemon.home / "runs" / run_id / "job.sbatch").read_text()
        assert "resume=--resume" in script and f"--comment=bashgym:{run_id}:{run_id}.a1:2" in script
        starts = wait_for_starts(daemon, run_id, 2)
        assert str(starts[1]["resumed_from"]).startswith("checkpoint-"), "the new job went on from the pause's"

        stopped = client.post(f"/v1/projects/nightly/runs/{run_id}/stop")
        assert stopped.status_code in {200, 202}, stopped.text
        ended = wait_for(client, run_id, TERMINAL, timeout_s=60)
    assert ended["status"] == "cancelled", ended["attempts"][-1]
    assert "stopped by" in ended["attempts"][-1]["status_reason"]
    assert slurm_cluster.job(lane["job_id"])["JobState"] == "CANCELLED", "Slurm saw the cancel"
    assert not slurm_cluster.run("squeue", "--noheader", f"--name=bashgym-{run_id}").stdout.strip(), "no orphan"
    tally = lane_of(daemon, run_id)
    assert tally["charged_jobs"] == [first_job, lane["job_id"]] and tally["gpu_seconds"] > 0
    assert settled_gpu_hours(daemon, run_id) == tally["gpu_seconds"] / 3600, "both jobs' time, charged once at the end"


@pytest.mark.usefixtures("time_limited_run")  # started first: its minute runs meanwhile
def test_a_requeued_job_goes_on_from_its_checkpoint_as_a_new_attempt(
    daemon: RunningDaemon, slurm_cluster: SlurmCluster, tiny: Path, tmp_path: Path
) -> None:
    body = training_request(tiny, sft_data(tmp_path), compute_target="slurm:hpc", max_steps=24, save_steps=4)
    with daemon.client() as client:
        run_id = start(client, body)["run_id"]
        wait_for(client, run_id, {"running"})
        wait_until_checkpoint(slurm_cluster.shared_dir / run_id)
        job_id = lane_of(daemon, run_id)["job_id"]
        slurm_cluster.run("scontrol", "requeue", job_id)  # what a preemption with requeue does
        # Slurm holds a requeued job back (BeginTime, about two minutes); the test lets it start at once.
        slurm_cluster.wait_for_job(job_id, {"PENDING"})
        slurm_cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        ended = wait_for(client, run_id, {"completed", "failed", "cancelled"}, timeout_s=240)  # not `unknown` between
        logs = remote_logs(client, run_id)
    assert ended["status"] == "completed", ended["attempts"][-1]
    assert [a["status"] for a in ended["attempts"]] == ["failed", "completed"], ended["attempts"]
    assert f"Slurm job {job_id} was requeued by Slurm (restart 1)" in ended["attempts"][0]["status_reason"]
    assert any("goes on from its last checkpoint as a new attempt" in line for line in logs)
    assert lane_of(daemon, run_id)["jobs"] == [job_id], "the same job, requeued: nothing submitted again"
    starts = trainer_starts(daemon, run_id)
    assert len(starts) == 2 and str(starts[1]["resumed_from"]).startswith("checkpoint-"), starts
    assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", "-o", job_id).stdout


def wait_until_checkpoint(run_dir: Path, timeout_s: float = 120) -> None:
    """Until the trainer has completed a checkpoint (its marker is written last)."""
    markers = functools.partial(run_dir.glob, "checkpoint-*/checkpoint_complete.json")
    eventually(f"a complete checkpoint in {run_dir}", lambda: list(markers()), timeout_s, every_s=0.3)


def trainer_starts(daemon: RunningDaemon, run_id: str) -> list[dict[str, Any]]:
    """The `started` lines of the run's trainers, as mirrored home: each says what it resumed from."""
    # Complete lines only: the mirror copies what the job wrote so far, which may end mid-line.
    protocol = (daemon.home / "runs" / run_id / "protocol.jsonl").read_text().split("\n")[:-1]
    return [json.loads(line) for line in protocol if '"event": "started"' in line]


def wait_for_starts(daemon: RunningDaemon, run_id: str, count: int, timeout_s: float = 90) -> list[dict[str, Any]]:
    def started() -> list[dict[str, Any]]:
        starts = trainer_starts(daemon, run_id)
        return starts if len(starts) >= count else []

    return list(eventually(f"{count} starts of run {run_id}'s trainer", started, timeout_s, every_s=0.3))


def test_a_job_killed_by_its_time_limit_fails_the_run_saying_so(
    daemon: RunningDaemon, slurm_cluster: SlurmCluster, time_limited_run: str
) -> None:
    run_id = time_limited_run
    with daemon.client() as client:
        ended = wait_for(client, run_id, TERMINAL, timeout_s=150)
    assert ended["status"] == "failed", ended
    job_id = lane_of(daemon, run_id)["job_id"]
    reason = ended["attempts"][-1]["status_reason"]
    # Killed at the limit (TIMEOUT), or checkpointed on Slurm's warning ahead of it (the warning comes up to a
    # minute early): either way the run failed for its time limit.
    assert reason.startswith(f"time limit: Slurm job {job_id} "), ended
    assert "its time limit of 1 min" in reason, reason
    state = slurm_cluster.job(job_id)["JobState"]
    assert state in {"TIMEOUT", "FAILED"}, state
    assert "--time=1" in (daemon.home / "runs" / run_id / "job.sbatch").read_text()


def test_a_daemon_killed_after_sbatch_finds_its_job_and_never_submits_twice(
    slurm_cluster: SlurmCluster, tiny: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with running_daemon(home, env=daemon_env(slurm_cluster, BASHGYM_FAILPOINT="training.slurm.submitted")) as first:
        with first.client() as client:
            register(client, slurm_cluster, "hpc")
            run_id = start(client, training_request(tiny, sft_data(tmp_path), compute_target="slurm:hpc"))["run_id"]
        assert first.proc.wait(timeout=60) == -9, "the failpoint killed the daemon right after sbatch"
    assert lane_of_home(home, run_id)["submitting"] is True and lane_of_home(home, run_id)["job_id"] is None
    jobs = slurm_cluster.run("squeue", "--noheader", "--states=all", f"--name=bashgym-{run_id}", "--format=%i")
    submitted = jobs.stdout.split()
    assert len(submitted) == 1, jobs.stdout

    with running_daemon(home, env=daemon_env(slurm_cluster)) as second, second.client() as client:
        ended = wait_for(client, run_id, TERMINAL)
        logs = remote_logs(client, run_id)
    assert ended["status"] == "completed", ended
    assert f"found Slurm job {submitted[0]} submitted before the daemon restarted" in " ".join(logs)
    again = slurm_cluster.run("squeue", "--noheader", "--states=all", f"--name=bashgym-{run_id}", "--format=%i")
    assert again.stdout.split() == submitted, "one job for the run, never a second submission"


def lane_of_home(home: Path, run_id: str) -> dict[str, Any]:
    return dict(json.loads((home / "runs" / run_id / "lane.json").read_text()))
