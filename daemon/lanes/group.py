"""The device-group lane: one scaled-out run over several SSH devices, a launcher per device.

Member k runs `python -m bashgym.trainers.launch RUN_DIR --machine-rank k` over its own SSH connection; the
launchers meet at the group's rendezvous address (member 0's) and accelerate starts each machine's ranks. Member
0 holds rank 0, so its run directory is mirrored as a single device's is (protocol, metrics, log, artifacts).
Every member's exit code is polled: when one fails, the others are stopped, and the run fails naming the rank
that failed first (from the launch.json each failed member's launcher left).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from bashgym.client.specs import Actor
from bashgym.daemon.lanes.remote import SshSupervisor, open_with_retry, remote_request
from bashgym.daemon.lanes.ssh import Device, DeviceUnavailable, RemoteRun, asyncssh
from bashgym.daemon.lanes.supervisor import RunHandle, read_json, topology_record
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import CHECKPOINT_COMPLETE
from bashgym.trainers.contracts.topology import LAUNCH_RECORD, root_cause

log = logging.getLogger("bashgym.group_lane")

# A member's launcher exit codes that are no failure: completed (its ranks' share done), paused, cancelled.
SETTLED_CODES = frozenset({0, 75, 76})


class GroupSupervisor(SshSupervisor):
    """A scaled-out run over a device group: member 0 is followed as a single device is; all are watched."""

    def __init__(
        self,
        handle: RunHandle,
        ledger: Ledger,
        actor: Actor,
        devices: list[Device],
        group: dict[str, Any],
        grace_s: float,
        poll_s: float,
    ) -> None:
        super().__init__(handle, ledger, actor, devices[0], grace_s, poll_s)
        self.group = group
        self.devices = devices
        # Another member's files that the daemon keeps (its launch.json when it failed) go to machine-<k>/.
        self.members = [
            RemoteRun(device, handle.run_id, handle.run_dir / f"machine-{k}") for k, device in enumerate(devices)
        ][1:]
        self._codes: dict[int, int | None] = {}
        self._halted_at: float | None = None
        self._failure = ""

    @property
    def group_id(self) -> str:
        return str(self.group["group_id"])

    def _all(self) -> list[RemoteRun]:
        return [self.remote, *self.members]

    async def _topology(self, request: TrainingRequest) -> dict[str, Any]:
        verdicts = ((self.group.get("preflight") or {}).get("facts") or {}).get("members") or []
        digests = {str(m.get("device_id")): m.get("env_digest") for m in verdicts}
        members = [
            {"machine_rank": k, "device_id": d.device_id, "host": d.host, "env_digest": digests.get(d.device_id)}
            for k, d in enumerate(self.devices)
        ]
        return topology_record(request, members)

    async def _open_with_retry(self) -> None:
        for remote in self._all():
            await open_with_retry(remote, self.poll_s)

    async def _upload(self) -> None:
        request, files = await asyncio.to_thread(remote_request, self.handle.run_dir)
        await asyncio.gather(*(remote.upload(request, files) for remote in self._all()))

    async def _start(self, request: TrainingRequest, *, resume: bool) -> None:
        if resume:
            for line in await self._share_checkpoint():
                await self._append("run.remote_log", {"message": line})
        address, port = str(self.group["main_process_ip"]), int(self.group["main_process_port"])
        pgids = []
        for k, remote in enumerate(self._all()):
            args = ["--machine-rank", str(k), "--main-address", address, "--main-port", str(port)]
            pgids.append(await remote.launch(resume=resume, module="bashgym.trainers.launch", args=args))
        await self.lane.update(lane="ssh-group", group_id=self.group_id, pgid=pgids[0], member_pgids=pgids)
        log.info("Run %s started on device group %s (process groups %s)", self.handle.run_id, self.group_id, pgids)

    async def _share_checkpoint(self) -> list[str]:
        """Every machine resumes from the checkpoint rank 0 wrote on member 0. Each machine saved its own copy
        (save_on_each_node), so a member receives only the files of member 0's copy it lacks or holds different
        (its completion marker, a rank's RNG state, small state files), by sha256, through the daemon (members need
        no keys for each other) and the marker last. A device that cannot hash gets the whole checkpoint. Returns
        a line per member saying what it received, for the run's events."""
        state = await asyncio.to_thread(read_json, self.handle.run_dir / "run_state.json")
        name = str(state.get("last_checkpoint") or "")
        if not name:
            return []
        source = await self.remote.digests(name)
        if source == {}:
            raise DeviceUnavailable(
                f"Run {self.handle.run_id} cannot resume: its last checkpoint {name} is not on device "
                f"{self.device.device_id} (under {self.remote.remote_dir}).",
                hint="Start a new run from the request; a resume needs rank 0's checkpoint where it was written.",
            )
        wanted = await asyncio.gather(*(self._wanted_by(member, name, source) for member in self.members))
        staging = self.handle.run_dir / "machine-0" / name
        await asyncio.to_thread(shutil.rmtree, staging, True)
        await asyncio.to_thread(staging.parent.mkdir, parents=True, exist_ok=True)
        if source is None:
            await self.remote.fetch_tree(name, staging)
            every = await asyncio.to_thread(_files_under, staging)
        else:
            every = sorted(source)
            needed = {path for paths in wanted for path in (every if paths is None else paths)}
            await self.remote.fetch_files(name, sorted(needed), staging)
        lines = []
        for member, paths in zip(self.members, wanted, strict=True):
            paths = every if paths is None else paths
            size = await asyncio.to_thread(_bytes_of, staging, paths)
            await member.put_files(staging, name, sorted(paths, key=lambda path: (path == CHECKPOINT_COMPLETE, path)))
            lines.append(
                f"resume: {name} sent to {member.device.device_id}: {len(paths)} of its {len(every)} files "
                f"({size / 1e6:.1f} MB); it held the rest already"
            )
            log.info("Run %s: %s", self.handle.run_id, lines[-1])
        await asyncio.to_thread(shutil.rmtree, staging, True)
        return lines

    @staticmethod
    async def _wanted_by(member: RemoteRun, name: str, source: dict[str, str] | None) -> list[str] | None:
        """The files of member 0's checkpoint `member` must receive; None for all of them."""
        if source is None:
            return None
        held = await member.digests(name)
        if held is None:
            return None
        return sorted(path for path, digest in source.items() if held.get(path) != digest)

    async def _close(self) -> None:
        for remote in self._all():
            await remote.close()

    async def _poll(self) -> tuple[bool, int | None]:
        """Member 0 as a single device, then every other member's exit code: a failure stops them all."""
        done, code = await super()._poll()
        if done:
            self._codes[0] = code
        for k, member in enumerate(self.members, start=1):
            if k not in self._codes:
                member_code = await member.exit_code()
                if member_code is not None:
                    self._codes[k] = member_code
        if self._failed() and self._halted_at is None:
            await self._halt(self._failed())
        if self._halted_at is not None and time.monotonic() - self._halted_at > self.grace_s:
            await self._signal_group("KILL")
        if not await self._all_ended():
            return False, None
        if self._failed():
            self._failure = self._failure or await self._failure_summary(self._failed())
            return True, 1
        return True, self._codes.get(0)

    def _failed(self) -> list[int]:
        return [k for k, c in sorted(self._codes.items()) if c is not None and c not in SETTLED_CODES]

    async def _halt(self, failed: list[int]) -> None:
        """A member failed: stop every other one at once (its ranks would wait on the dead peer)."""
        self._halted_at = time.monotonic()
        log.warning(
            "Run %s: machine %s of group %s failed; stopping the rest", self.handle.run_id, failed, self.group_id
        )
        await self._signal_group("TERM")

    async def _all_ended(self) -> bool:
        """Every member recorded an exit code, or, after a stop, has no process group left."""
        pgids = list(self.lane.data.get("member_pgids") or [self.lane.data.get("pgid")])
        for k, remote in enumerate(self._all()):
            if k in self._codes:
                continue
            stopping = self._is_stopping or self._halted_at is not None
            if not stopping or k >= len(pgids) or await remote.signal(int(pgids[k]), "0"):
                return False
            self._codes[k] = None  # killed before it could record an exit code
        return True

    async def _failure_summary(self, failed: list[int]) -> str:
        """The rank that failed first over every failed machine, from each one's launch.json."""
        ranks: list[dict[str, Any]] = []
        for k in failed:
            remote = self._all()[k]
            try:
                await asyncio.to_thread(remote.local_dir.mkdir, parents=True, exist_ok=True)
                await remote.fetch(LAUNCH_RECORD)
            except (asyncssh.Error, OSError):
                continue
            record = await asyncio.to_thread(read_json, remote.local_dir / LAUNCH_RECORD)
            ranks += [{**r, "device_id": self.devices[k].device_id} for r in record.get("ranks") or []]
            if record and not record.get("ranks"):
                ranks.append({"summary": str(record.get("summary", "")), "time": record.get("time", 0)})
        if not ranks:
            names = ", ".join(self.devices[k].device_id for k in failed)
            return f"The launcher on {names} failed before reporting a rank; see its launcher.log on the device."
        first = root_cause(ranks)
        where = f" on device {first['device_id']}" if first.get("device_id") else ""
        return f"{first['summary']}{where}; the group's other machines were stopped."

    def _error_summary(self, code: int | None) -> str:
        return self._failure or super()._error_summary(code)

    async def _collect_outputs(self) -> None:
        await super()._collect_outputs()  # member 0 holds what rank 0 saved
        for member in self.members:
            await member.remove()

    async def _signal_group(self, signame: str) -> None:
        pgids = list(self.lane.data.get("member_pgids") or [])
        for remote, pgid in zip(self._all(), pgids, strict=False):
            if remote.conn is None:
                continue
            try:
                await remote.signal(int(pgid), signame)
            except (asyncssh.Error, OSError) as exc:
                log.warning("Run %s: could not send SIG%s to %s: %s", self.handle.run_id, signame, remote.device, exc)


def _files_under(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def _bytes_of(folder: Path, paths: list[str]) -> int:
    return sum((folder / path).stat().st_size for path in paths)
