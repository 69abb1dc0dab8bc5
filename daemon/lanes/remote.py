"""Supervisors of the remote lanes: a trainer on an SSH device, and a NeMo Customizer job.

Both keep what they need to re-attach after a daemon restart in the run directory's `lane.json`,
and both leave the remote work running when the daemon merely shuts down: only `stop` ends it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bashgym.client.errors import Conflict
from bashgym.client.specs import Actor, ArtifactSpec
from bashgym.client.validation import canonical_json
from bashgym.daemon.background import until_stored
from bashgym.daemon.lanes.nemo import PAUSE_REFUSED, TERMINAL_STATUSES, NemoCustomizer, NemoError
from bashgym.daemon.lanes.ssh import Device, DeviceUnavailable, RemoteRun, asyncssh
from bashgym.daemon.lanes.supervisor import RunHandle, Supervisor, read_request, topology_record
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.request import TrainingRequest

log = logging.getLogger("bashgym.lanes")

# Consecutive failed polls (about one per poll interval, with backoff) before a remote run becomes `unknown`.
MAX_LOST_POLLS = 8


class LaneState:
    """`lane.json`: which lane runs this run and where, and how far the supervisor has read."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "lane.json"
        try:
            self.data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    @property
    def lane(self) -> str:
        return str(self.data.get("lane", "local"))

    async def update(self, **fields: Any) -> None:
        self.data.update(fields)
        await asyncio.to_thread(_write_json, self.path, self.data)


class MirroringSupervisor(Supervisor):
    """A trainer elsewhere whose protocol arrives in a mirrored protocol.jsonl, read from the offset lane.json
    keeps (the SSH lane, the Slurm lane)."""

    lane: LaneState

    async def _process_protocol(self) -> None:
        """Apply protocol lines past the recorded offset; the offset is saved so a restart repeats none."""
        offset = int(self.lane.data.get("protocol_offset", 0))
        data = await asyncio.to_thread(read_from, self.handle.run_dir / "protocol.jsonl", offset)
        end = data.rfind(b"\n") + 1
        if end == 0:
            return
        for raw in data[:end].splitlines():
            await self._on_line(raw)
        await self.lane.update(protocol_offset=offset + end)

    async def _unknown(self, why: str) -> str:
        await self._transition(
            "unknown", reason=f"{why}. The daemon cannot prove how the run ended; it re-checks at its next start."
        )
        return "unknown"


class SshSupervisor(MirroringSupervisor):
    """A trainer on an SSH device: upload, detached launch, mirror by offsets, signals, verified download."""

    stops_with_daemon = False

    def __init__(
        self, handle: RunHandle, ledger: Ledger, actor: Actor, device: Device, grace_s: float, poll_s: float
    ) -> None:
        super().__init__(handle, ledger, actor, device.python, grace_s, device.gpus)
        self.device = device
        self.remote = RemoteRun(device, handle.run_id, handle.run_dir)
        self.lane = LaneState(handle.run_dir)
        self.poll_s = poll_s
        self._done = asyncio.Event()

    async def run(self, *, resume: bool) -> str:
        request = await asyncio.to_thread(read_request, self.handle.run_dir)
        if not resume:
            await self._transition("preparing", reason=f"uploading to device {self.device.device_id}")
            if request.is_distributed:
                await self._append("run.topology", await self._topology(request))
        try:
            await self._open_with_retry()
            if not resume:
                await self._upload()
            await self._start(request, resume=resume)
            if self._is_stopping:  # a stop that arrived during the upload
                await self._signal_group("TERM")
        except DeviceUnavailable as exc:
            self._done.set()
            await self._close()
            return await self._fail_before_launch(exc)
        return await self._follow_to_end()

    async def _upload(self) -> None:
        request, files = await asyncio.to_thread(remote_request, self.handle.run_dir)
        await self.remote.upload(request, files)

    async def _start(self, request: TrainingRequest, *, resume: bool) -> None:
        # A scaled-out run starts its launcher, which starts the ranks on this device (accelerate launch).
        module = "bashgym.trainers.launch" if request.is_distributed else "bashgym.trainers"
        share = [] if request.is_distributed else self.device.core_share()  # a launcher's ranks are left to it
        pgid = await self.remote.launch(resume=resume, module=module, args=share)
        await self.lane.update(lane="ssh", device_id=self.device.device_id, pgid=pgid)
        log.info("Run %s started on %s (process group %d)", self.handle.run_id, self.device.device_id, pgid)

    async def _close(self) -> None:
        await self.remote.close()

    async def _topology(self, request: TrainingRequest) -> dict[str, Any]:
        return topology_record(request, [{"machine_rank": 0, "device_id": self.device.device_id}])

    async def reattach(self) -> str:
        """After a daemon restart: follow a launched trainer to its end; without a launch record, `unknown`."""
        if "pgid" not in self.lane.data:
            return await self._unknown("the daemon stopped while uploading; nothing was launched on the device")
        run = await self.ledger.get_run(self.handle.workspace, self.handle.project, self.handle.run_id)
        self._is_running = run["status"] == "running"
        for payload in await self.ledger.run_event_payloads(
            self.handle.workspace, self.handle.project, self.handle.run_id, "run.anomaly"
        ):
            self.watch.mark_reported(str(payload.get("kind", "")))
        try:
            await self._open_with_retry()
        except DeviceUnavailable as exc:
            self._done.set()
            return await self._unknown(
                f"device {self.device.device_id} is unreachable after the restart: {exc.message}"
            )
        return await self._follow_to_end()

    async def _follow_to_end(self) -> str:
        try:
            code = await self._follow_remote()
        except asyncio.CancelledError:
            await asyncio.shield(self._close())  # daemon shutdown: detach, the trainer keeps going
            raise
        except (DeviceUnavailable, asyncssh.Error, OSError) as exc:
            await asyncio.shield(self._close())
            self._done.set()
            return await self._unknown(f"device {self.device.device_id} stopped answering: {exc}")
        try:
            return await asyncio.shield(
                until_stored(lambda: self._record_exit(code), what=f"the end of run {self.handle.run_id}")
            )
        finally:
            await asyncio.shield(self._close())
            self._done.set()

    async def _open_with_retry(self) -> None:
        await open_with_retry(self.remote, self.poll_s)

    async def _follow_remote(self) -> int | None:
        """Poll until the trainer's exit code appears (or, when we stopped it, until its group is gone)."""
        lost = 0
        while True:
            try:
                done, code = await self._poll()
                if done:
                    return code
                lost = 0
            except (asyncssh.Error, OSError) as exc:
                lost += 1
                if lost >= MAX_LOST_POLLS:
                    raise
                log.warning("Run %s: lost device %s (%s); reconnecting", self.handle.run_id, self.device.device_id, exc)
                await asyncio.sleep(min(self.poll_s * 2**lost, 30.0))
                await self._open_with_retry()
                continue
            await asyncio.sleep(self.poll_s)

    async def _poll(self) -> tuple[bool, int | None]:
        """One look at the device: mirror its files, apply them, and say whether the trainer has ended (with its
        exit code; None when it was killed, on our stop, before it could record one)."""
        code = await self.remote.exit_code()
        await self.remote.sync()
        await self._process_protocol()
        await self._ingest_metrics()
        if code is not None:
            return True, code
        if self._is_stopping and not await self.remote.signal(int(self.lane.data["pgid"]), "0"):
            return True, None
        return False, None

    async def _collect_outputs(self) -> None:
        await self.remote.download_artifacts()
        await self.remote.remove()  # everything the policy keeps is home and verified

    async def _fail_before_launch(self, exc: DeviceUnavailable) -> str:
        await self._transition("failed", reason="the device could not take the run", error_summary=exc.message)
        return "failed"

    async def pause(self) -> None:
        await self._signal_group("USR1")

    async def stop(self) -> None:
        """SIGTERM the remote process group; SIGKILL it after grace_s; wait until the follower has recorded it."""
        self._is_stopping = True
        await self._signal_group("TERM")
        try:
            async with asyncio.timeout(self.grace_s):
                await self._done.wait()
        except TimeoutError:
            await self._signal_group("KILL")
            await self._done.wait()

    async def _signal_group(self, signame: str) -> None:
        pgid = self.lane.data.get("pgid")
        if pgid is None or self.remote.conn is None:
            return
        try:
            await self.remote.signal(int(pgid), signame)
        except (asyncssh.Error, OSError) as exc:
            log.warning("Run %s: could not send SIG%s: %s", self.handle.run_id, signame, exc)


class NemoSupervisor(Supervisor):
    """A NeMo Customizer job: poll its status into the ledger, cancel it on stop, record its output model."""

    stops_with_daemon = False

    def __init__(
        self,
        handle: RunHandle,
        ledger: Ledger,
        actor: Actor,
        client: Callable[[], NemoCustomizer],
        poll_s: float,
        gpus: int,
    ) -> None:
        super().__init__(handle, ledger, actor, "", 0.0, gpus)
        self.client = client
        self.lane = LaneState(handle.run_dir)
        self.poll_s = poll_s
        self._done = asyncio.Event()

    @property
    def job_id(self) -> str:
        return str(self.lane.data["job_id"])

    async def run(self, *, resume: bool) -> str:
        h = self.handle
        self._is_running = (await self.ledger.get_run(h.workspace, h.project, h.run_id))["status"] == "running"
        try:
            async with self.client() as client:
                status = await self._poll_to_end(client)
        except asyncio.CancelledError:
            raise  # daemon shutdown: the job keeps running; the next start re-attaches by job id
        except NemoError as exc:
            self._done.set()
            await self._transition(
                "unknown", reason=f"NeMo Customizer stopped answering about job {self.job_id}: {exc}"
            )
            return "unknown"
        try:
            return await asyncio.shield(self._record_status(status))
        finally:
            self._done.set()

    async def _poll_to_end(self, client: NemoCustomizer) -> dict[str, Any]:
        lost = 0
        while True:
            try:
                status = await client.job_status(self.job_id)
                lost = 0
            except NemoError as exc:
                lost += 1
                if lost >= MAX_LOST_POLLS or exc.status_code in {401, 403, 404}:
                    raise
                await asyncio.sleep(min(self.poll_s * 2**lost, 30.0))
                continue
            await self._observe(status)
            if status.get("status") in TERMINAL_STATUSES:
                return status
            await asyncio.sleep(self.poll_s)

    async def _observe(self, status: dict[str, Any]) -> None:
        state = status.get("status")
        if state in {"created", "pending"} and not self._is_running:
            await self._transition("preparing", reason=f"NeMo Customizer job {self.job_id} is {state}")
        if (state == "running" or int(status.get("steps_completed") or 0) > 0) and not self._is_running:
            self._is_running = True
            await self._transition("running", reason=f"NeMo Customizer job {self.job_id} is running")
        step = int(status.get("steps_completed") or 0)
        metrics = {
            name: float(status[key])
            for key, name in (("train_loss", "train.loss"), ("val_loss", "eval.loss"))
            if isinstance(status.get(key), int | float)
        }
        if step > int(self.lane.data.get("last_step", 0)) and metrics:
            record = {"step": step, "metrics": metrics, "epoch": status.get("epochs_completed")}
            await asyncio.to_thread(_append_line, self.handle.run_dir / "metrics.jsonl", record)
            await self.lane.update(last_step=step)
            await self._ingest_metrics()
        logs = status.get("status_logs") or []
        seen = int(self.lane.data.get("logs_seen", 0))
        for entry in logs[seen:]:
            await self._append(
                "run.remote_log",
                {"message": str(entry.get("message", ""))[:2000], "reported_at": str(entry.get("updated_at", ""))},
            )
        if len(logs) > seen:
            await self.lane.update(logs_seen=len(logs))

    async def _record_status(self, status: dict[str, Any]) -> str:
        final = str(status["status"])
        error = ""
        if final == "completed":
            await self._register_output_model(status)
        elif final == "failed":
            messages = [str(entry.get("message", "")) for entry in status.get("status_logs") or []]
            error = f"NeMo Customizer job {self.job_id} failed: {messages[-1] if messages else 'no reason given'}"
        if final == "completed" and not self._is_running:
            await self._transition("running", reason=f"NeMo Customizer job {self.job_id} ran")
        await self._transition(final, reason=f"NeMo Customizer job {self.job_id} is {final}", error_summary=error)
        return final

    async def _register_output_model(self, status: dict[str, Any]) -> None:
        """The output model lives in NeMo's model store: record a reference, digested over its identity."""
        output = str(status.get("output_model") or self.lane.data.get("output_model") or "")
        if not output:
            return
        reference = canonical_json({"provider": "nemo-customizer", "job_id": self.job_id, "output_model": output})
        h = self.handle
        spec = ArtifactSpec(
            run_id=h.run_id,
            attempt_id=h.attempt_id,
            kind="model_reference",
            uri=f"nemo-customizer://models/{output}",
            sha256=hashlib.sha256(reference.encode()).hexdigest(),
            size_bytes=0,
            media_type="application/vnd.bashgym.model-reference+json",
        )
        await self.ledger.register_artifact(self.actor, h.workspace, h.project, spec)

    async def pause(self) -> None:
        """Refused before anything is sent: the job keeps running (training plan says so for this lane)."""
        raise Conflict(
            f"Run {self.handle.run_id} runs on NeMo Customizer, and {PAUSE_REFUSED}; nothing was changed.",
            hint="Let it finish, or stop it (bashgym training stop), which cancels the job.",
        )

    async def stop(self) -> None:
        self._is_stopping = True
        async with self.client() as client:
            try:
                await client.cancel_job(self.job_id)
            except NemoError as exc:
                if exc.status_code != 409:  # 409: it reached a terminal state first, the poller records it
                    raise
        await self._done.wait()


def remote_request(run_dir: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """The request as the device sees it: data files beside it, named relative to the remote run directory."""
    request = json.loads((run_dir / "request.json").read_text())
    files: dict[str, Path] = {}
    for field, name in (("dataset_path", "dataset.jsonl"), ("eval_dataset_path", "eval_dataset.jsonl")):
        if request.get(field):
            files[name] = Path(request[field])
            request[field] = name
    return request, files


async def open_with_retry(remote: RemoteRun, poll_s: float) -> None:
    """Connect, retrying with backoff over about as long as a lost device is waited for."""
    delay = poll_s
    for attempt in range(MAX_LOST_POLLS):
        try:
            await remote.open()
            return
        except DeviceUnavailable:
            if attempt == MAX_LOST_POLLS - 1:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


def read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return b""


def _append_line(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
