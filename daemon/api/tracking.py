"""Tracked-run routes (bashgym.track): open a run by project and versions, log metric points, params, tags and
artifacts, heartbeat, end it.

Opening is a launch: `training.launch` in the project, its context composed by the launch pipeline's resolve stage.
Logging and ending need `training.launch` in the project, on a run the caller's actor opened, or on any tracked
run there with `training.stop` too (daemon/external/tracked.py). A batch of points sent with an Idempotency-Key is
answered once; a point already recorded is never recorded twice; an artifact's name holds one content.
"""

from __future__ import annotations

from typing import Annotated, Any

from bashgym.client.errors import InvalidInput
from bashgym.client.specs import MetricBatch
from bashgym.client.tracking import (
    ARTIFACT_NAME_MAX,
    TRACKED_TARGET,
    TrackedEnd,
    TrackedPoints,
    TrackedRunOpen,
    TrackedValues,
    check_artifact_name,
)
from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ReadCall, Rule, authenticate, call_of, declare, requires_somewhere, written
from bashgym.daemon.api.system import hold_upload
from bashgym.daemon.external.tracked import TrackedRuns
from bashgym.daemon.launch.resolve import in_named_project
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

OpenCall = Annotated[
    Call,
    requires_somewhere(
        "training.launch",
        also=("ledger.read",),
        statement="`ledger.read` there too: the run is composed from the project's registered versions",
    ),
]


def _requires_run_writer() -> Any:
    """Logging to a tracked run: training.launch, on a run the caller opened or, with training.stop too, any."""

    async def authorise(request: Request, workspace: Annotated[str | None, Query()] = None) -> Call:
        services, ws, principal = await authenticate(request, workspace)
        project = check_identifier(request.path_params["project"], field="project")
        run_id = check_identifier(request.path_params["run_id"], field="run_id")
        await _service_of(services.tracked).check_writer(principal, ws, project, run_id)
        return call_of(request, services, ws, principal, "training.launch")

    statement = (
        "`training.launch` in the project on a tracked run the caller opened, or on any with `training.stop` too"
    )
    return declare(authorise, Rule("training.launch", statement=statement))


WriterCall = Annotated[Call, _requires_run_writer()]
router = APIRouter(prefix="/v1", tags=["tracked runs"])
RUN = "/projects/{project}/tracked-runs/{run_id}"


def _service_of(tracked: TrackedRuns | None) -> TrackedRuns:
    assert tracked is not None, "the daemon always runs a tracked-run service"
    return tracked


@router.post("/tracked-runs", status_code=201)
async def open_tracked_run(call: OpenCall, body: TrackedRunOpen, http: Request) -> Response:
    """`?project=P&model_version=MV&dataset_version=DV[&experiment=E]`: a verified run in P, running."""
    if "project" not in http.query_params:
        raise InvalidInput(
            "A tracked run names its project and registered versions: ?project=P&model_version=MV&dataset_version=DV.",
            hint="bashgym.track.start_run(project=..., model_version=..., dataset_version=...).",
        )
    payload = {"method": body.method, "compute_target": TRACKED_TARGET}
    resolved = await in_named_project(call.principal, call.reach, payload, http.query_params)
    context = resolved["tracking_context"]
    call.principal.require("training.launch", workspace_id=call.workspace, project_id=context["project_id"])
    run = await _service_of(call.services.tracked).open(call.actor, call.principal, call.workspace, context, body)
    return json_response(run, 201)


@router.get(RUN)
async def show_tracked_run(call: ReadCall, project: str, run_id: str) -> Response:
    return json_response(await _service_of(call.services.tracked).show(call.workspace, project, run_id))


@router.post(f"{RUN}/metrics", status_code=201)
async def log_tracked_metrics(call: WriterCall, project: str, run_id: str, body: TrackedPoints) -> Response:
    service = _service_of(call.services.tracked)
    run = await call.services.ledger.run_head(call.workspace, project, run_id)
    batch = MetricBatch(run_id=run_id, attempt_id=service.attempt_of(run), points=body.points)
    if body.resent:
        return written(await service.log_resent_points(call.actor, call.workspace, run, batch))
    return written(await service.log_points(call.actor, call.workspace, run, batch))


@router.put(f"{RUN}/artifacts", status_code=201)
async def log_tracked_artifact(
    call: WriterCall,
    project: str,
    run_id: str,
    http: Request,
    name: Annotated[str, Query(max_length=ARTIFACT_NAME_MAX)],
) -> Response:
    """`?name=checkpoint-500/model.safetensors`, the file as the body (streamed, at most BASHGYM_MAX_UPLOAD_BYTES):
    stored in the project's content store and recorded as the run's artifact `bashgym://runs/RUN/NAME`."""
    check_artifact_name(name)
    service = _service_of(call.services.tracked)
    run = await call.services.ledger.run_head(call.workspace, project, run_id)
    await service.heard(call.actor, call.workspace, run)  # an ended run reads no body
    sha, size = await hold_upload(call, project, http.stream())
    return written(await service.log_artifact(call.actor, call.workspace, run, name, sha, size))


@router.post(f"{RUN}/values", status_code=201)
async def log_tracked_values(call: WriterCall, project: str, run_id: str, body: TrackedValues) -> Response:
    service = _service_of(call.services.tracked)
    run = await call.services.ledger.run_head(call.workspace, project, run_id)
    await service.log_values(call.actor, call.workspace, run, body.model_dump(mode="json"))
    return json_response(await service.show(call.workspace, project, run_id), 201)


@router.post(f"{RUN}/heartbeat")
async def tracked_heartbeat(call: WriterCall, project: str, run_id: str) -> Response:
    service = _service_of(call.services.tracked)
    run = await call.services.ledger.run_head(call.workspace, project, run_id)
    await service.heard(call.actor, call.workspace, run)
    return json_response({"run_id": run_id, "status": "running"})


@router.post(f"{RUN}/end")
async def end_tracked_run(call: WriterCall, project: str, run_id: str, body: TrackedEnd) -> Response:
    service = _service_of(call.services.tracked)
    run = await call.services.ledger.run_head(call.workspace, project, run_id)
    return written(await service.end(call.actor, call.workspace, run, body))
