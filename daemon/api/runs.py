"""Run routes: register a run with its tracking context, list and show runs, move their state, ingest metrics."""

from __future__ import annotations

from typing import Annotated

from bashgym.client.models import (
    MetricBatch,
    RunRegistration,
    RunTransition,
    WriteResult,
)
from bashgym.client.specs import run_project
from bashgym.client.validation import (
    check_identifier,
    check_run_status,
    check_timestamp,
)
from bashgym.daemon.api.evaluations import withhold_protected
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import (
    Call,
    NamedProjectWrite,
    ReadCall,
    WriteCall,
    authorise,
    check_optional,
    refuse_daemon_records,
    requires_run_control,
    written,
)
from bashgym.daemon.api.tags import TagQuery, tag_query
from fastapi import APIRouter, Request
from starlette.responses import Response

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
    filter: str | None = None,
    sort: str | None = None,
    columns: str | None = None,
    after: str | None = None,
    tag: TagQuery = None,
) -> Response:
    """The project's runs, newest first. With `filter` (the search grammar), `sort`, `columns` or `after` (the
    previous page's `next`), one page of the runs table instead: {runs, columns, sort, descending, next}."""
    check_optional(status, check_run_status)
    check_optional(method, lambda v: check_identifier(v, field="method"))
    check_optional(experiment, lambda v: check_identifier(v, field="experiment"))
    check_optional(before, lambda v: check_timestamp(v, field="before"))
    check_optional(after, lambda v: check_identifier(v, field="after"))
    if filter is not None or sort is not None or columns is not None or after is not None:
        # status and method are checked identifiers above: quoted, they are literal values in the grammar.
        given = [filter or "", *(f"{name} = '{value}'" for name, value in (("status", status), ("method", method))
                                 if value is not None)]  # fmt: skip
        # tag=key=value joins as tags.key = 'value' (keys are checked tag keys: backquoted, they are literal), tag=key
        # as "has the tag": like '%' holds for any value a tag has, and not where it has none (NULL).
        for key, value in tag_query(tag):
            literal = "'" + (value or "").replace("'", "''") + "'"
            given.append(f"tags.`{key}` = {literal}" if value is not None else f"tags.`{key}` like '%'")
        return json_response(
            await call.services.ledger.runs_table_page(
                call.workspace, project, filter_text=" and ".join(g for g in given if g.strip()), sort=sort or "",
                columns=columns or "", experiment=experiment, after=after, limit=limit,
            )
        )  # fmt: skip
    return json_response(
        await call.services.ledger.list_runs(
            call.workspace,
            project,
            status=status,
            method=method,
            experiment=experiment,
            limit=limit,
            before=before,
            tags=tag_query(tag),
        )
    )


@router.get("/projects/{project}/runs/{run_id}")
async def show_run(call: ReadCall, project: str, run_id: str) -> Response:
    run = await call.services.ledger.get_run(call.workspace, project, run_id)
    run["evaluations"] = await withhold_protected(call, project, run["evaluations"])
    run.update(await call.services.ledger.labels_of(call.workspace, project, "run", run_id))
    live = call.services.training.live_step(call.workspace, project, run_id) if call.services.training else None
    if live is not None:
        run["live"] = live  # a running trainer's last step: the ledger holds only its logged steps
    return json_response(run)


# Moving a run's state is the right to stop it: `training.stop`, or `training.control` on one's own run.
TransitionCall = Annotated[Call, requires_run_control("training.stop")]


@router.post("/projects/{project}/runs/{run_id}/transitions", response_model=WriteResult)
async def transition_run(call: TransitionCall, project: str, run_id: str, body: RunTransition) -> Response:
    """Record the state of a run another system trains. A run this daemon launched or follows is the daemon's to
    record: its trainer would keep running (and holding its slot) under a state written here."""
    await refuse_daemon_records(call, project, run_id, "state")
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
    await refuse_daemon_records(call, project, batch.run_id, "metrics")
    return written(await call.services.ledger.ingest_metrics(call.actor, call.workspace, project, batch))
