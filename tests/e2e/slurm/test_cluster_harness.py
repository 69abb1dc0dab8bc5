"""The test Slurm cluster (tests/support/slurm.py) is a real one: jobs run, fail with their exit code, wait with
the reason Slurm gives, are cancelled, requeued and time out as on a team's cluster, and `scontrol` and `sacct`
say so, as the Slurm lane reads them (issue 55, item 2). Every test file here shares the session's cluster, the
`slurm_cluster` fixture of this directory's conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.slurm import SlurmCluster, only_in, our_processes, start_slurm_cluster, wait_until

pytestmark = pytest.mark.timeout(90)

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The session's cluster, with accounting: these tests read `sacct` as the lane does."""
    if not slurm_cluster.has_accounting:
        pytest.skip("the test cluster runs without accounting here: install mariadb-server-core and slurmdbd")
    return slurm_cluster


def test_a_job_completes_with_its_output_and_its_gpus_billed(cluster: SlurmCluster) -> None:
    job_id = cluster.submit(
        "--job-name=hello", "--comment=run-7f3a", "--gpus=1", "--output=hello-%j.out", "--wrap", "echo hi $SLURM_JOB_ID"
    )

    job = cluster.wait_for_job(job_id, ENDED)
    # sacct first shows the job as `allocation`, with no comment, until slurmctld sends it the job's record (a few
    # seconds after it ended); its state, exit code and allocation are right before that.
    row = wait_until(
        "sacct to hold the job's name", lambda: only_in(cluster.accounting(job_id), "JobName", {"hello"}), timeout_s=30
    )

    assert (job["JobState"], job["ExitCode"], job["NodeList"], job["Comment"]) == (
        "COMPLETED",
        "0:0",
        cluster.node_name,
        "run-7f3a",
    )
    assert (cluster.shared_dir / f"hello-{job_id}.out").read_text() == f"hi {job_id}\n"
    assert (row["State"], row["ExitCode"], row["Comment"]) == ("COMPLETED", "0:0", "run-7f3a")
    assert "gres/gpu=1" in row["AllocTRES"].split(","), row
    assert int(row["ElapsedRaw"]) >= 0


def test_a_job_exiting_3_fails_with_exit_code_3(cluster: SlurmCluster) -> None:
    job_id = cluster.submit("--wrap", "exit 3")

    job = cluster.wait_for_job(job_id, ENDED)
    row = cluster.wait_for_accounting(job_id, ENDED)

    assert (job["JobState"], job["Reason"], job["ExitCode"]) == ("FAILED", "NonZeroExitCode", "3:0")
    assert (row["State"], row["ExitCode"]) == ("FAILED", "3:0")


def test_a_running_job_cancelled_is_cancelled(cluster: SlurmCluster) -> None:
    job_id = cluster.submit("--wrap", "sleep 120")
    cluster.wait_for_job(job_id, {"RUNNING"})

    cluster.run("scancel", job_id)

    job = cluster.wait_for_job(job_id, ENDED)
    row = cluster.wait_for_accounting(job_id, ENDED)
    # SIGTERM either kills the job's shell (0:15) or the shell exits with 128 + 15: the state is what to read.
    assert (job["JobState"], job["ExitCode"] in {"0:15", "143:0"}) == ("CANCELLED", True), job
    assert row["State"] == "CANCELLED by 0"  # by the uid that cancelled it (root)


def test_a_held_job_pends_with_its_reason_until_released(cluster: SlurmCluster) -> None:
    job_id = cluster.submit("--hold", "--wrap", "true")

    job = cluster.wait_for_job(job_id, {"PENDING"})
    queued = cluster.run("squeue", "-h", "-j", job_id, "-o", "%T|%r").stdout.strip()
    assert (job["Reason"], queued) == ("JobHeldUser", "PENDING|JobHeldUser")
    # sacct knows the job is pending; its Reason column says None until slurmctld updates the job's record there,
    # so the reason is squeue's and scontrol's.
    cluster.wait_for_accounting(job_id, {"PENDING"})

    cluster.run("scontrol", "release", job_id)
    assert cluster.wait_for_job(job_id, ENDED)["JobState"] == "COMPLETED"


@pytest.mark.slow  # 12 s: Slurm holds a requeued job back 11 s
def test_a_requeued_job_runs_again_as_a_second_attempt(cluster: SlurmCluster) -> None:
    marker = cluster.shared_dir / "attempts.txt"
    job_id = cluster.submit("--wrap", f"echo ${{SLURM_RESTART_COUNT:-0}} >> {marker}; sleep 120")
    cluster.wait_for_job(job_id, {"RUNNING"})

    cluster.run("scontrol", "requeue", job_id)

    # Slurm holds a requeued job back for cred_expire and a second (tests/support/slurm.py sets 10 s), then runs it.
    held = wait_until(
        f"job {job_id} pending, requeued", lambda: only_in(cluster.job(job_id), "Reason", {"BeginTime"}), timeout_s=10
    )
    again = cluster.wait_for_job(job_id, {"RUNNING"}, timeout_s=30)
    cluster.wait_for_accounting(job_id, {"RUNNING"})  # the second attempt, a moment after scontrol's
    attempts = cluster.attempts(job_id)
    lines = wait_until(
        "the second attempt's line",
        lambda: marker.read_text().split()[1:] and marker.read_text().split(),
        timeout_s=10,
        describe=marker.read_text,
    )
    cluster.run("scancel", job_id)
    assert (held["JobState"], held["Restarts"], again["Restarts"]) == ("PENDING", "1", "1")
    assert [row["State"] for row in attempts] == ["REQUEUED", "RUNNING"]
    assert lines == ["0", "1"]  # the job's own count of its attempts, $SLURM_RESTART_COUNT


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_job_past_its_time_limit_times_out(cluster: SlurmCluster) -> None:
    job_id = cluster.submit("--time=1", "--wrap", "sleep 300")  # one minute, Slurm's least

    # slurmctld looks for jobs past their limit every 30 s: the job ends 60 to 90 s after it started.
    job = cluster.wait_for_job(job_id, ENDED, timeout_s=150)
    row = cluster.wait_for_accounting(job_id, ENDED)

    assert (job["JobState"], job["Reason"], job["TimeLimit"]) == ("TIMEOUT", "TimeLimit", "00:01:00")
    assert (row["State"], row["ExitCode"]) == ("TIMEOUT", "0:0")
    assert int(row["ElapsedRaw"]) >= 60


def test_stopping_the_cluster_leaves_no_daemon_or_job_of_its_own(tmp_path: Path) -> None:
    script = tmp_path / "long.sh"
    with start_slurm_cluster(tmp_path / "slurm") as cluster:
        script.write_text("#!/bin/sh\nsleep 300\n")
        job_id = cluster.submit(str(script))
        cluster.wait_for_job(job_id, {"RUNNING"})
        running = our_processes(tmp_path)
        assert {"slurmctld", "slurmd", "munged"} <= {name for name, _ in running}, running

    assert our_processes(tmp_path) == []
