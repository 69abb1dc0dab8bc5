"""How each surface is asked about a job it runs, and how a Hugging Face Job's pushed run is read back.

A `Look` is one poll: the job's state in our words and the upstream's own, and what is new since the last poll
(log lines, provider events, metric points). `read_hub_run` reads the commit a Hub job pushed, trusting nothing it
has not checked: the evidence must name this job and the digest of the request submitted, and every model file must
match its sha256 in model_profile.json.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bashgym.client.specs import ArtifactSpec, MetricBatch
from bashgym.daemon.blobs import file_digest
from bashgym.daemon.external.hf_jobs import HubJobs, JobView, UpstreamError
from bashgym.daemon.external.providers import STATUSES, Provider
from bashgym.daemon.lanes.supervisor import MetricsFollower, artifact_kind
from bashgym.trainers.contracts.external_job import (
    EVIDENCE_FILE,
    EVIDENCE_SCHEMA,
    METRICS_FILE,
    PROFILE_FILE,
    PUSHED_PREFIX,
)


@dataclass
class Look:
    """One poll of an upstream job: its state in our words and its own, and what is new since the last poll."""

    state: str
    upstream_state: str
    message: str = ""
    new_logs: list[str] = field(default_factory=list)
    logs_through: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    all_logs: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None


class Upstream(Protocol):
    """One surface's way of asking about, cancelling and finishing a job."""

    async def find(self, job: dict[str, Any]) -> dict[str, Any] | None: ...
    async def look(self, job: dict[str, Any], seen: dict[str, Any]) -> Look: ...
    async def cancel(self, job: dict[str, Any]) -> None: ...


class HubUpstream:
    """A Hugging Face Job: its stage, and every log line since the last look."""

    def __init__(self, hub: HubJobs) -> None:
        self.hub = hub

    async def find(self, job: dict[str, Any]) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.hub.find, job["job_id"], job["provider"])

    async def look(self, job: dict[str, Any], seen: dict[str, Any]) -> Look:
        view: JobView = await asyncio.to_thread(self.hub.inspect, job["upstream_job_id"], job["provider"])
        lines = await asyncio.to_thread(self.hub.logs, job["upstream_job_id"], job["provider"])
        through = int(seen.get("logs_through", 0))
        return Look(
            view.state,
            view.stage,
            view.message,
            new_logs=lines[through:],
            logs_through=max(through, len(lines)),
            all_logs=lines,
        )

    async def cancel(self, job: dict[str, Any]) -> None:
        await asyncio.to_thread(self.hub.cancel, job["upstream_job_id"], job["provider"])


class ProviderUpstream:
    """A managed provider's fine-tune: its status, and its events since the last look (metrics among them)."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    async def find(self, job: dict[str, Any]) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.provider.find, job["job_id"])

    async def look(self, job: dict[str, Any], seen: dict[str, Any]) -> Look:
        upstream = job["upstream_job_id"]
        state = await asyncio.to_thread(self.provider.retrieve, upstream)
        events = await asyncio.to_thread(self.provider.events_after, upstream, set(seen.get("event_ids", set())))
        metrics = []
        for event in events:
            data = event.get("data") or {}
            if event.get("type") == "metrics" and isinstance(data.get("step"), int):
                values = {
                    f"train.{name.removeprefix('train_')}": float(value)
                    for name, value in data.items()
                    if name != "step" and isinstance(value, int | float)
                }
                metrics.append((int(data["step"]), values))
        status = str(state.get("status") or "")
        error = state.get("error") or {}
        message = str(error.get("message") or "") if isinstance(error, dict) else ""
        return Look(STATUSES.get(status, "unknown"), status, message, events=events, metrics=metrics, result=state)

    async def cancel(self, job: dict[str, Any]) -> None:
        await asyncio.to_thread(self.provider.cancel, job["upstream_job_id"])


class ImportRefused(Exception):
    """What a completed job left cannot be taken as its result; the message says why."""


@dataclass(frozen=True)
class HubRun:
    """A pushed run, read and checked: the job's result, its model files as artifacts, its metric batches."""

    result: dict[str, Any]
    artifacts: list[ArtifactSpec]
    metrics: list[MetricBatch]


async def read_hub_run(hub: HubJobs, run_dir: Path, job: dict[str, Any], logs: list[str]) -> HubRun:
    """The commit the job pushed, into the run's directory: its evidence must name this job and this request, and
    every model file must match the digest in model_profile.json. Answers the files as artifacts and the metrics."""
    repo = job["destination"].removeprefix("hf://")
    pushed = [line.removeprefix(PUSHED_PREFIX).strip() for line in logs if line.startswith(PUSHED_PREFIX)]
    if not pushed:
        raise ImportRefused(f"the job's logs never said it pushed to {repo}; there is nothing to import")
    named_repo, _, commit = pushed[-1].rpartition("@")
    if named_repo != repo or not commit:
        raise ImportRefused(f"the job says it pushed {pushed[-1]}, not a commit of {repo}")
    try:
        profile = json.loads((await asyncio.to_thread(hub.read_file, repo, commit, PROFILE_FILE, run_dir)).read_text())
        evidence = json.loads(
            (await asyncio.to_thread(hub.read_file, repo, commit, EVIDENCE_FILE, run_dir)).read_text()
        )
        files = [str(entry["path"]) for entry in profile["files"]]
        await asyncio.to_thread(hub.download_run, repo, commit, run_dir, files)
    except (UpstreamError, ValueError, KeyError) as exc:
        raise ImportRefused(f"{repo}@{commit} could not be read: {exc}") from exc
    if evidence.get("schema") != EVIDENCE_SCHEMA or evidence.get("job_id") != job["job_id"]:
        raise ImportRefused(f"{repo}@{commit} holds the evidence of another job ({evidence.get('job_id')!r})")
    if evidence.get("request_digest") != job["request_digest"]:
        raise ImportRefused(f"{repo}@{commit} was trained from another request than the one submitted")
    specs = []
    for entry in profile["files"]:
        path = run_dir / entry["path"]
        digest, size = await asyncio.to_thread(file_digest, path)
        if digest != entry["sha256"]:
            raise ImportRefused(f"{entry['path']} in {repo}@{commit} does not match its recorded sha256")
        specs.append(
            ArtifactSpec(
                run_id=job["run_id"],
                attempt_id=f"{job['run_id']}.a1",
                kind=artifact_kind(entry["path"], use_lora=bool(profile.get("use_lora"))),
                uri=f"bashgym://runs/{job['run_id']}/{entry['path']}",
                sha256=digest,
                size_bytes=size,
            )
        )
    follower = MetricsFollower(run_dir / METRICS_FILE, f"{job['run_id']}.a1", job["run_id"])
    batches, _, _ = await asyncio.to_thread(follower.read_batches)
    result = {"repo": repo, "commit": commit, "files": len(specs), "dataset_sha256": evidence.get("dataset_sha256")}
    return HubRun(result, specs, batches)
