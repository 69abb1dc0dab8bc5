"""The test Slurm cluster (tests/support/slurm.py) is a real one: jobs run, fail with their exit code, are
cancelled and time out as on a team's cluster, and `sacct` and `scontrol` say so (issue 55, item 2). The Slurm
lane's tests start the same cluster with the `slurm_cluster` fixture."""

from __future__ import annotations

import pytest

from tests.support.slurm import SlurmCluster, slurm_cluster

__all__ = ["slurm_cluster"]  # the session's cluster, shared with the lane's tests
pytestmark = pytest.mark.timeout(90)


def test_a_wrapped_command_completes_with_its_output_in_the_shared_directory(slurm_cluster: SlurmCluster) -> None:
    job_id = slurm_cluster.submit(
        "--job-name=hello", "--output=hello-%j.out", "--wrap", "echo hello from $SLURM_JOB_ID"
    )

    job = slurm_cluster.wait_for_job(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})

    assert (job["JobState"], job["ExitCode"], job["NodeList"]) == ("COMPLETED", "0:0", slurm_cluster.node_name)
    assert (slurm_cluster.shared_dir / f"hello-{job_id}.out").read_text() == f"hello from {job_id}\n"
