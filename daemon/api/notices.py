"""Notices (ledger events rendered for people), the Discord channel each project's notices go to, and the
notices Discord refused for good."""

from __future__ import annotations

import contextlib
import time

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.models import ChannelSet, ConsumerCursor, NoticePage
from bashgym.client.validation import Identifier, check_identifier
from bashgym.daemon.api.long_polls import long_poll, recheck_of
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import ConsumerCall, ReadCall, WriteCall, written
from bashgym.daemon.authority import act_as_consumer
from bashgym.daemon.notices.render import NoticeRenderer
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

MAX_WAIT_S = 30.0


class NoticeFailure(BaseModel):
    """A notice Discord refused for good (a 4xx other than 429), as the consumer that posted it reports it."""

    model_config = ConfigDict(extra="forbid")
    cursor: int = Field(ge=1, description="The notice's cursor (its event's).")
    event_id: Identifier
    channel_id: str = Field(pattern=r"^\d{1,25}$", description="The Discord channel that refused it.")
    status: int = Field(ge=400, le=499, description="Discord's HTTP status.")
    code: int = Field(0, ge=0, description="Discord's error code (50008, 50035, ...); 0 when it gave none.")
    message: str = Field("", max_length=2000, description="Discord's message; stored redacted.")


router = APIRouter(prefix="/v1", tags=["notices"])


@router.get("/notices", response_model=NoticePage)
async def notices(
    call: ReadCall, request: Request, after_cursor: int = 0, limit: int = 50, wait_s: float = 0
) -> Response:
    """Notices after a cursor, across the workspace; with wait_s, held (up to 30 s) until an event arrives, while
    the caller may read them."""
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise InvalidInput(f"wait_s is {wait_s}; it must be between 0 and {MAX_WAIT_S:.0f} seconds.")
    if not 1 <= limit <= 500:
        raise InvalidInput(f"limit is {limit}; ask for 1 to 500 notices.")
    if "delegate.discord" in call.principal.capabilities:
        call.services.bot_polled_at = time.monotonic()
    ledger = call.services.ledger
    renderer = NoticeRenderer(ledger, call.services.settings.home / "reports")

    async def read() -> NoticePage:
        return await renderer.page(call.workspace, after_cursor=after_cursor, limit=limit)

    with call.services.waits.hold(call.principal.actor_id) if wait_s else contextlib.nullcontext():
        page = await long_poll(
            ledger,
            read,
            lambda p: bool(p.notices) or p.next_cursor != after_cursor,
            after_cursor=after_cursor,
            wait_s=wait_s,
            recheck=recheck_of(request, call),
        )
    return json_response(page)


@router.post("/consumers/{name}/failures", response_model=ConsumerCursor, tags=["events"])
async def notice_failed(call: ConsumerCall, name: str, body: NoticeFailure) -> Response:
    """Record a notice Discord refused for good as `notice.failed` and move the consumer's cursor past it, at
    once; it needs what moving that cursor needs, where the consumer reads (consumer_scope)."""
    check_identifier(name, field="name")
    scope = act_as_consumer(call.principal, name, call.services.settings.default_workspace)
    actor = call.principal.actor(scope.capability, call.actor.correlation_id)
    ws = scope.workspace_id or call.workspace
    return json_response(await call.services.ledger.record_notice_failure(actor, ws, name, **body.model_dump()))


@router.put("/projects/{project}/channel", status_code=201)
async def channel_set(call: WriteCall, project: str, body: ChannelSet) -> Response:
    return written(
        await call.services.ledger.set_channel(
            call.actor, call.workspace, project, channel_id=body.channel_id, guild_id=body.guild_id
        )
    )


@router.get("/projects/{project}/channel")
async def channel_show(call: ReadCall, project: str) -> Response:
    channel = await call.services.ledger.get_channel(call.workspace, project)
    if channel is None:
        raise NotFound(
            f"Project {project!r} has no notification channel.",
            hint="Run /project channel-set in the Discord channel that should receive its notices, or "
            f"bashgym project channel {project} --channel CHANNEL_ID",
        )
    return json_response(channel)
