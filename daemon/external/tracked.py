"""Tracked runs: training BashGym did not launch, reporting to the daemon through bashgym.track.

A tracked run is an official run like any other (its context composed by the launch pipeline's resolve stage),
recorded on lane `external`, surface `tracked`. Only the token that opened it (or a `training.stop` holder) logs to
it or ends it. Its process is the user's: when nothing is heard from it for `tracked_heartbeat_timeout_s`, the run
is marked `unknown` (the state the reconciler gives a run it cannot prove), and a later word from it resumes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from bashgym.client.environment import RunEnvironment, environment_digest
from bashgym.client.errors import Conflict, Forbidden, IdentityConflict, InvalidInput
from bashgym.client.specs import Actor, ArtifactSpec, MetricBatch, RunRegistration, RunTransition, WriteResult
from bashgym.client.tracking import TRACKED_LANE, TRACKED_SURFACE, TRACKED_TARGET, TrackedEnd, TrackedRunOpen
from bashgym.client.validation import canonical_json, sha256_text
from bashgym.daemon.authority import Principal
from bashgym.daemon.background import BackgroundLoop
from bashgym.daemon.evidence.environments import record_environment
from bashgym.daemon.lanes.supervisor import artifact_kind
from bashgym.daemon.settings import Settings
from bashgym.ledger.evidence import content_id
from bashgym.ledger.store import Ledger

log = logging.getLogger("bashgym.daemon")
SYSTEM = Actor(actor_id="system:tracked", correlation_id="")
RunKey = tuple[str, str, str]  # workspace, project, run


def measured_context(context: dict[str, Any], environment: RunEnvironment | None) -> dict[str, Any]:
    """The context with the digest of the environment the run's process measured, where it reported one. An
    environment is registered once per id with its digest, so each measured one is named by its digest too."""
    if environment is None:
        return context
    digest = environment_digest(environment)
    named = f"{context['environment_id']}-{digest[:12]}"
    return {**context, "environment_id": named, "environment_runtime_digest": digest}


class TrackedRuns(BackgroundLoop):
    """The tracked runs' writes and their heartbeat watch; one per daemon (`async with`)."""

    def __init__(self, settings: Settings, ledger: Ledger) -> None:
        self.settings = settings
        self.ledger = ledger
        self._heard: dict[RunKey, float] = {}  # monotonic time each open tracked run was last heard from

    async def __aenter__(self) -> TrackedRuns:
        # A restarted daemon gives each tracked run it left running a full timeout to be heard from again.
        now = time.monotonic()
        for run in await self.ledger.active_runs():
            if run.get("source_system") == TRACKED_SURFACE and run["status"] == "running":
                self._heard[(run["workspace_id"], run["project_id"], run["run_id"])] = now
        return await super().__aenter__()

    async def open(
        self, actor: Actor, principal: Principal, ws: str, context: dict[str, Any], body: TrackedRunOpen
    ) -> dict[str, Any]:
        """Record the run (verified in its project, its params in its config) and start it; the environment its
        process measured gives the context its digest, computed here."""
        planned = str(context.get("environment_runtime_digest") or "")
        config = {
            "compute_target": TRACKED_TARGET,
            "lane": TRACKED_LANE,
            "surface": TRACKED_SURFACE,
            "params": body.params,
            "tags": body.tags,
        }
        registration = RunRegistration(
            source_system=TRACKED_SURFACE,
            method=body.method,
            tracking_context=measured_context(context, body.environment),
            compute_target=TRACKED_TARGET,
            config=config,
            recipe_digest=sha256_text(canonical_json({"method": body.method, "params": body.params})),
            correlation_id=actor.correlation_id,
        )
        written = await self.ledger.register_run(actor, ws, registration)
        project, run_id = written.record["project_id"], written.record["run_id"]
        if body.environment is not None:
            where = (ws, project, run_id, self.attempt_of(await self.ledger.run_head(ws, project, run_id)))
            await record_environment(
                self.ledger, actor, where, body.environment, measured_by="tracking client", planned_digest=planned
            )
        if body.tags:  # read, like every run's, from the ledger's tags (ledger/tags.py)
            await self.ledger.set_tags(actor, ws, project, "run", run_id, body.tags)
        await self.ledger.transition_run(actor, ws, project, run_id, RunTransition(status="running"))
        self._heard[(ws, project, run_id)] = time.monotonic()
        return await self.show(ws, project, run_id)

    async def show(self, ws: str, project: str, run_id: str) -> dict[str, Any]:
        """The run as recorded, with its params as they stand after every later log, and its tags and note."""
        run = await self.ledger.get_run(ws, project, run_id)
        params = dict(run["config"].get("params") or {})
        for logged in await self.ledger.run_event_payloads(ws, project, run_id, "run.tracked"):
            params.update(logged.get("params") or {})
        labels = await self.ledger.labels_of(ws, project, "run", run_id)
        return {**run, "lane": TRACKED_LANE, "surface": TRACKED_SURFACE, "params": params, **labels}

    async def check_writer(self, principal: Principal, ws: str, project: str, run_id: str) -> dict[str, Any]:
        """The run, if `principal` may log to it: `training.launch` in the project, on a run its actor opened, or
        on any tracked run there with `training.stop` too (as pausing a run is the caller's own, or any with stop)."""
        principal.require("training.launch", workspace_id=ws, project_id=project)
        run = await self.ledger.run_head(ws, project, run_id)  # each batch asks: the record, not its summaries
        if run["source_system"] != TRACKED_SURFACE:
            raise InvalidInput(
                f"Run {run_id} is not a tracked run (it came from {run['source_system']}); nothing was changed.",
                hint="Log to a run opened with bashgym.track.start_run.",
            )
        if run["launched_by"] != principal.actor_id and not principal.holds("training.stop", project):
            raise Forbidden(
                f"Run {run_id} was opened by {run['launched_by']}; only they (or a holder of training.stop in "
                f"project {project}) may log to it or end it.",
                hint="Log from the process that opened the run, with a token of its actor.",
            )
        return run

    async def log_points(self, actor: Actor, ws: str, run: dict[str, Any], batch: MetricBatch) -> WriteResult:
        await self.heard(actor, ws, run)
        return await self.ledger.ingest_metrics(actor, ws, run["project_id"], batch)

    async def log_resent_points(self, actor: Actor, ws: str, run: dict[str, Any], batch: MetricBatch) -> WriteResult:
        """Points a process that died left in its spool, sent by another: the run's, but no word from its process."""
        self._refuse_ended(run)
        return await self.ledger.ingest_metrics(actor, ws, run["project_id"], batch)

    async def log_artifact(
        self, actor: Actor, ws: str, run: dict[str, Any], name: str, sha256: str, size_bytes: int
    ) -> WriteResult:
        """Record a stored file as the run's artifact `name`, as a launched run's are (`bashgym://runs/RUN/NAME`).
        A name holds one content: the same file again is a replay, another one a conflict."""
        run_id, project = run["run_id"], run["project_id"]
        uri = f"bashgym://runs/{run_id}/{name}"
        spec = ArtifactSpec(
            artifact_id=content_id("art", {"run_id": run_id, "uri": uri}),  # the name decides the id, not the bytes
            run_id=run_id,
            attempt_id=self.attempt_of(run),
            kind=artifact_kind(name, use_lora=False),
            uri=uri,
            sha256=sha256,
            size_bytes=size_bytes,
        )
        try:
            return await self.ledger.register_artifact(actor, ws, project, spec)
        except IdentityConflict:
            held = next(a for a in (await self.ledger.get_run(ws, project, run_id))["artifacts"] if a["uri"] == uri)
            raise Conflict(
                f"Run {run_id} already holds artifact {name!r} with sha256 {held['sha256']} ({held['size_bytes']} "
                f"bytes); this upload's is {sha256} ({size_bytes} bytes). Nothing was recorded.",
                hint="An artifact's name keeps its first content: log the new file under another name "
                "(e.g. checkpoint-600).",
                details={"name": name, "held_sha256": held["sha256"], "sha256": sha256},
            ) from None

    async def log_values(self, actor: Actor, ws: str, run: dict[str, Any], values: dict[str, Any]) -> None:
        await self.heard(actor, ws, run)
        attempt = self.attempt_of(run)
        await self.ledger.append_run_event(actor, ws, run["project_id"], run["run_id"], attempt, "run.tracked", values)
        if values.get("tags"):
            await self.ledger.set_tags(actor, ws, run["project_id"], "run", run["run_id"], values["tags"])

    async def heard(self, actor: Actor, ws: str, run: dict[str, Any]) -> None:
        """The run's process is alive: a run marked `unknown` for its silence resumes."""
        self._refuse_ended(run)
        self._heard[(ws, run["project_id"], run["run_id"])] = time.monotonic()
        if run["status"] == "unknown":
            reason = "its process was heard from again"
            await self.ledger.transition_run(
                actor, ws, run["project_id"], run["run_id"], RunTransition(status="running", reason=reason)
            )

    @staticmethod
    def _refuse_ended(run: dict[str, Any]) -> None:
        if run["status"] in {"completed", "failed", "cancelled"}:
            raise InvalidInput(
                f"Run {run['run_id']} is {run['status']}; a tracked run that ended takes no more logs.",
                hint="Open a new run with bashgym.track.start_run.",
            )

    async def end(self, actor: Actor, ws: str, run: dict[str, Any], body: TrackedEnd) -> WriteResult:
        project, run_id = run["project_id"], run["run_id"]
        self._heard.pop((ws, project, run_id), None)
        spec = RunTransition(status=body.status, error_summary=body.error_summary)
        return await self.ledger.transition_run(actor, ws, project, run_id, spec)

    @staticmethod
    def attempt_of(run: dict[str, Any]) -> str:
        """The run's latest attempt: a tracked run has one unless it was resumed as a new attempt."""
        return str(run["attempts"][-1]["attempt_id"])

    def silent(self, now: float) -> list[RunKey]:
        """The runs not heard from for the timeout."""
        timeout_s = self.settings.tracked_heartbeat_timeout_s
        return [key for key, heard in self._heard.items() if now - heard > timeout_s]

    async def _loop(self) -> None:
        period_s = min(30.0, self.settings.tracked_heartbeat_timeout_s / 4)
        while True:
            await asyncio.sleep(period_s)
            for ws, project, run_id in self.silent(time.monotonic()):
                await self._lost(ws, project, run_id)

    async def _lost(self, ws: str, project: str, run_id: str) -> None:
        self._heard.pop((ws, project, run_id), None)
        timeout_s = self.settings.tracked_heartbeat_timeout_s
        reason = f"no heartbeat, metric or log from its process for {timeout_s:g} s"
        try:
            await self.ledger.transition_run(
                SYSTEM, ws, project, run_id, RunTransition(status="unknown", reason=reason)
            )
        except InvalidInput as exc:  # ended meanwhile through another path: nothing is lost
            log.info("Tracked run %s was not marked unknown: %s", run_id, exc.message)
