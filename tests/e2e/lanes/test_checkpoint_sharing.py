"""A group run's resume: each machine saved its own copy of the checkpoint, so the daemon copies a member only the
files of member 0's copy it lacks or holds different, the completion marker last (two devices on the SSH
stand-in; the group run itself is in test_scale_out_group.py)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bashgym.client.specs import Actor
from bashgym.daemon.lanes import ssh as ssh_module
from bashgym.daemon.lanes.group import GroupSupervisor
from bashgym.daemon.lanes.ssh import Device, DeviceUnavailable, RemoteRun
from bashgym.daemon.lanes.supervisor import RunHandle
from bashgym.ledger.store import Ledger

from tests.support.ssh_standin import SshServer, ssh_server

pytestmark = pytest.mark.anyio
RUN = "run-share"
NAME = "checkpoint-5"


class DeviceWithoutSha256sum(RemoteRun):
    async def digests(self, name: str) -> dict[str, str] | None:
        return None


@pytest.fixture
async def ssh(tmp_path: Path) -> AsyncIterator[SshServer]:
    async with ssh_server(tmp_path / "ssh") as server:
        yield server


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


async def share(ssh: SshServer, ledger: Ledger, tmp_path: Path, member: type[RemoteRun] = RemoteRun) -> list[str]:
    """Run the resume's checkpoint sharing from m0 to m1; return the files written into m1's checkpoint, in order."""
    run_dir = tmp_path / "home" / "runs" / RUN
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run_state.json").write_text(json.dumps({"status": "paused", "last_checkpoint": NAME}))
    records = [{**ssh.device(device_id), "gpus": 0, "slots": 1, "known_hosts": ""} for device_id in ("m0", "m1")]
    devices = [Device.from_record(record) for record in records]
    handle = RunHandle("default", "unassigned", RUN, "attempt-1", run_dir, "sft")
    group = {"group_id": "pair", "main_process_ip": "127.0.0.1", "main_process_port": 29500}
    supervisor = GroupSupervisor(handle, ledger, Actor(actor_id="test"), devices, group, grace_s=5, poll_s=0.2)
    supervisor.members = [member(devices[1], RUN, run_dir / "machine-1")]
    before = len(ssh.sftp_ops)
    for remote in (supervisor.remote, *supervisor.members):
        await remote.open()
    try:
        said = await supervisor._share_checkpoint()
    finally:
        for remote in (supervisor.remote, *supervisor.members):
            await remote.close()
    assert not (run_dir / "machine-0" / NAME).exists(), "the staging copy is removed"
    prefix = f"work-m1/{RUN}/{NAME}/"
    written = [path.split(prefix)[1] for op, path in ssh.sftp_ops[before:] if op == "open:write" and prefix in path]
    held = len(files_of(ssh.home / "work-m0" / RUN / NAME))
    (line,) = said  # what the run's events get: one line per member
    assert line.startswith(f"resume: {NAME} sent to m1: {len(written)} of its {held} files ("), line
    return written


RANK_0 = {
    "model.safetensors": os.urandom(1 << 20),
    "optimizer.pt": os.urandom(1 << 20),
    "trainer_state.json": b'{"global_step": 5, "best_model_checkpoint": "/m0/..."}',
    "rng_state_0.pth": b"rank 0",
    "global_step5/zero_pp_rank_0_optim_states.pt": b"rank 0's shard",
    "checkpoint_complete.json": b'{"step": 5}',
}


async def test_a_member_receives_only_what_its_own_copy_lacks_or_holds_different_and_the_marker_last(
    ssh: SshServer, ledger: Ledger, tmp_path: Path
) -> None:
    write_files(ssh.home / "work-m0" / RUN / NAME, RANK_0)
    own = {
        "model.safetensors": RANK_0["model.safetensors"],
        "optimizer.pt": RANK_0["optimizer.pt"],
        "trainer_state.json": b'{"global_step": 5, "best_model_checkpoint": "/m1/..."}',
        "rng_state_1.pth": b"rank 1",
        "global_step5/zero_pp_rank_1_optim_states.pt": b"rank 1's shard",
    }
    write_files(ssh.home / "work-m1" / RUN / NAME, own)

    written = await share(ssh, ledger, tmp_path)

    expected = ["global_step5/zero_pp_rank_0_optim_states.pt", "rng_state_0.pth", "trainer_state.json"]
    assert written == [*expected, "checkpoint_complete.json"]
    held = files_of(ssh.home / "work-m1" / RUN / NAME)
    assert held == {**own, **RANK_0}, "member 0's files over the member's own, which it keeps"
    before = len(ssh.sftp_ops)
    assert await share(ssh, ledger, tmp_path) == [], "a second resume from the same checkpoint moves nothing"
    assert not [path for op, path in ssh.sftp_ops[before:] if op.startswith("open") and f"/{NAME}/" in path]


async def test_a_member_without_its_own_copy_receives_the_whole_checkpoint(
    ssh: SshServer, ledger: Ledger, tmp_path: Path
) -> None:
    write_files(ssh.home / "work-m0" / RUN / NAME, RANK_0)

    written = await share(ssh, ledger, tmp_path)

    assert sorted(written) == sorted(RANK_0) and written[-1] == "checkpoint_complete.json"
    assert files_of(ssh.home / "work-m1" / RUN / NAME) == RANK_0


async def test_a_member_that_cannot_hash_receives_the_whole_checkpoint(
    ssh: SshServer, ledger: Ledger, tmp_path: Path
) -> None:
    write_files(ssh.home / "work-m0" / RUN / NAME, RANK_0)
    write_files(ssh.home / "work-m1" / RUN / NAME, {"optimizer.pt": RANK_0["optimizer.pt"]})

    written = await share(ssh, ledger, tmp_path, member=DeviceWithoutSha256sum)

    assert sorted(written) == sorted(RANK_0) and written[-1] == "checkpoint_complete.json"
    assert files_of(ssh.home / "work-m1" / RUN / NAME) == RANK_0


async def test_a_checkpoint_gone_from_member_0_fails_the_resume_naming_it(
    ssh: SshServer, ledger: Ledger, tmp_path: Path
) -> None:
    with pytest.raises(DeviceUnavailable, match=f"its last checkpoint {NAME} is not on device m0"):
        await share(ssh, ledger, tmp_path)


async def test_hashing_that_outlasts_its_limit_sends_the_whole_checkpoint(
    ssh: SshServer, ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Member 0 cannot say what it holds in time either: its checkpoint travels whole, the marker still last."""
    write_files(ssh.home / "work-m0" / RUN / NAME, RANK_0)
    write_files(ssh.home / "work-m1" / RUN / NAME, {"optimizer.pt": RANK_0["optimizer.pt"]})
    monkeypatch.setattr(ssh_module, "DIGEST_TIMEOUT_S", 1e-4)

    written = await share(ssh, ledger, tmp_path)

    assert sorted(written) == sorted(RANK_0) and written[-1] == "checkpoint_complete.json"
    assert files_of(ssh.home / "work-m1" / RUN / NAME) == RANK_0
