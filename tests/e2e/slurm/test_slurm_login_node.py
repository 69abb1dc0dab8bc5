"""A Slurm cluster reached through its login node: the lane's commands run over SSH (the stand-in server on
127.0.0.1, tests/support/ssh_standin.py) against the real test cluster, and the run's files move over SFTP."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from bashgym.ledger.store import Ledger
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import sft_data, training_request
from tests.support.helpers import inprocess_daemon, wait_for_status
from tests.support.slurm import SlurmCluster
from tests.support.ssh_standin import ssh_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(240)]
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel")


def login_node_path(tmp_path: Path, cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The login node's Slurm commands find the cluster's slurm.conf, as a login node's own configuration does:
    wrappers first on its PATH (the stand-in's commands inherit this process's PATH, never the daemon's env)."""
    wrappers = tmp_path / "login-bin"
    wrappers.mkdir()
    for name in SLURM_COMMANDS:
        wrapper = wrappers / name
        wrapper.write_text(f'#!/bin/sh\nSLURM_CONF={cluster.env["SLURM_CONF"]} exec /usr/bin/{name} "$@"\n')
        wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}:{os.environ['PATH']}")


async def test_a_run_on_a_cluster_behind_its_login_node_completes_over_ssh(
    ledger: Ledger, slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login_node_path(tmp_path, slurm_cluster, monkeypatch)
    tiny = build_tiny(tmp_path / "tiny")
    async with ssh_server(tmp_path / "ssh") as ssh, inprocess_daemon(ledger, tmp_path / "home") as api:
        # The stand-in's SFTP is rooted at its home: the shared directory appears there at the path the compute
        # nodes use, as the same mount would on a login node.
        seen = ssh.home / str(slurm_cluster.shared_dir).lstrip("/")
        seen.parent.mkdir(parents=True)
        seen.symlink_to(slurm_cluster.shared_dir)
        assert (await api.post("/v1/devices", json=ssh.device("login1"))).status_code == 201
        cluster = {
            "cluster_id": "hpc",
            "kind": "slurm",
            "login_device_id": "login1",
            "partition": slurm_cluster.partition,
            "time_limit_min": 5,
            "shared_dir": str(slurm_cluster.shared_dir),
            "python": sys.executable,
        }
        added = await api.post("/v1/clusters", json=cluster)
        assert added.status_code == 201, added.text
        assert added.json()["record"]["access"] == "ssh"

        body = training_request(tiny, sft_data(tmp_path), compute_target="slurm:hpc")
        started = await api.post("/v1/training/start", json=body)
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        run = await wait_for_status(api, "nightly", run_id, {"completed", "failed", "cancelled"}, timeout_s=180)
    assert run["status"] == "completed", run["attempts"][-1]
    assert run["artifacts"], "the adapter came home over SFTP, verified"
    assert any(c.startswith("sbatch --parsable ") for c in ssh.commands), ssh.commands
    assert any(c.startswith("scontrol show job -o ") for c in ssh.commands)
    assert not (slurm_cluster.shared_dir / run_id).exists(), "the completed run's directory is removed"
