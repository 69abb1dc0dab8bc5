"""How each surface is asked about a job it runs, and how a Hugging Face Job's pushed run is read back.

A `Look` is one poll: the job's state in our words and the upstream's own, and what is new since the last poll
(log lines, provider events, metric points). `read_hub_run` reads the commit a Hub job pushed, trusting nothing it
has not checked: the evidence must name this job and the digest of the request submitted, and every model file must
match its sha256 in model_profile.json.
"""

from __future__ import annotations

import asyncio
import json
import shutil
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
    checked = await checked_run(run_dir, job, profile, evidence, f"{repo}@{commit}")
    result = {
        "repo": repo,
        "commit": commit,
        "files": len(checked.artifacts),
        "dataset_sha256": evidence.get("dataset_sha256"),
    }
    return HubRun(result, checked.artifacts, checked.metrics)


async def checked_run(
    run_dir: Path, job: dict[str, Any], profile: dict[str, Any], evidence: dict[str, Any], where: str
) -> HubRun:
    """A finished job's files in `run_dir`, taken only if its evidence names this job and the digest of the request
    submitted, and every model file matches its sha256 in model_profile.json; its artifacts and metric batches."""
    if evidence.get("schema") != EVIDENCE_SCHEMA or evidence.get("job_id") != job["job_id"]:
        raise ImportRefused(f"{where} holds the evidence of another job ({evidence.get('job_id')!r})")
    if evidence.get("request_digest") != job["request_digest"]:
        raise ImportRefused(f"{where} was trained from another request than the one submitted")
    specs = []
    for entry in profile["files"]:
        path = run_dir / entry["path"]
        digest, size = await asyncio.to_thread(file_digest, path)
        if digest != entry["sha256"]:
            raise ImportRefused(f"{entry['path']} in {where} does not match its recorded sha256")
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
    return HubRun({}, specs, batches)


class StoreOutputs:
    """A launched plan's outputs, read where the operator says the daemon's host sees its checkpoint store
    (settings `engine_outputs`: store prefix -> local folder, a bucket mount or a shared filesystem)."""

    def __init__(self, mounts: dict[str, Path]) -> None:
        self.mounts = mounts

    def folder(self, store: str) -> Path | None:
        """The local folder of `store`, inside its mount (a tenant's store path never leaves it), or None."""
        for prefix in sorted(self.mounts, key=len, reverse=True):
            rest = store.removeprefix(prefix)
            if rest == store or (rest and not rest.startswith("/") and not prefix.endswith("/")):
                continue
            root = self.mounts[prefix].resolve()
            found = (root / rest.strip("/")).resolve()
            return found if found.is_relative_to(root) else None
        return None

    def run_folder(self, job: dict[str, Any]) -> Path:
        """Where the job's trainer writes its run (`--workdir` /bashgym/out, run/ under it)."""
        folder = self.folder(job["destination"])
        if folder is None:
            raise ImportRefused(
                f"the daemon reads no checkpoint store {job['destination']!r} (BASHGYM_ENGINE_OUTPUTS names "
                f"{', '.join(self.mounts) or 'none'}); its outputs cannot be imported"
            )
        return folder / "run"

    async def new_metrics(self, job: dict[str, Any], seen: dict[str, Any]) -> list[tuple[int, dict[str, float]]]:
        """Points the trainer appended to metrics.jsonl since the last look. A run folder older than the job is an
        earlier job's (the trainer empties it when it starts): nothing is read from it."""
        try:
            run = self.run_folder(job)
            started = (run / "request.json").stat().st_mtime
        except (ImportRefused, OSError):
            return []
        if started < float(job["lineage"].get("launched_epoch") or 0):
            return []
        follower = MetricsFollower(run / METRICS_FILE, f"{job['run_id']}.a1", job["run_id"])
        follower.offset = int(seen.get("metrics_offset", 0))
        _, records, offset = await asyncio.to_thread(follower.read_batches)
        seen["metrics_offset"] = offset
        return records

    async def read_run(self, run_dir: Path, job: dict[str, Any]) -> HubRun:
        """The finished run from the store, copied into the run's directory and checked like a pushed one."""
        source = self.run_folder(job)
        where = f"{job['destination']} (run/)"
        try:
            profile = json.loads((source / PROFILE_FILE).read_text())
            evidence = json.loads((source / EVIDENCE_FILE).read_text())
            names = [str(entry["path"]) for entry in profile["files"]]
            await asyncio.to_thread(_copy_files, source, run_dir, [*names, PROFILE_FILE, EVIDENCE_FILE, METRICS_FILE])
        except (OSError, ValueError, KeyError) as exc:
            raise ImportRefused(f"{where} could not be read: {exc}") from exc
        checked = await checked_run(run_dir, job, profile, evidence, where)
        result = {
            "store": job["destination"],
            "files": len(checked.artifacts),
            "dataset_sha256": evidence.get("dataset_sha256"),
        }
        return HubRun(result, checked.artifacts, checked.metrics)


def _copy_files(source: Path, dest: Path, names: list[str]) -> None:
    root = source.resolve()
    for name in names:
        path = (source / name).resolve()
        if not path.is_relative_to(root):  # model_profile.json names files of its own run only
            raise ValueError(f"{name} is outside the run's folder")
        if not path.exists() and name == METRICS_FILE:
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
