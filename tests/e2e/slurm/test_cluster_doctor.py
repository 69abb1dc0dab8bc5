"""`bashgym doctor` asks each registered Slurm cluster, against the real test cluster (tests/support/slurm.py):
`sinfo` answers, the partition exists, the account is known, the shared directory is writable; a cluster
registered with a partition the cluster lacks fails its check, saying which partitions there are and what to do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.helpers import RunningDaemon, cli, running_daemon
from tests.support.mcp_client import call, session
from tests.support.slurm import SlurmCluster, daemon_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def cluster_body(cluster: SlurmCluster, cluster_id: str, **overrides: Any) -> dict[str, Any]:
    return {
        "cluster_id": cluster_id,
        "kind": "slurm",
        "partition": cluster.partition,
        "time_limit_min": 5,
        "shared_dir": str(cluster.shared_dir),
        **overrides,
    }


@pytest.fixture(scope="module")
def daemon(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("home"), env=daemon_env(slurm_cluster)) as running:
        with running.client() as admin:
            for body in (
                cluster_body(slurm_cluster, "hpc"),
                cluster_body(slurm_cluster, "typo", partition="gpu-long"),
            ):
                added = admin.post("/v1/clusters", json=body)
                assert added.status_code == 201, added.text
        yield running


def rows_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["check"]: row for row in report["checks"]}


def test_doctor_checks_each_cluster_and_says_what_to_do_about_a_wrong_partition(
    daemon: RunningDaemon, slurm_cluster: SlurmCluster
) -> None:
    report = cli(daemon.env(), "doctor", "--json")
    rows = rows_of(report.json())
    good, typo = rows["lane slurm:hpc"], rows["lane slurm:typo"]

    assert good["ready"], good
    assert {f["name"]: f["ok"] for f in good["facts"]["checks"]} == {
        "sinfo": True, "partition": True, "account": True, "shared_dir": True,
    }  # fmt: skip
    assert "`sinfo` answers on the daemon's host" in good["detail"]
    assert f"shared directory {slurm_cluster.shared_dir} is writable" in good["detail"]

    assert not typo["ready"]
    assert typo["detail"] == "partition 'gpu-long' is not one of the cluster's partitions (debug)"
    (failure,) = typo["facts"]["failures"]
    assert "bashgym cluster remove typo" in failure["advice"] and "--partition" in failure["advice"]
    # A registered lane is informational, like an SSH device: the daemon itself is ready.
    assert report.code == 0, report.stderr

    text = cli(daemon.env(), "doctor")
    assert "[warn] lane slurm:typo" in text.stdout
    assert "bashgym cluster remove typo" in text.stdout, text.stdout


def test_a_shared_directory_gone_from_the_host_fails_its_check(
    daemon: RunningDaemon, slurm_cluster: SlurmCluster
) -> None:
    gone = slurm_cluster.shared_dir / "gone"
    gone.mkdir()
    with daemon.client() as admin:
        added = admin.post("/v1/clusters", json=cluster_body(slurm_cluster, "moved", shared_dir=str(gone)))
        assert added.status_code == 201, added.text
    gone.rmdir()
    try:
        row = rows_of(cli(daemon.env(), "doctor", "--json").json())["lane slurm:moved"]
    finally:
        with daemon.client() as admin:
            admin.delete("/v1/clusters/moved")
    assert not row["ready"]
    assert row["detail"] == f"shared directory {gone} does not exist on the daemon's host"
    assert "--shared-dir" in row["facts"]["failures"][0]["advice"]


def test_an_account_slurm_does_not_know_fails_where_accounting_answers(
    daemon: RunningDaemon, slurm_cluster: SlurmCluster
) -> None:
    with daemon.client() as admin:
        added = admin.post("/v1/clusters", json=cluster_body(slurm_cluster, "billed", account="nobody-pays"))
        assert added.status_code == 201, added.text
    try:
        row = rows_of(cli(daemon.env(), "doctor", "--json").json())["lane slurm:billed"]
    finally:
        with daemon.client() as admin:
            admin.delete("/v1/clusters/billed")
    (account,) = [f for f in row["facts"]["checks"] if f["name"] == "account"]
    if slurm_cluster.has_accounting:
        assert not row["ready"]
        assert account["detail"] == "account 'nobody-pays' has no association in Slurm's accounting"
        assert "sacctmgr show assoc user=$USER" in account["advice"]
    else:  # without slurmdbd nothing can say: the check says so and does not fail the cluster
        assert row["ready"], row
        assert account["detail"].startswith("account nobody-pays could not be checked (no accounting?)")


@pytest.mark.anyio
async def test_an_agent_lists_the_clusters_beside_the_devices_of_its_own_workspace_only(daemon: RunningDaemon) -> None:
    viewer = issue_token(daemon, "agent-viewer", "viewer")
    async with session(daemon, viewer) as opened:
        failed, listed = await call(opened, "list_devices", {})
    assert not failed, listed
    assert listed["devices"] == []
    assert [c["cluster_id"] for c in listed["clusters"]] == ["hpc", "typo"]
    assert listed["clusters"][1]["partition"] == "gpu-long"
    rival = issue_token(daemon, "agent-rival", "admin", workspace="rival")
    async with session(daemon, rival) as opened:
        failed, listed = await call(opened, "list_devices", {})
    assert not failed and listed["clusters"] == [], listed
