"""Route handlers: each declares its capability and makes one service call."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from bashgym.daemon.api_authority import authority_routes
from bashgym.daemon.api_campaigns import campaign_routes
from bashgym.daemon.api_consumers import consumer_routes
from bashgym.daemon.api_device_groups import device_group_routes
from bashgym.daemon.api_devices import device_routes
from bashgym.daemon.api_evaluations import evaluation_routes, withhold_protected
from bashgym.daemon.api_exchange import exchange_routes
from bashgym.daemon.api_models import (
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BlobStored,
    BudgetEntrySpec,
    ComparisonSpec,
    ConsumerCursor,
    CursorAck,
    DatasetFromBlob,
    DatasetVersionSpec,
    DecisionSpec,
    EnvironmentSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    EventPage,
    ExperimentSpec,
    Health,
    MetricBatch,
    ModelVersionSpec,
    ProjectSpec,
    ReportSpec,
    RunRegistration,
    RunTransition,
    WriteResult,
)
from bashgym.daemon.api_notices import notice_routes
from bashgym.daemon.api_operator import operator_routes
from bashgym.daemon.api_training import training_routes
from bashgym.daemon.app import Services, json_response, uptime_s
from bashgym.daemon.authority import consumer_capability
from bashgym.daemon.blobs import count_rows
from bashgym.daemon.host_paths import HostPaths
from bashgym.daemon.request_paths import check_model_source, require_held
from bashgym.daemon.routing import (
    AUTHENTICATED,
    Call,
    ReadCall,
    WriteCall,
    authorise,
    requires,
    requires_somewhere,
    written,
)
from bashgym.ledger.errors import Forbidden, InvalidInput
from bashgym.ledger.lineage import run_project
from bashgym.ledger.models import UNASSIGNED, Actor
from bashgym.ledger.validation import (
    check_identifier,
    check_metric_name,
    check_run_status,
    check_timestamp,
)
from fastapi import APIRouter, FastAPI, Query, Request
from starlette.responses import Response

MAX_WAIT_S = 30.0
# Routes whose project is named in the request (an upload's ?project=, a run's context, a new project's id).
NamedProjectWrite = Annotated[Call, requires_somewhere("ledger.write")]
NamedProjectsRead = Annotated[Call, requires_somewhere("ledger.read")]


def register_routes(app: FastAPI) -> None:
    routers = (
        _system_routes(),
        authority_routes(),
        _lineage_routes(),
        _run_routes(),
        _evidence_routes(),
        _query_routes(),
        training_routes(),
        device_routes(),
        device_group_routes(),
        evaluation_routes(),
        exchange_routes(),
        campaign_routes(),
        notice_routes(),
        consumer_routes(),
        operator_routes(),
    )
    # Each router's routes already carry its prefix; adding them to the app's own router keeps them
    # plain APIRoutes (include_router wraps them in lazily resolved branches).
    for router in routers:
        app.router.routes.extend(router.routes)


def _system_routes() -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.get("/health", response_model=Health, tags=["system"])
    async def health(request: Request) -> Response:
        services: Services = request.app.state.services
        ledger_status = await services.ledger.quick_status()
        return json_response(
            Health(
                status="ok" if ledger_status == "ok" else "degraded",
                version=services.version,
                uptime_s=uptime_s(services),
                ledger=ledger_status,
                pid=os.getpid(),
            )
        )

    @router.get("/ledger/health", tags=["ledger"])
    async def ledger_health(call: ReadCall) -> Response:
        return json_response(await call.services.ledger.health())

    @router.get("/ledger/verify", tags=["ledger"])
    async def ledger_verify(call: ReadCall) -> Response:
        return json_response(await call.services.ledger.verify())

    @router.post("/ledger/backup", tags=["ledger"])
    async def ledger_backup(call: Annotated[Call, requires("ledger.backup")], to: Annotated[str, Query()]) -> Response:
        """Copy the whole ledger (every workspace) into the operator's backup directory, 0600: an admin action."""
        target = HostPaths(call.services.settings).backup_target(to)
        return json_response({"to": str(target), **await call.services.ledger.backup(target)})

    @router.put("/blobs", response_model=BlobStored, tags=["artifacts"])
    async def put_blob(call: NamedProjectWrite, request: Request, project: str = UNASSIGNED) -> Response:
        """Upload a file for `project` (a dataset, model files, a wheel): the project holds it, within its quota."""
        check_identifier(project, field="project")
        authorise(call, project)
        services, ws = call.services, call.workspace
        quotas = {
            "quota_bytes": services.settings.project_quota_bytes,
            "workspace_quota_bytes": services.settings.workspace_quota_bytes,
        }

        async def admit(sha: str, size: int) -> None:
            """Nothing past a quota is stored: bytes the project holds already cost nothing more."""
            if not await services.ledger.holds_blob(ws, project, sha):
                await services.ledger.check_quota(ws, project, size, **quotas)

        await services.ledger.check_quota(ws, project, 0, **quotas)  # a full project reads no body
        sha, size = await services.blobs.put_stream(
            request.stream(), max_bytes=services.settings.max_upload_bytes, admit=admit
        )
        await services.ledger.hold_blob(call.actor, ws, project, sha, size, **quotas)
        return json_response(BlobStored(sha256=sha, size_bytes=size, project_id=project))

    @router.get("/consumers/{name}/cursor", response_model=ConsumerCursor, tags=["events"])
    async def get_cursor(call: ReadCall, name: str) -> Response:
        return json_response(await call.services.ledger.get_consumer_cursor(check_identifier(name, field="name")))

    @router.put("/consumers/{name}/cursor", response_model=ConsumerCursor, tags=["events"])
    async def put_cursor(call: Annotated[Call, requires(AUTHENTICATED)], name: str, body: CursorAck) -> Response:
        """Move a durable consumer's cursor: it needs that consumer's own capability (consumer_capability)."""
        check_identifier(name, field="name")
        capability, project = consumer_capability(name)
        call.principal.require(capability, workspace_id=call.workspace, project_id=project)
        actor = call.principal.actor(capability, call.actor.correlation_id)
        return json_response(
            await call.services.ledger.ack_consumer_cursor(name, body.cursor, actor=actor, ws=call.workspace)
        )

    return router


def _lineage_routes() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["lineage"])

    @router.post("/projects", response_model=WriteResult, status_code=201)
    async def create_project(call: NamedProjectWrite, body: ProjectSpec) -> Response:
        authorise(call, body.project_id)  # a principal scoped to P may create P, and only P
        return written(await call.services.ledger.create_project(call.actor, call.workspace, body))

    @router.get("/projects")
    async def list_projects(call: NamedProjectsRead) -> Response:
        """The workspace's projects; a principal scoped to some projects sees those alone."""
        projects = await call.services.ledger.list_projects(call.workspace)
        return json_response([p for p in projects if call.principal.holds("ledger.read", p["project_id"])])

    @router.get("/projects/{project}")
    async def show_project(call: ReadCall, project: str) -> Response:
        return json_response(await call.services.ledger.get_project(call.workspace, project))

    @router.post("/projects/{project}/experiments", response_model=WriteResult, status_code=201)
    async def create_experiment(call: WriteCall, project: str, body: ExperimentSpec) -> Response:
        return written(await call.services.ledger.create_experiment(call.actor, call.workspace, project, body))

    @router.get("/projects/{project}/experiments")
    async def list_experiments(call: ReadCall, project: str) -> Response:
        return json_response(await call.services.ledger.list_experiments(call.workspace, project))

    @router.post("/projects/{project}/model-versions", response_model=WriteResult, status_code=201)
    async def register_model_version(call: WriteCall, project: str, body: ModelVersionSpec) -> Response:
        await check_model_source(call.reach, project, body.model_dump())
        return written(await call.services.ledger.register_model_version(call.actor, call.workspace, project, body))

    @router.post("/projects/{project}/dataset-versions", response_model=WriteResult, status_code=201)
    async def register_dataset_version(call: WriteCall, project: str, body: DatasetVersionSpec) -> Response:
        return written(await call.services.ledger.register_dataset_version(call.actor, call.workspace, project, body))

    @router.post("/projects/{project}/dataset-versions/from-blob", response_model=WriteResult, status_code=201)
    async def register_dataset_from_blob(call: WriteCall, project: str, body: DatasetFromBlob) -> Response:
        blobs = call.services.blobs
        await require_held(call.reach, project, body.sha256)
        name = Path(body.filename).name
        rows = await asyncio.to_thread(count_rows, blobs.path_for(body.sha256), name)
        spec = DatasetVersionSpec(
            dataset_version_id=body.dataset_version_id,
            dataset_id=body.dataset_id,
            source_uri=f"bashgym://artifacts/sha256/{body.sha256}",
            content_digest=body.sha256,
            split_manifest={"file": name, **body.split_manifest},
            row_counts={"total": rows},
        )
        return written(await call.services.ledger.register_dataset_version(call.actor, call.workspace, project, spec))

    @router.post("/projects/{project}/environments", response_model=WriteResult, status_code=201)
    async def register_environment(call: WriteCall, project: str, body: EnvironmentSpec) -> Response:
        return written(await call.services.ledger.register_environment(call.actor, call.workspace, project, body))

    return router


def _run_routes() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["runs"])

    @router.post("/runs", response_model=WriteResult, status_code=201)
    async def register_run(call: NamedProjectWrite, body: RunRegistration) -> Response:
        authorise(call, run_project(body.tracking_context, call.workspace))
        return written(await call.services.ledger.register_run(call.actor, call.workspace, body))

    @router.get("/projects/{project}/runs")
    async def list_runs(
        call: ReadCall,
        project: str,
        status: str | None = None,
        method: str | None = None,
        experiment: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> Response:
        _check_optional(status, check_run_status)
        _check_optional(method, lambda v: check_identifier(v, field="method"))
        _check_optional(experiment, lambda v: check_identifier(v, field="experiment"))
        _check_optional(before, lambda v: check_timestamp(v, field="before"))
        return json_response(
            await call.services.ledger.list_runs(
                call.workspace, project, status=status, method=method, experiment=experiment, limit=limit, before=before
            )
        )

    @router.get("/projects/{project}/runs/{run_id}")
    async def show_run(call: ReadCall, project: str, run_id: str) -> Response:
        run = await call.services.ledger.get_run(call.workspace, project, run_id)
        run["evaluations"] = await withhold_protected(call, project, run["evaluations"])
        return json_response(run)

    @router.post("/projects/{project}/runs/{run_id}/transitions", response_model=WriteResult)
    async def transition_run(call: WriteCall, project: str, run_id: str, body: RunTransition) -> Response:
        return written(await call.services.ledger.transition_run(call.actor, call.workspace, project, run_id, body))

    @router.post(
        "/projects/{project}/metrics",
        response_model=WriteResult,
        status_code=201,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": MetricBatch.model_json_schema()}},
            }
        },
    )
    async def ingest_metrics(call: WriteCall, project: str, request: Request) -> Response:
        # Parsed straight from bytes: FastAPI's dict-then-model path costs ~3x on 10,000-point batches.
        batch = MetricBatch.model_validate_json(await request.body())
        return written(await call.services.ledger.ingest_metrics(call.actor, call.workspace, project, batch))

    return router


def _evidence_routes() -> APIRouter:
    router = APIRouter(prefix="/v1/projects/{project}", tags=["evidence"])

    def add(path: str, spec: type[Any], method: Callable[..., Any]) -> None:
        async def handler(call: Call, project: str, body: Any) -> Response:
            return written(await method(call.services.ledger, call.actor, call.workspace, project, body))

        # Real annotation objects (this module's annotations are strings) so FastAPI sees the body model.
        handler.__annotations__ = {"call": WriteCall, "project": str, "body": spec, "return": Response}
        handler.__name__ = f"post_{path.replace('-', '_')}"
        router.add_api_route(f"/{path}", handler, methods=["POST"], response_model=WriteResult, status_code=201)

    from bashgym.ledger import Ledger

    add("artifacts", ArtifactSpec, Ledger.register_artifact)
    add("eval-suites", EvalSuiteSpec, Ledger.register_eval_suite)
    add("eval-results", EvalResultSpec, Ledger.record_eval_result)
    add("comparisons", ComparisonSpec, Ledger.record_comparison)
    add("decisions", DecisionSpec, Ledger.record_decision)
    add("aliases", AliasMove, Ledger.move_alias)
    add("budget-entries", BudgetEntrySpec, _bookkeeping_budget_entry)
    add("reports", ReportSpec, Ledger.record_report)
    add("annotations", AnnotationSpec, Ledger.add_annotation)
    return router


async def _bookkeeping_budget_entry(ledger: Any, actor: Actor, ws: str, project: str, spec: BudgetEntrySpec) -> Any:
    """Reservations and settlements from other systems; limits and amendments need budget.amend."""
    if spec.kind in {"limit", "amend"}:
        raise Forbidden(
            f"A budget {spec.kind} changes what may be spent; it needs budget.amend.",
            hint=f"Use bashgym budget set or amend (POST /v1/projects/{project}/budget/{spec.kind}).",
            details={"capability": "budget.amend"},
        )
    return await ledger.add_budget_entry(actor, ws, project, spec)


def _query_routes() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["queries"])

    @router.get("/projects/{project}/context")
    async def context(call: ReadCall, project: str) -> Response:
        return json_response(
            await call.services.ledger.project_context(
                call.workspace, project, stale_after_s=call.services.settings.stale_after_s
            )
        )

    @router.get("/projects/{project}/trend")
    async def trend(call: ReadCall, project: str, metric: str, run: str | None = None) -> Response:
        check_metric_name(metric)
        _check_optional(run, lambda v: check_identifier(v, field="run"))
        text = await call.services.ledger.trend_json(call.workspace, project, metric, run)
        return Response(text, media_type="application/json")

    @router.get("/projects/{project}/evaluations")
    async def evaluations(call: ReadCall, project: str, suite: str | None = None) -> Response:
        _check_optional(suite, lambda v: check_identifier(v, field="suite"))
        listing = await call.services.ledger.list_evaluations(call.workspace, project, suite=suite)
        listing["results"] = await withhold_protected(call, project, listing["results"])
        return json_response(listing)

    @router.get("/projects/{project}/compare")
    async def compare(
        call: ReadCall, project: str, run: Annotated[list[str], Query()], suite: str | None = None
    ) -> Response:
        for run_id in run:
            check_identifier(run_id, field="run")
        _check_optional(suite, lambda v: check_identifier(v, field="suite"))
        return json_response(await call.services.ledger.compare_runs(call.workspace, project, run, suite))

    @router.get("/projects/{project}/events", response_model=EventPage)
    async def project_events(
        call: ReadCall,
        project: str,
        after_cursor: int = 0,
        limit: int = 100,
        wait_s: float = 0,
        type: Annotated[list[str] | None, Query()] = None,
    ) -> Response:
        return await _events(call, project, after_cursor, limit, wait_s, type)

    @router.get("/events", response_model=EventPage)
    async def workspace_events(
        call: ReadCall,
        after_cursor: int = 0,
        limit: int = 100,
        wait_s: float = 0,
        type: Annotated[list[str] | None, Query()] = None,
    ) -> Response:
        return await _events(call, None, after_cursor, limit, wait_s, type)

    return router


async def _events(
    call: Call, project: str | None, after_cursor: int, limit: int, wait_s: float, types: list[str] | None
) -> Response:
    """A page of events; with wait_s, hold the request (up to 30 s) until one arrives."""
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise InvalidInput(f"wait_s is {wait_s}; it must be between 0 and {MAX_WAIT_S:.0f} seconds.")
    for event_type in types or ():
        check_identifier(event_type, field="type")
    ledger = call.services.ledger
    deadline = time.monotonic() + wait_s
    with call.services.waits.hold(call.principal.actor_id) if wait_s else contextlib.nullcontext():
        while True:
            head = ledger.last_cursor
            page = await ledger.events_page_json(
                call.workspace, project, after_cursor=after_cursor, limit=limit, types=types
            )
            remaining = deadline - time.monotonic()
            if page.count or remaining <= 0:
                return Response(page.text, media_type="application/json")
            await ledger.wait_for_events(max(head, after_cursor), remaining)


def _check_optional(value: str | None, check: Callable[[str], object]) -> None:
    """A filter left out matches everything; one given must be well formed, or it would silently match nothing."""
    if value is not None:
        check(value)
