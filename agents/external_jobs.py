"""The MCP tools of external jobs (Hugging Face Jobs, managed provider fine-tunes): list them, show one with its
last observations, cancel one upstream. Each is one daemon request (a job named without its project is found among
the jobs the token may read first); the daemon decides every call."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from bashgym.agents.answers import Answer
from bashgym.agents.daemon import Daemon
from bashgym.agents.tools import Confirm, Tool, confirmed
from bashgym.client.external import ExternalState, Surface
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

JobId = Annotated[str, Field(min_length=1, max_length=200, description="external job id (ext-...), as listed")]
JobProject = Annotated[
    str | None, Field(max_length=200, description="the job's project (found from the job id when left out)")
]
OBSERVATIONS_SHOWN = 20
PAGE = 500
MAX_PAGES = 40  # a job with more observations than this shows the newest of the pages read


class ExternalJobs(Answer):
    jobs: list[dict[str, Any]] = Field(
        description="newest first: job_id, project_id, run_id, surface, provider, upstream_job_id, state, "
        "compute_started, flavor, destination, reason"
    )


class ExternalJob(Answer):
    job_id: str
    project_id: str
    run_id: str = Field(description="the run the job trains: an ordinary run of the project")
    surface: str = Field(description="hf-jobs, managed, skypilot or dstack")
    upstream_job_id: str | None = Field(None, description="the upstream's id: proof of a submission")
    state: str = Field(description="submitting, submitted, running, completed, failed, cancelled or unknown")
    compute_started: bool = Field(description="log or metric evidence that compute ran")
    result: dict[str, Any] | None = Field(None, description="what it made: a Hub repo@commit or the provider's model")
    reason: str | None = None
    cancel_requested_by: str | None = None
    observations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the last observations, oldest first: seq, kind (state, log, metric, event, receipt, result, "
        "cancel), upstream_state, message, data",
    )


def build(daemon: Daemon) -> list[Tool]:
    """The external-job tools, bound to one daemon connection."""

    async def get(path: str, **params: Any) -> Any:
        return await daemon.call("GET", path, params=params)

    async def job_path(job_id: str, project: str | None) -> str:
        if not project:
            listing = await get("/v1/jobs", limit=PAGE)
            found = next((job for job in listing["jobs"] if job["job_id"] == job_id), None)
            if found is None:
                raise ToolError(
                    f"No external job {job_id!r} among the jobs this token may read. Next: list_external_jobs."
                )
            project = str(found["project_id"])
        return f"/v1/projects/{quote(project, safe='')}/jobs/{quote(job_id, safe='')}"

    async def last_observations(path: str) -> list[dict[str, Any]]:
        kept: list[dict[str, Any]] = []
        after = 0
        for _ in range(MAX_PAGES):
            page = await get(f"{path}/observations", after=after, limit=PAGE)
            if not page["observations"]:
                break
            kept = (kept + list(page["observations"]))[-OBSERVATIONS_SHOWN:]
            after = page["next_after"]
        return kept

    async def list_external_jobs(
        project: Annotated[str | None, Field(max_length=200, description="only this project's jobs")] = None,
        state: Annotated[ExternalState | None, Field(description="only jobs in this state")] = None,
        surface: Annotated[Surface | None, Field(description="only jobs on this surface")] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> ExternalJobs:
        return ExternalJobs.model_validate(
            await get("/v1/jobs", project=project, state=state, surface=surface, limit=limit)
        )

    async def show_external_job(job_id: JobId, project: JobProject = None) -> ExternalJob:
        path = await job_path(job_id, project)
        job = dict(await get(path))
        job["observations"] = await last_observations(path)
        return ExternalJob.model_validate(job)

    async def cancel_external_job(
        job_id: JobId, project: JobProject = None, confirm: Confirm = False, ctx: Context | None = None
    ) -> ExternalJob:
        path = await job_path(job_id, project)
        await confirmed(ctx, confirm, f"Cancel external job {job_id} upstream: its run ends cancelled.")
        cancelled = await daemon.call("POST", f"{path}/cancel", body={})
        return ExternalJob.model_validate(cancelled)

    read = {"read_only": True, "idempotent": True}
    return [
        Tool("list_external_jobs", "ledger.read", list_external_jobs, "External jobs (Hugging Face Jobs, provider "
             "fine-tunes), newest first, by project, state or surface.", **read),
        Tool("show_external_job", "ledger.read", show_external_job, "One external job: upstream id, state, result, "
             "reason, and its last observations (states, log lines, metrics, events).", **read),
        Tool("cancel_external_job", "training.stop", cancel_external_job, "Cancel an external job upstream; its run "
             "ends cancelled. Asks to confirm (confirm: true).", destructive=True, idempotent=True),
    ]  # fmt: skip
