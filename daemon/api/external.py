"""External job routes: submit to Hugging Face Jobs or a managed provider, list, show, follow and cancel.

Submitting is a launch: it needs training.launch in the project the request's tracking context names (and, for a
Hub job, artifact.publish_private: the job pushes its model to a private repo), and it spends budget. Reading needs
ledger.read in the job's project; cancelling is run control (training.stop, or training.control on one's own).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.external import HfJobSubmission, PlanSubmission, ProviderJobSubmission
from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import (
    AUTHENTICATED,
    RUN_CONTROL,
    Call,
    Rule,
    authenticate,
    call_of,
    check_run_control,
    declare,
    requires,
    requires_somewhere,
)
from bashgym.daemon.external.hub_access import check_no_command_checks
from bashgym.daemon.external.planning import submit_plan
from bashgym.daemon.external.service import JOB_DATA_PATH, ExternalJobs
from bashgym.daemon.launch.pipeline import Prepared, prepare_job
from bashgym.daemon.launch.resolve import Upstream
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

LaunchCall = Annotated[
    Call, requires_somewhere("training.launch", statement="`artifact.publish_private` too for a Hub job (it pushes)")
]
ReadSomewhere = Annotated[Call, requires_somewhere("ledger.read")]
ReadCall = Annotated[Call, requires("ledger.read")]
SignedIn = Annotated[Call, requires(AUTHENTICATED)]


def _requires_job_control() -> Any:
    """Cancelling a job is run control over its run: training.stop, or training.control on one's own launch."""

    async def authorise(request: Request, workspace: Annotated[str | None, Query()] = None) -> Call:
        services, ws, principal = await authenticate(request, workspace)
        project = check_identifier(request.path_params["project"], field="project")
        job = await services.ledger.get_external_job(ws, check_identifier(request.path_params["job_id"], field="job"))
        if job["project_id"] != project:
            raise NotFound(f"No external job {job['job_id']!r} in project {project!r}.")
        await check_run_control(services.ledger, principal, "training.stop", ws, project, job["run_id"])
        return call_of(request, services, ws, principal, "training.stop")

    return declare(authorise, Rule("training.stop", statement=RUN_CONTROL["training.stop"] + " (the job's run)"))


StopCall = Annotated[Call, _requires_job_control()]
# What the daemon sets in a job's request: the caller names the data by its Hub coordinates, never a path here.
_SET_BY_DAEMON = ("dataset_path", "eval_dataset_path", "compute_target", "hf_repo_owner", "auto_push_hf")
JOB_DATA = ("dataset_path", "eval_dataset_path")  # read here and uploaded: confined like any launch's

router = APIRouter(prefix="/v1", tags=["external jobs"])


def _service(call: Call) -> ExternalJobs:
    if call.services.external is None:
        raise InvalidInput("This daemon runs no external job service.")
    return call.services.external


@router.post("/jobs/hf", status_code=201)
async def submit_hf_job(call: LaunchCall, body: HfJobSubmission, http: Request) -> Response:
    """`?project=P&model_version=MV&dataset_version=DV[&experiment=E]` makes the job an official run in P, as for
    /v1/training/start: MV must be a Hub repo, and `dataset` must hold DV's data (its digest is checked)."""
    named = [name for name in _SET_BY_DAEMON if name in body.request]
    if named:
        raise InvalidInput(
            f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} set by the daemon for a Hugging Face Job; "
            "drop it. The job downloads `dataset` from the Hub and pushes to `output_repo`.",
        )
    payload = {**body.request, "dataset_path": JOB_DATA_PATH}
    upstream = Upstream("hf-jobs", "a Hugging Face Job")
    prepared = await prepare_job(
        call.principal, call.reach, payload, http.query_params, upstream=upstream, confined=(), publishes=True
    )
    may_exceed = prepared.may_exceed_budget
    job = await _service(call).submit_hf(
        call.actor, call.workspace, prepared.request, body, may_exceed_budget=may_exceed
    )
    return json_response(job, 201)


@router.post("/jobs/providers/{provider}", status_code=201)
async def submit_provider_job(call: LaunchCall, provider: str, body: ProviderJobSubmission, http: Request) -> Response:
    """`?project=&model_version=&dataset_version=` as for /v1/training/start: the provider fine-tunes MV's Hub id on
    DV's stored content."""
    check_identifier(provider, field="provider")
    if "compute_target" in body.request:
        raise InvalidInput("compute_target is set by the daemon for a provider job; drop it.")
    # The data is read here and uploaded to the provider: confined like any launch's (a blob or a root's file).
    prepared = await _uploaded_job(call, http, body.request, Upstream(f"managed:{provider}", f"provider {provider}"))
    job = await _service(call).submit_provider(
        call.actor, call.workspace, provider, prepared.request, body, may_exceed_budget=prepared.may_exceed_budget
    )
    return json_response(job, 201)


@router.post("/compute/plans", status_code=201)
async def plan_compute(call: LaunchCall, body: PlanSubmission, http: Request) -> Response:
    """Render a SkyPilot or dstack plan (and with `launch`, submit it where the engine is configured); project and
    versions in the query as for /v1/training/start."""
    if "compute_target" in body.request:
        raise InvalidInput("compute_target is set by the plan (the job trains `local` where the engine runs it).")
    prepared = await _uploaded_job(call, http, body.request, Upstream(body.engine, f"a {body.engine} task"))
    request = prepared.request
    if body.launch:  # the task runs with the job token: no author's shell code runs beside it
        files = {name: Path(path) for name in JOB_DATA if (path := getattr(request, name))}
        await asyncio.to_thread(
            check_no_command_checks, request.method, files, "the plan's data", runs_in=f"the {body.engine} task"
        )
    answer = await submit_plan(
        _service(call), call.actor, call.workspace, request, body, may_exceed_budget=prepared.may_exceed_budget
    )
    return json_response(answer, 201)


async def _uploaded_job(call: Call, http: Request, request: dict[str, Any], upstream: Upstream) -> Prepared:
    """A job whose data the daemon reads and uploads (a provider's, a plan's), through the launch pipeline."""
    return await prepare_job(
        call.principal, call.reach, request, http.query_params, upstream=upstream, confined=JOB_DATA, publishes=False
    )


@router.get("/projects/{project}/compute-plans/{plan_id}")
async def show_plan(call: ReadCall, project: str, plan_id: str) -> Response:
    plan = await call.services.ledger.get_compute_plan(call.workspace, check_identifier(plan_id, field="plan_id"))
    if plan["project_id"] != project:
        raise NotFound(f"No compute plan {plan_id!r} in project {project!r}.")
    return json_response(plan)


@router.get("/jobs")
async def list_jobs(
    call: ReadSomewhere,
    project: str | None = None,
    surface: str | None = None,
    state: str | None = None,
    limit: int = 50,
) -> Response:
    """The external jobs of the projects the caller may read, newest first."""
    if project is not None:
        check_identifier(project, field="project")
        call.principal.require("ledger.read", workspace_id=call.workspace, project_id=project)
    jobs = await call.services.ledger.list_external_jobs(
        call.workspace, projects=[project] if project else None, surface=surface, state=state, limit=limit
    )
    visible = [job for job in jobs if call.principal.holds("ledger.read", job["project_id"])]
    return json_response({"jobs": [_summary(job) for job in visible]})


@router.get("/jobs/surfaces")
async def job_surfaces(call: SignedIn) -> Response:
    """Which external surfaces this daemon can use: keys present, the identity they verify as. Never a secret."""
    return json_response(await _service(call).surfaces())


@router.get("/jobs/hf/flavors")
async def hf_flavors(call: SignedIn) -> Response:
    """The Hub's job hardware, its GPUs and price per hour (what a ceiling is computed from)."""
    return json_response({"flavors": await _service(call).flavors()})


@router.get("/projects/{project}/jobs/{job_id}")
async def show_job(call: ReadCall, project: str, job_id: str) -> Response:
    return json_response(await _job_in(call, project, job_id))


@router.get("/projects/{project}/jobs/{job_id}/observations")
async def job_observations(call: ReadCall, project: str, job_id: str, after: int = 0, limit: int = 200) -> Response:
    await _job_in(call, project, job_id)
    page = await call.services.ledger.external_job_observations(call.workspace, job_id, after=after, limit=limit)
    return json_response(page)


@router.post("/projects/{project}/jobs/{job_id}/cancel")
async def cancel_job(call: StopCall, project: str, job_id: str) -> Response:
    return json_response(await _service(call).cancel(call.actor, call.workspace, project, job_id))


async def _job_in(call: Call, project: str, job_id: str) -> dict[str, Any]:
    """The job, if it is in `project` (404 otherwise, as for any record the caller cannot see)."""
    check_identifier(project, field="project")
    job = await call.services.ledger.get_external_job(call.workspace, check_identifier(job_id, field="job_id"))
    if job["project_id"] != project:
        raise NotFound(f"No external job {job_id!r} in project {project!r}.", hint="bashgym jobs list shows them.")
    return job


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    """A listing row: identity and state, without the request and receipt bodies."""
    keep = (
        "job_id", "project_id", "run_id", "surface", "provider", "upstream_job_id", "state", "upstream_state",
        "compute_started", "flavor", "cost_ceiling_usd", "destination", "created_by", "created_at", "updated_at",
        "reason",
    )  # fmt: skip
    return {key: job.get(key) for key in keep}
