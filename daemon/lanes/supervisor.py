"""Owns one training process: start it, follow its protocol and metrics into the ledger, stop it."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from bashgym.client.environment import RunEnvironment
from bashgym.client.errors import BashGymError, InvalidTransition
from bashgym.client.specs import (
    MAX_METRIC_BATCH,
    Actor,
    ArtifactSpec,
    MetricBatch,
    MetricPoint,
    RunTransition,
)
from bashgym.client.states import TERMINAL
from bashgym.daemon.background import until_stored
from bashgym.daemon.evidence.environments import record_environment
from bashgym.daemon.evidence.promotion import learned_nothing
from bashgym.daemon.lanes.anomalies import AnomalyWatch
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import EFFECTIVE_CONFIG
from bashgym.trainers.contracts.topology import charged_gpus, topology
from pydantic import BaseModel, ConfigDict, ValidationError

log = logging.getLogger("bashgym.supervisor")

# Exit codes of `python -m bashgym.trainers` (trainers/contracts/rundir.py).
EXIT_STATUS = {0: "completed", 75: "paused", 76: "cancelled"}

# A local trainer's logged steps reach the ledger at most this often: a run that logs every step would otherwise
# cost the daemon a ledger write per step, on the cores the trainer is using (bench/supervisor_overhead.py).
METRICS_EVERY_S = 1.0


class ArtifactMismatch(BashGymError):
    """A fetched artifact's sha256 differs from the one the trainer recorded."""

    code = "artifact_digest_mismatch"
    status = 502


class TrainerEvent(BaseModel):
    """One protocol line of a trainer's stdout, validated before it reaches the ledger."""

    model_config = ConfigDict(extra="allow")
    event: Literal[
        "started", "step", "progress", "checkpoint", "uploaded", "paused", "cancelled", "completed", "failed"
    ]
    time: float
    step: int | None = None
    max_steps: int | None = None
    metrics: dict[str, float] | None = None
    error: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class LiveStep:
    """The step a running trainer last finished, as its `step` line said (trainer's clock, UTC epoch seconds)."""

    step: int
    max_steps: int | None
    at: float

    def as_dict(self) -> dict[str, int | float | None]:
        return {"step": self.step, "max_steps": self.max_steps, "at": self.at}


class TrainerEnvironment(Protocol):
    """The environment a local trainer of `request` starts with: launch/trackers.py's trainer_environment, bound to
    the daemon's settings and environment."""

    def __call__(self, request: TrainingRequest) -> dict[str, str]: ...


def no_environment(request: TrainingRequest) -> dict[str, str]:
    """Remote lanes start no local trainer; one started without a TrainerEnvironment would get nothing."""
    return {}


@dataclass(frozen=True)
class RunHandle:
    workspace: str
    project: str
    run_id: str
    attempt_id: str
    run_dir: Path
    method: str


class MetricsFollower:
    """Reads metrics.jsonl from a byte offset; only complete lines, so a half-written one waits."""

    def __init__(self, path: Path, attempt_id: str, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self.attempt_id = attempt_id
        self.offset = 0

    def read_batches(self) -> tuple[list[MetricBatch], list[tuple[int, dict[str, float]]], int]:
        """New points as ledger batches, the raw (step, metrics) records for anomaly checks, and the offset
        past them: the caller moves `offset` there once the batches are stored, so none is skipped."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return [], [], self.offset
        end = data.rfind(b"\n") + 1
        records = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        points = [
            MetricPoint(metric=name, step=int(r["step"]), value=value, time=_logged_at(r))
            for r in records
            for name, value in r["metrics"].items()
            if math.isfinite(value)
        ]
        batches = [
            MetricBatch(run_id=self.run_id, attempt_id=self.attempt_id, points=points[i : i + MAX_METRIC_BATCH])
            for i in range(0, len(points), MAX_METRIC_BATCH)
        ]
        return batches, [(int(r["step"]), r["metrics"]) for r in records], self.offset + end


def _logged_at(record: dict[str, Any]) -> float | None:
    """The record's wall-clock time, where the trainer wrote a sane one (older trainers wrote none)."""
    at = record.get("time")
    return float(at) if isinstance(at, int | float) and math.isfinite(at) and at >= 0 else None


class Supervisor:
    """One trainer child process from spawn to outcome."""

    # A local trainer is the daemon's child and stops with it; remote work keeps going and is re-attached.
    stops_with_daemon = True

    def __init__(
        self,
        handle: RunHandle,
        ledger: Ledger,
        actor: Actor,
        python: str,
        grace_s: float,
        gpus: int = 0,
        *,
        threads: int | None = None,
        environment: TrainerEnvironment = no_environment,
    ) -> None:
        self.handle = handle
        self.threads = threads  # torch threads of a local trainer (settings.local_thread_limit); None: its default
        self.environment = environment
        self.gpus = gpus
        self.ledger = ledger
        self.actor = actor
        self.python = python
        self.grace_s = grace_s
        self.proc: asyncio.subprocess.Process | None = None
        self.metrics = MetricsFollower(handle.run_dir / "metrics.jsonl", handle.attempt_id, handle.run_id)
        self.watch = AnomalyWatch(handle.method)
        self._pid: int | None = None
        self._is_running = False
        self._is_stopping = False
        # Set once run() has spawned the trainer or settled that it never will: a stop waits for that (_wait_gone).
        self._starting: asyncio.Event | None = None
        self.stopped_by: str | None = None  # who asked for the stop, and how: the end's reason names them
        self._last_error = ""
        self._metrics_seen = False
        self._last_progress = time.monotonic()
        self._last_step: int | None = None
        self.live: LiveStep | None = None  # the last step the trainer announced: in memory, never in the ledger
        self._ingesting = asyncio.Lock()  # one reader of metrics.jsonl at a time, so no point is read twice
        self._metrics_due = asyncio.Event()

    def command(self, request: TrainingRequest) -> list[str]:
        """One trainer process; a scaled-out run's launcher, which starts the ranks through `accelerate launch`."""
        if request.is_distributed:  # accelerate splits the cores over the ranks itself
            return [self.python, "-u", "-m", "bashgym.trainers.launch", str(self.handle.run_dir)]
        threads = [] if self.threads is None else ["--threads", str(self.threads)]
        return [self.python, "-u", "-m", "bashgym.trainers", str(self.handle.run_dir), *threads]

    async def run(self, *, resume: bool) -> str:
        """Spawn, follow to the end, record the outcome; return the final status."""
        # A stop can come at any await below, while there is no process to signal yet: it is acted on here.
        self._starting = asyncio.Event()
        try:
            request = await asyncio.to_thread(read_request, self.handle.run_dir)
            command = [*self.command(request), "--resume"] if resume else self.command(request)
            if not resume:
                # A resumed run stays `paused` until its first progress line moves it to running.
                await self._transition("preparing", reason="trainer starting")
                if request.is_distributed:
                    await self._append("run.topology", topology_record(request))
            if self._is_stopping:  # stopped while it was being prepared: nothing to start, nothing trained
                return await asyncio.shield(
                    until_stored(self._record_never_started, what=f"the end of run {self.handle.run_id}")
                )
            # Only what the run needs: the launcher of a scaled-out run hands it on to its ranks as it is.
            env = self.environment(request)
            log.info(
                "Starting trainer for %s: %s (environment: %s)",
                self.handle.run_id,
                " ".join(command),
                ", ".join(sorted(env)),  # names only: the rerun by hand sets them from its own environment
            )
            self.proc = await asyncio.create_subprocess_exec(
                *command,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            self._pid = self.proc.pid
            if self._is_stopping:  # stopped while the process was being created, before it had a pid to signal
                self._signal(signal.SIGTERM)
        finally:
            self._starting.set()
        # Recorded at once: a daemon killed before the trainer writes its own state still finds it.
        await asyncio.to_thread(_write_pid, self.handle.run_dir, self.proc.pid)
        flusher = asyncio.create_task(self._flush_metrics())
        try:
            await self._follow()
            code = await self.proc.wait()
        except asyncio.CancelledError:
            await asyncio.shield(self.stop())
            raise
        finally:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            await asyncio.shield(self._ingest_metrics())
        return await asyncio.shield(
            until_stored(lambda: self._record_exit(code), what=f"the end of run {self.handle.run_id}")
        )

    async def _follow(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            await self._on_line(raw)

    async def _flush_metrics(self) -> None:
        """Ingest the steps a `progress` line announced: at once after a quiet spell, then at most every
        METRICS_EVERY_S while the trainer keeps logging (what arrives meanwhile goes in the next batch)."""
        while True:
            await self._metrics_due.wait()
            self._metrics_due.clear()
            try:
                # Shielded: the run's end cancels the flusher, and a batch half stored would be read again.
                await asyncio.shield(self._ingest_metrics())
            except Exception:
                # Left where it stopped: the ingestion at the trainer's exit meets the same lines and fails the
                # supervision with this error, as an ingestion at the progress line itself did.
                log.exception("Run %s: could not ingest its metrics; retrying at its exit", self.handle.run_id)
                return
            await asyncio.sleep(METRICS_EVERY_S)

    async def _on_line(self, raw: bytes) -> None:
        """One protocol line from any lane: validated, then applied; a malformed one is logged and skipped."""
        try:
            event = TrainerEvent.model_validate_json(raw)
        except ValidationError:
            log.warning("Ignoring a malformed protocol line from %s: %r", self.handle.run_id, raw[:200])
            return
        await self._on_event(event)

    async def _on_event(self, event: TrainerEvent) -> None:
        match event.event:
            case "step" if event.step is not None:
                # Every step, so it only moves the bar: the ledger gets the logged steps' metrics at `progress`.
                self.live = LiveStep(step=event.step, max_steps=event.max_steps, at=event.time)
                self._last_progress = time.monotonic()
                await self._mark_running("first progress reported")
            case "progress":
                await self._mark_running("first progress reported")
                self._metrics_due.set()  # a local run's flusher ingests it; a remote lane ingests at every poll
            case "checkpoint" | "completed":
                # A run shorter than its logging interval reports no progress before these.
                await self._mark_running(f"the trainer reported {event.event} before any progress")
                await self._ingest_metrics()
                if event.event == "completed":
                    return
                await self._append("run.checkpoint", {"step": event.step or 0, "path": event.path or ""})
            case "started":
                await self._record_environment((event.model_extra or {}).get("environment"))
            case "failed":
                self._last_error = event.error or ""

    async def _record_environment(self, reported: object) -> None:
        """The environment the trainer measured at its start, with the digest computed here; a malformed report is
        logged and left out (the trainer is BashGym's own, but its line crossed a process boundary)."""
        if reported is None:
            return
        try:
            environment = RunEnvironment.model_validate(reported)
        except ValidationError as exc:
            log.warning("Run %s reported a malformed environment: %s", self.handle.run_id, exc.errors()[:3])
            return
        h = self.handle
        try:
            request = await asyncio.to_thread(read_request, h.run_dir)
        except (FileNotFoundError, ValidationError):  # a run this daemon did not write: nothing was planned
            request = None
        planned = str(((request.tracking_context if request else None) or {}).get("environment_runtime_digest", ""))
        where = (h.workspace, h.project, h.run_id, h.attempt_id)
        await record_environment(
            self.ledger, self.actor, where, environment, measured_by="trainer", planned_digest=planned
        )

    async def _mark_running(self, reason: str) -> None:
        if not self._is_running:
            self._is_running = True
            await self._transition("running", reason=reason)

    async def _ingest_metrics(self) -> None:
        async with self._ingesting:
            await self._ingest_new_metrics()

    async def _ingest_new_metrics(self) -> None:
        batches, records, next_offset = await asyncio.to_thread(self.metrics.read_batches)
        h = self.handle
        for batch in batches:
            await until_stored(
                functools.partial(self.ledger.ingest_metrics, self.actor, h.workspace, h.project, batch),
                what=f"metrics of run {h.run_id}",
            )
        self.metrics.offset = next_offset
        self._metrics_seen = self._metrics_seen or bool(records)
        if records:
            self._last_progress = time.monotonic()
            self._last_step = records[-1][0]
        for step, values in records:
            for anomaly in self.watch.observe(step, values):
                await self._append(
                    "run.anomaly", {"kind": anomaly.kind, "detail": anomaly.detail, "step": anomaly.step}
                )

    async def check_progress(self, limit_s: float) -> None:
        """Record a `no_progress` anomaly when a running trainer has been silent longer than limit_s."""
        silent = time.monotonic() - self._last_progress
        if not self._is_running or self._is_stopping or silent < limit_s:
            return
        for anomaly in self.watch.stalled(silent, self._last_step):
            await self._append("run.anomaly", {"kind": anomaly.kind, "detail": anomaly.detail, "step": anomaly.step})

    async def _record_exit(self, code: int | None) -> str:
        """Record how the trainer ended; `None` is a trainer killed before it could write its exit code."""
        status = EXIT_STATUS.get(code, "failed") if code is not None else "failed"
        if status == "failed" and self._is_stopping and code in {None, -signal.SIGTERM, -signal.SIGKILL}:
            status = "cancelled"  # stopped by us before the trainer could answer the signal itself
        error = ""
        if status == "completed":
            try:
                await self._collect_outputs()
                await self._register_artifacts()
            except ArtifactMismatch as exc:
                status, error = "failed", f"{exc.message} {exc.hint}".strip()
        if status == "failed" and not error:
            error = self._error_summary(code)
        reason = f"trainer exited with code {code}"
        if status == "cancelled" and self.stopped_by:
            reason = f"stopped by {self.stopped_by}; {reason}"
        if status == "completed":
            h = self.handle
            nothing = learned_nothing(await self.ledger.get_run(h.workspace, h.project, h.run_id))
            reason += f"; {nothing}" if nothing else ""
        await self._transition(status, reason=reason, error_summary=error)
        return status

    async def _record_never_started(self) -> str:
        """Record a run stopped before its trainer was spawned: cancelled, saying by whom."""
        by = f"stopped by {self.stopped_by}" if self.stopped_by else "stopped"
        await self._transition("cancelled", reason=f"{by} before its trainer started; nothing trained")
        return "cancelled"

    async def _collect_outputs(self) -> None:
        """Bring the kept artifacts into the run directory, verified; the local lane wrote them there already."""

    def _error_summary(self, code: int | None) -> str:
        if self._last_error:
            return self._last_error[:2000]
        tail = _tail(self.handle.run_dir / "training.log", 20)
        return f"Trainer exited with code {code}. Last log lines:\n{tail}"[:2000]

    async def _register_artifacts(self) -> None:
        profile_path = self.handle.run_dir / "model_profile.json"
        profile = json.loads(await asyncio.to_thread(profile_path.read_text))
        h = self.handle
        for entry in profile["files"]:
            kind = artifact_kind(entry["path"], use_lora=bool(profile["use_lora"]))
            spec = ArtifactSpec(
                run_id=h.run_id,
                attempt_id=h.attempt_id,
                kind=kind,
                uri=f"bashgym://runs/{h.run_id}/{entry['path']}",
                sha256=entry["sha256"],
                size_bytes=entry["size_bytes"],
            )
            await self.ledger.register_artifact(self.actor, h.workspace, h.project, spec)

    async def charged_gpus(self) -> int:
        """The GPUs the run holds, for its GPU-hours: a scaled-out run holds one per rank."""
        try:
            request = await asyncio.to_thread(read_request, self.handle.run_dir)
        except FileNotFoundError:
            return self.gpus  # not launched by this daemon, so it holds no reservation to settle
        return charged_gpus(request, self.gpus)

    def measured_gpu_hours(self) -> float | None:
        """GPU-hours the compute's own accounting measured, charged instead of run time x GPUs; None: not measured."""
        return None

    async def _transition(self, status: str, *, reason: str, error_summary: str = "") -> None:
        h = self.handle
        spec = RunTransition(
            status=status,
            attempt_id=h.attempt_id,
            reason=reason,
            error_summary=error_summary,
        )
        # An end settles the launch's reservation in the same write: the hours the run held its compute (time
        # paused is not counted) times its GPUs.
        gpus = await self.charged_gpus() if status in TERMINAL else None
        try:
            await self.ledger.transition_run(self.actor, h.workspace, h.project, h.run_id, spec, settle_gpus=gpus)
        except InvalidTransition as exc:
            log.warning("Run %s: %s", h.run_id, exc.message)

    async def _append(self, event_type: str, payload: dict[str, Any]) -> None:
        h = self.handle
        await self.ledger.append_run_event(
            self.actor, h.workspace, h.project, h.run_id, h.attempt_id, event_type, payload
        )

    async def follow_existing(self, pid: int, *, is_running: bool) -> str:
        """Follow a trainer that outlived a daemon restart, by its run state and metrics, to its end."""
        self._pid = pid
        self._is_running = is_running
        for payload in await self.ledger.run_event_payloads(
            self.handle.workspace, self.handle.project, self.handle.run_id, "run.anomaly"
        ):
            self.watch.mark_reported(str(payload.get("kind", "")))
        while is_trainer_alive(pid, self.handle.run_dir):
            await self._ingest_metrics()
            if not self._is_running and self._metrics_seen:
                self._is_running = True
                await self._transition("running", reason="first progress reported")
            await asyncio.sleep(1.0)
        await self._ingest_metrics()
        return await self.resolve_from_state()

    async def resolve_from_state(self) -> str:
        """Record the outcome the trainer left in run_state.json; without one the run is `unknown`.

        Its metrics first: a trainer that finished while no daemon ran logged steps nobody ingested (points
        ingested before are stored once; the ledger takes the same point again as a replay)."""
        await self._ingest_metrics()
        state = await asyncio.to_thread(read_json, self.handle.run_dir / "run_state.json")
        status = str(state.get("status", ""))
        if status == "completed":
            await self._register_artifacts()
        if status in {"completed", "failed", "cancelled", "paused"}:
            if status in {"paused", "completed"}:
                await self._mark_running("trainer ran before the daemon restarted")
            await self._transition(
                status,
                reason="resolved from the trainer's run state after a daemon restart",
                error_summary=str(state.get("error", ""))[:2000] if status == "failed" else "",
            )
            return status
        await self._transition(
            "unknown",
            reason=f"The trainer is gone and left status {status or 'none'}; the "
            "daemon cannot prove how it ended. Inspect training.log, then resume or stop it.",
        )
        return "unknown"

    async def pause(self) -> None:
        self._signal(signal.SIGUSR1)

    async def stop(self) -> None:
        """SIGTERM the trainer's process group; SIGKILL it after grace_s if it ignores that. A stop that comes while
        run() is still starting the trainer is acted on there (nothing is spawned, or the trainer is signalled as
        soon as it has a pid), and this waits for that."""
        self._is_stopping = True
        self._signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(self.grace_s):
                await self._wait_gone()
        except TimeoutError:
            self._signal(signal.SIGKILL)  # one stuck trainer must not hang the daemon's shutdown
            await self._wait_gone()

    async def _wait_gone(self) -> None:
        if self._starting is not None:
            await self._starting.wait()
        if self.proc is not None:
            await self.proc.wait()
            return
        # Not our child after a restart, so there is nothing to await but its disappearance.
        while self._pid is not None and is_trainer_alive(self._pid, self.handle.run_dir):  # noqa: ASYNC110
            await asyncio.sleep(0.2)

    def _signal(self, signum: int) -> None:
        if self._pid is None or (self.proc is not None and self.proc.returncode is not None):
            return
        try:
            os.killpg(self._pid, signum)  # the trainer leads its own session, so its group id is its pid
        except ProcessLookupError:  # it exited between the check and the signal
            return


def read_request(run_dir: Path) -> TrainingRequest:
    return TrainingRequest.model_validate_json((run_dir / "request.json").read_text())


def topology_record(request: TrainingRequest, members: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `run.topology` event of a scaled-out run: its shape as requested, and each machine that runs it."""
    return {
        **topology(request, request.mixed_precision),
        "device_group": request.device_group,
        "members": members or [{"machine_rank": 0, "device_id": request.ssh_device or "local"}],
    }


def is_trainer_alive(pid: int, run_dir: Path) -> bool:
    """True when pid is still a trainer of this run directory (a reused pid is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    is_zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
    return not is_zombie and b"bashgym.trainers" in cmdline and str(run_dir).encode() in cmdline


def _write_pid(run_dir: Path, pid: int) -> None:
    tmp = run_dir / "trainer.pid.tmp"
    tmp.write_text(str(pid))
    tmp.replace(run_dir / "trainer.pid")


def spawned_pid(run_dir: Path) -> int | None:
    """The pid the daemon spawned the run's trainer with, if it got that far."""
    try:
        return int((run_dir / "trainer.pid").read_text())
    except (OSError, ValueError):
        return None


def read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def artifact_kind(path: str, *, use_lora: bool) -> str:
    top = path.split("/")[0]
    if top == EFFECTIVE_CONFIG:
        return "config"
    if top == "merged":
        return "merged"
    if top.startswith("checkpoint-"):
        return "checkpoint"
    return "adapter" if use_lora else "weights"


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no training.log)"
