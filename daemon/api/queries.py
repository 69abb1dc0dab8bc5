"""Read-only queries over a project: its context, metric trends, evaluations, comparisons and event pages."""

from __future__ import annotations

import contextlib
from typing import Annotated

from bashgym.client.errors import InvalidInput
from bashgym.client.models import (
    EventPage,
)
from bashgym.client.validation import (
    check_identifier,
    check_metric_name,
)
from bashgym.daemon.api.evaluations import withhold_protected
from bashgym.daemon.api.long_polls import long_poll, recheck_of
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import (
    Call,
    ReadCall,
    check_optional,
)
from bashgym.ledger.queries import RawPage
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

MAX_WAIT_S = 30.0

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
    check_optional(run, lambda v: check_identifier(v, field="run"))
    text = await call.services.ledger.trend_json(call.workspace, project, metric, run)
    return Response(text, media_type="application/json")


@router.get("/projects/{project}/evaluations")
async def evaluations(call: ReadCall, project: str, suite: str | None = None) -> Response:
    check_optional(suite, lambda v: check_identifier(v, field="suite"))
    listing = await call.services.ledger.list_evaluations(call.workspace, project, suite=suite)
    listing["results"] = await withhold_protected(call, project, listing["results"])
    return json_response(listing)


@router.get("/projects/{project}/compare")
async def compare(
    call: ReadCall, project: str, run: Annotated[list[str], Query()], suite: str | None = None
) -> Response:
    for run_id in run:
        check_identifier(run_id, field="run")
    check_optional(suite, lambda v: check_identifier(v, field="suite"))
    return json_response(await call.services.ledger.compare_runs(call.workspace, project, run, suite))


@router.get("/projects/{project}/events", response_model=EventPage)
async def project_events(
    call: ReadCall,
    request: Request,
    project: str,
    after_cursor: int = 0,
    limit: int = 100,
    wait_s: float = 0,
    type: Annotated[list[str] | None, Query()] = None,
) -> Response:
    return await _events(call, request, project, after_cursor, limit, wait_s, type)


@router.get("/events", response_model=EventPage)
async def workspace_events(
    call: ReadCall,
    request: Request,
    after_cursor: int = 0,
    limit: int = 100,
    wait_s: float = 0,
    type: Annotated[list[str] | None, Query()] = None,
) -> Response:
    return await _events(call, request, None, after_cursor, limit, wait_s, type)


async def _events(
    call: Call,
    request: Request,
    project: str | None,
    after_cursor: int,
    limit: int,
    wait_s: float,
    types: list[str] | None,
) -> Response:
    """A page of events; with wait_s, hold the request (up to 30 s) until one arrives, while the caller may read."""
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise InvalidInput(f"wait_s is {wait_s}; it must be between 0 and {MAX_WAIT_S:.0f} seconds.")
    for event_type in types or ():
        check_identifier(event_type, field="type")
    ledger = call.services.ledger

    async def read() -> RawPage:
        return await ledger.events_page_json(
            call.workspace, project, after_cursor=after_cursor, limit=limit, types=types
        )

    with call.services.waits.hold(call.principal.actor_id) if wait_s else contextlib.nullcontext():
        page = await long_poll(
            ledger,
            read,
            lambda p: p.count > 0,
            after_cursor=after_cursor,
            wait_s=wait_s,
            recheck=recheck_of(request, call),
        )
    return Response(page.text, media_type="application/json")
