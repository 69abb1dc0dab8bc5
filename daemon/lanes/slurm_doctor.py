"""`bashgym doctor`'s look at a registered Slurm cluster: `sinfo` answers, the partition exists, the account is
known to Slurm's accounting, and the shared directory is there and writable, each checked where the lane runs its
commands (the daemon's host, or the login node over SSH)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bashgym.client.errors import BashGymError
from bashgym.daemon.lanes.slurm_files import LocalCommands, SlurmCommands, SshCommands
from bashgym.daemon.lanes.slurm_jobs import SACCTMGR, SINFO, Cluster
from bashgym.daemon.lanes.ssh import Device, RemoteRun

CLUSTER_CHECK_TIMEOUT_S = 20.0  # doctor answers even when a cluster's controller does not


def finding(name: str, ok: bool, detail: str, advice: str = "") -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail, "advice": advice}


def _said(out: str, err: str, code: int) -> str:
    text = (err.strip() or out.strip()).splitlines()
    return text[-1] if text else f"exit code {code}"


async def check_registered(
    record: dict[str, Any], login: dict[str, Any] | None, environment: Mapping[str, str], slurm_conf: Path | None
) -> list[dict[str, Any]]:
    """A registered cluster's checks, run as its lane runs commands: here with the operator's slurm.conf, or on its
    login device (`login`, the device's record) over SSH."""
    cluster = Cluster.from_record(record)
    if login is None:
        return await check_cluster(cluster, LocalCommands(environment, slurm_conf), "the daemon's host")
    device = dataclasses.replace(Device.from_record(login), work_dir=cluster.shared_dir)
    remote = RemoteRun(device, "doctor", Path(cluster.shared_dir))  # commands only: nothing is mirrored
    try:
        return await check_cluster(cluster, SshCommands(remote), f"login node {device.device_id}")
    finally:
        await remote.close()


async def check_cluster(cluster: Cluster, commands: SlurmCommands, where: str) -> list[dict[str, Any]]:
    """Each check of the cluster, ok or not with what to do next; the later ones are skipped when sinfo is
    silent. `where` says where the commands ran (the daemon's host, or the login node)."""
    try:
        async with asyncio.timeout(CLUSTER_CHECK_TIMEOUT_S):
            return await _checks(cluster, commands, where)
    except TimeoutError:
        detail = f"the cluster did not answer within {CLUSTER_CHECK_TIMEOUT_S:g} s on {where}"
        return [finding("sinfo", False, detail, "Check that slurmctld is up and reachable from there.")]
    except BashGymError as exc:
        return [finding("sinfo", False, exc.message, exc.hint)]


async def _checks(cluster: Cluster, commands: SlurmCommands, where: str) -> list[dict[str, Any]]:
    code, out, err = await commands([SINFO, "-h", "-o", "%P"])
    if code != 0:
        advice = (
            "Check that slurmctld runs and that the Slurm client there reads the cluster's slurm.conf "
            "(BASHGYM_SLURM_CONF on the daemon's host, the login node's own configuration over SSH)."
        )
        return [finding("sinfo", False, f"`sinfo` failed on {where}: {_said(out, err, code)}", advice)]
    partitions = [line.strip().rstrip("*") for line in out.splitlines() if line.strip()]
    found = [finding("sinfo", True, f"`sinfo` answers on {where}")]
    if cluster.partition in partitions:
        found.append(finding("partition", True, f"partition {cluster.partition} exists"))
    else:
        found.append(
            finding(
                "partition",
                False,
                f"partition {cluster.partition!r} is not one of the cluster's partitions ({', '.join(partitions)})",
                f"Register the cluster again with one of them: bashgym cluster remove {cluster.cluster_id}, then "
                f"bashgym cluster add {cluster.cluster_id} --partition NAME ...",
            )
        )
    found.append(await _account(cluster, commands))
    found.append(await _shared_dir(cluster, commands, where))
    return found


async def _account(cluster: Cluster, commands: SlurmCommands) -> dict[str, Any]:
    if not cluster.account:
        return finding("account", True, "no account set (jobs use the user's default account)")
    code, out, err = await commands(
        [SACCTMGR, "-n", "-P", "show", "assoc", f"account={cluster.account}", "format=Account"]
    )
    if code != 0:
        said = _said(out, err, code)
        return finding("account", True, f"account {cluster.account} could not be checked (no accounting?): {said}")
    if out.strip():
        return finding("account", True, f"account {cluster.account} is known to Slurm's accounting")
    return finding(
        "account",
        False,
        f"account {cluster.account!r} has no association in Slurm's accounting",
        "Ask the cluster's admins to add it (sacctmgr add account), or register the cluster again with an account "
        "you belong to (`sacctmgr show assoc user=$USER` lists them).",
    )


SHARED_DIR_PROBLEMS = (
    (
        "-d",
        "does not exist",
        "Create it on the filesystem the compute nodes share (at the same path), or register the cluster again with "
        "the right --shared-dir.",
    ),
    ("-w", "is not writable", "Give the daemon's user (or the login device's user) write access to it."),
)


async def _shared_dir(cluster: Cluster, commands: SlurmCommands, where: str) -> dict[str, Any]:
    directory = cluster.shared_dir
    for flag, problem, advice in SHARED_DIR_PROBLEMS:
        code, _, _ = await commands(["test", flag, directory])
        if code != 0:
            return finding("shared_dir", False, f"shared directory {directory} {problem} on {where}", advice)
    return finding("shared_dir", True, f"shared directory {directory} is writable")
