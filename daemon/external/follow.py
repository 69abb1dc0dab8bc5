"""Following external jobs: one task per open job asks its upstream, records what it sees, moves the job's run.

Observations are written in order (states, log lines, metric points, provider events); only log or metric evidence
turns `compute_started` on, and only then is the run `running`. A poll that fails is asked again with backoff; one
that keeps failing, or a refusal, leaves the job `unknown`. On completion the result is imported (a Hub job's pushed
commit, checked file by file; a provider's model id), the run ends, and a Hub job's model is registered as the run's
model version. A daemon that stops cancels its followers only: the jobs keep running upstream.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from pathlib import Path
from typing import Any

from bashgym.client.errors import BashGymError, RuleRejected
from bashgym.client.external import ENDED_STATES, ExternalObservation
from bashgym.client.specs import Actor, ArtifactSpec, MetricBatch, MetricPoint, RunTransition
from bashgym.client.states import is_allowed
from bashgym.client.validation import canonical_json
from bashgym.daemon.evidence.gathering import gather_evidence, register_run_model
from bashgym.daemon.external.dstack_runs import DstackUpstream
from bashgym.daemon.external.hf_jobs import HubJobs, UpstreamError
from bashgym.daemon.external.providers import Provider
from bashgym.daemon.external.skypilot import SkyCli, SkyUpstream
from bashgym.daemon.external.upstreams import (
    HubUpstream,
    ImportRefused,
    Look,
    ProviderUpstream,
    StoreOutputs,
    Upstream,
    read_hub_run,
)
from bashgym.daemon.settings import Settings
from bashgym.ledger.store import Ledger

log = logging.getLogger(__name__)
SYSTEM = Actor(actor_id="system:external", capability="training.launch")
MAX_LOST_POLLS = 5
# A run's status for each job state; `running` only once compute is proven (else the run is still preparing).
_RUN_STATUS = {"submitted": "preparing", "unknown": "unknown", "completed": "completed", "failed": "failed"}


class Followers:
    """The followers of every open external job, and the run-side bookkeeping they share with submissions."""

    def __init__(
        self, settings: Settings, ledger: Ledger, hf_token: str, keys: dict[str, str], environ: dict[str, str]
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self._hf_token = hf_token
        self._keys = keys
        self._environ = environ
        self.outputs = StoreOutputs(settings.engine_outputs)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._group = asyncio.TaskGroup()

    async def __aenter__(self) -> Followers:
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for task in self._tasks.values():
            task.cancel()  # the jobs keep running upstream; the next start follows them again
        await self._group.__aexit__(*exc)

    def follow(self, job: dict[str, Any]) -> None:
        key = f"{job['workspace_id']}/{job['job_id']}"
        if key in self._tasks and not self._tasks[key].done():
            return
        self._tasks[key] = self._group.create_task(self._guarded(job))

    async def _guarded(self, job: dict[str, Any]) -> None:
        try:
            await self._follow_to_end(job)
        except asyncio.CancelledError:
            raise
        except RuleRejected as exc:  # its surface is not configured here (upstream() says what to set)
            log.warning("External job %s is not followed: %s %s", job["job_id"], exc.message, exc.hint or "")
        except Exception:  # a follower's bug must not take the daemon's task group down
            log.exception("Following external job %s failed; the next daemon start follows it again", job["job_id"])

    async def _follow_to_end(self, job: dict[str, Any]) -> None:
        upstream = self.upstream(job)
        if not job["upstream_job_id"]:
            found = await self._find(job, upstream)
            if found is None:
                await self.observe(
                    job,
                    ExternalObservation(
                        kind="state",
                        state="unknown",
                        reason=f"{where(job)} shows no job for this submission; nothing was submitted again",
                    ),
                )
                return
            job = await self._submitted_found(job, found)
        seen = await self._seen(job)
        lost = 0
        while True:
            try:
                look = await upstream.look(job, seen)
                lost = 0
            except UpstreamError as exc:
                lost += 1
                if not exc.transient or lost >= MAX_LOST_POLLS:
                    reason = f"{where(job)} stopped answering about job {job['upstream_job_id']}: {exc.message}"
                    job = await self.observe(job, ExternalObservation(kind="state", state="unknown", reason=reason))
                    if not exc.transient:
                        return  # a refusal (401, 404) does not change by asking again; a restart asks once more
                await asyncio.sleep(min(self.settings.external_poll_s * 2**lost, 60.0))
                continue
            job = await self._apply(job, look, seen)
            if job["state"] in ENDED_STATES:
                return
            await asyncio.sleep(self.settings.external_poll_s)

    async def _find(self, job: dict[str, Any], upstream: Upstream) -> dict[str, Any] | None:
        """The upstream's job for a submission whose answer was lost; asked until the upstream answers."""
        for lost in range(MAX_LOST_POLLS):
            try:
                return await upstream.find(job)
            except UpstreamError as exc:
                if not exc.transient:
                    return None
                await asyncio.sleep(min(self.settings.external_poll_s * 2**lost, 60.0))
        return None

    async def _submitted_found(self, job: dict[str, Any], receipt: dict[str, Any]) -> dict[str, Any]:
        written = await self.ledger.record_external_submission(
            SYSTEM, job["workspace_id"], job["job_id"], receipt["id"], receipt
        )
        return written.record

    async def _seen(self, job: dict[str, Any]) -> dict[str, Any]:
        """How far earlier followers read: log lines through, provider event ids."""
        seen: dict[str, Any] = {"logs_through": 0, "event_ids": set()}
        after = 0
        while True:
            page = await self.ledger.external_job_observations(job["workspace_id"], job["job_id"], after=after)
            for item in page["observations"]:
                data = item["data"] or {}
                if item["kind"] == "log":
                    seen["logs_through"] = max(seen["logs_through"], int(data.get("through", 0)))
                if item["kind"] in {"event", "metric"} and data.get("id"):
                    seen["event_ids"].add(str(data["id"]))
            if not page["observations"]:
                return seen
            after = page["next_after"]

    async def _apply(self, job: dict[str, Any], look: Look, seen: dict[str, Any]) -> dict[str, Any]:
        if look.new_logs:
            job = await self.observe(
                job,
                ExternalObservation(
                    kind="log",
                    upstream_state=look.upstream_state,
                    message=look.new_logs[-1][:4000],
                    data={"lines": [line[:2000] for line in look.new_logs[-200:]], "through": look.logs_through},
                    shows_compute=True,
                ),
            )
            seen["logs_through"] = look.logs_through
        for event in look.events:
            seen["event_ids"].add(str(event.get("id")))
            is_metric = event.get("type") == "metrics"
            job = await self.observe(
                job,
                ExternalObservation(
                    kind="metric" if is_metric else "event",
                    upstream_state=look.upstream_state,
                    message=str(event.get("message", ""))[:4000],
                    data=event,
                    shows_compute=is_metric,
                ),
            )
        if look.metrics:
            await self._ingest(job, look.metrics)
        if look.state == job["state"]:
            await self.sync_run(job, f"{where(job)} reports {look.upstream_state}")
            return job
        reason = f"{where(job)} reports {look.upstream_state}" + (f": {look.message}" if look.message else "")
        if look.state == "completed":
            return await self._complete(job, look, reason)
        if look.state in {"failed", "cancelled"}:
            # The run ends before the job is recorded ended: a daemon killed between the two writes finds the job
            # still open and looks again, where the other order left an ended job's run running for good (and a
            # reader who saw the job ended could still read its run as running).
            await self._end_run(job, look.state, reason)
        return await self.observe(
            job,
            ExternalObservation(
                kind="state", state=look.state, upstream_state=look.upstream_state, message=look.message, reason=reason
            ),
        )

    async def _complete(self, job: dict[str, Any], look: Look, reason: str) -> dict[str, Any]:
        """The upstream says it completed: import what it made, then record the end (a failed import fails the run,
        saying why; the job's own state stays the upstream's)."""
        try:
            result = await self._import(job, look)
        except (ImportRefused, BashGymError) as exc:  # a result the ledger cannot take fails the run, saying why
            await self._end_run(job, "failed", f"{reason}, but its result was not imported: {exc}")  # run first
            return await self.observe(
                job,
                ExternalObservation(kind="state", state="completed", upstream_state=look.upstream_state, reason=reason),
                sync=False,
            )
        job = (await self.ledger.record_external_result(SYSTEM, job["workspace_id"], job["job_id"], result)).record
        # The model version first, then the job's end: a reader who sees the job completed finds its model.
        version = None
        if job["surface"] != "managed":  # a model BashGym trained, its files checked: a model version
            evidence = await gather_evidence(self.ledger, job["workspace_id"], job["project_id"], job["run_id"])
            version = await register_run_model(self.ledger, SYSTEM, job["workspace_id"], job["project_id"], evidence)
        job = await self.observe(
            job,
            ExternalObservation(kind="state", state="completed", upstream_state=look.upstream_state, reason=reason),
        )
        if version is not None:
            await self.observe(
                job, ExternalObservation(kind="result", message=f"registered as model version {version}"), sync=False
            )
        return await self.ledger.get_external_job(job["workspace_id"], job["job_id"])

    async def _import(self, job: dict[str, Any], look: Look) -> dict[str, Any]:
        if job["surface"] == "managed":
            return await self._record_provider_model(job, look)
        run_dir = self.settings.runs_dir / job["run_id"]
        if job["surface"] == "hf-jobs":
            read = await read_hub_run(self.hub(), run_dir, job, look.all_logs)
            made = f"pushed {read.result['repo']}@{read.result['commit']}"
        else:
            read = await self.outputs.read_run(run_dir, job)
            made = f"wrote {read.result['files']} checked files to {job['destination']}"
        for batch in read.metrics:
            await self.ledger.ingest_metrics(SYSTEM, job["workspace_id"], job["project_id"], batch)
        await self._register_files(job, read.artifacts)
        await self._end_run(job, "completed", f"{where(job)} job {job['upstream_job_id']} {made}")
        return {**read.result, **(look.result or {})}

    async def _record_provider_model(self, job: dict[str, Any], look: Look) -> dict[str, Any]:
        model = (look.result or {}).get("fine_tuned_model")
        if not model:
            raise ImportRefused(f"{where(job)} reported success without a fine_tuned_model")
        reference = canonical_json({"provider": job["provider"], "job_id": job["upstream_job_id"], "model": model})
        await self._register_files(
            job,
            [
                ArtifactSpec(
                    run_id=job["run_id"],
                    attempt_id=f"{job['run_id']}.a1",
                    kind="model_reference",
                    uri=f"managed://{job['provider']}/{model}",
                    sha256=hashlib.sha256(reference.encode()).hexdigest(),
                    size_bytes=0,
                    media_type="application/vnd.bashgym.model-reference+json",
                )
            ],
        )
        await self._end_run(job, "completed", f"{where(job)} made model {model}", started=True)
        return {"fine_tuned_model": model, "trained_tokens": (look.result or {}).get("trained_tokens")}

    async def _register_files(self, job: dict[str, Any], specs: list[ArtifactSpec]) -> None:
        for spec in specs:
            await self.ledger.register_artifact(SYSTEM, job["workspace_id"], job["project_id"], spec)

    async def _ingest(self, job: dict[str, Any], records: list[tuple[int, dict[str, float]]]) -> None:
        points = [
            MetricPoint(metric=name, step=step, value=value)
            for step, values in records
            for name, value in values.items()
            if math.isfinite(value)
        ]
        if points:
            batch = MetricBatch(run_id=job["run_id"], attempt_id=f"{job['run_id']}.a1", points=points)
            await self.ledger.ingest_metrics(SYSTEM, job["workspace_id"], job["project_id"], batch)

    async def observe(
        self, job: dict[str, Any], observation: ExternalObservation, *, sync: bool = True
    ) -> dict[str, Any]:
        written = await self.ledger.observe_external_job(SYSTEM, job["workspace_id"], job["job_id"], observation)
        job = written.record
        if sync:
            await self.sync_run(job, observation.reason or observation.message or f"{where(job)} reported")
        return job

    async def sync_run(self, job: dict[str, Any], reason: str) -> None:
        """Move the job's run to the status its state and evidence prove (never backwards, never past the proof)."""
        state = job["state"]
        if state == "completed":
            return  # the import ends the run (completed, or failed saying why)
        target = _RUN_STATUS.get(state)
        if state == "running" or (state == "submitted" and job["compute_started"]):
            target = "running" if job["compute_started"] else "preparing"
        if state == "cancelled":
            target = "cancelled"
        if target is None:
            return
        if target in {"failed", "cancelled"}:
            await self._end_run(job, target, reason)
            return
        await self._move_run(job, target, reason)

    async def _move_run(self, job: dict[str, Any], target: str, reason: str, error: str = "") -> bool:
        ws, project, run_id = job["workspace_id"], job["project_id"], job["run_id"]
        current = (await self.ledger.get_run(ws, project, run_id))["status"]
        if current == target or not is_allowed(current, target):
            return False
        gpus = self._gpus(job) if target in ENDED_STATES else None
        spec = RunTransition.model_validate({"status": target, "reason": reason[:2000], "error_summary": error[:4000]})
        await self.ledger.transition_run(SYSTEM, ws, project, run_id, spec, settle_gpus=gpus)
        return True

    async def _end_run(self, job: dict[str, Any], status: str, reason: str, *, started: bool = False) -> None:
        if status == "completed" or started:
            await self._move_run(job, "running", f"{where(job)} ran the job")
        await self._move_run(job, status, reason, error=reason if status == "failed" else "")

    def _gpus(self, job: dict[str, Any]) -> int:
        if not job["ceiling_gpu_hours"] or not job["timeout_s"]:
            return 0
        return round(float(job["ceiling_gpu_hours"]) / (float(job["timeout_s"]) / 3600))

    def hub(self) -> HubJobs:
        return HubJobs(self.settings.hf_endpoint, self._hf_token)

    def upstream(self, job: dict[str, Any]) -> Upstream:
        """How `job`'s surface is asked; RuleRejected, saying what to set, where it is not configured here."""
        match job["surface"]:
            case "hf-jobs":
                return HubUpstream(self.hub())
            case "skypilot":
                return SkyUpstream(self.sky(job), self.outputs)
            case "dstack":
                return DstackUpstream(self.dstack_home(), self.outputs)
        settings = self.settings.providers.get(job["provider"])
        if settings is None:
            raise RuleRejected(
                f"Provider {job['provider']} is no longer configured; job {job['job_id']} cannot be followed."
            )
        return ProviderUpstream(Provider(job["provider"], settings.base_url, self._keys.get(job["provider"], "")))

    def sky(self, job: dict[str, Any] | None = None) -> SkyCli:
        if not self.settings.skypilot_bin:
            which = f"; job {job['job_id']} cannot be followed or cancelled" if job else ""
            raise RuleRejected(
                f"SkyPilot is not configured here (BASHGYM_SKYPILOT_BIN is empty){which}.",
                hint="Set BASHGYM_SKYPILOT_BIN to the `sky` of SkyPilot's own environment (and "
                "BASHGYM_SKYPILOT_API_URL to its API server, if not its default) and restart the daemon.",
            )
        return SkyCli(self.settings.skypilot_bin, self.settings.skypilot_api_url, self._environ)

    def dstack_home(self) -> Path:
        """Where `.dstack/config.yml` is read: the daemon user's home, as dstack's own client reads it."""
        return Path(self._environ.get("HOME") or Path.home())


def where(job: dict[str, Any]) -> str:
    match job["surface"]:
        case "hf-jobs":
            return "Hugging Face Jobs"
        case "skypilot":
            return "SkyPilot"
        case "dstack":
            return f"dstack project {job['lineage'].get('engine_project', '')}"
    return f"provider {job['provider']}"
