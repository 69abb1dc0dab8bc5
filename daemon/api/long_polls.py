"""Requests held open (event long-polls, campaign waits, the web view's live streams) while their caller may wait.

Such a request was authorised when it arrived, and may wait for minutes. While it waits it checks again, at every
append (a revocation is an append) and at least every second (Ledger.wait_for_events with a recheck), that its
caller still authenticates and still holds what the route needs; and once more after it read what it will send. So
a revoked or expired token, a revoked grant or a signed-out session ends it within a second, and nothing written
after the revocation reaches it. A check resolves the caller afresh through the ledger's cached token and grant
lookups, which the commit of every change of tokens or grants empties (Ledger.find_token): a tick costs a few
dictionary lookups, and the first check after a change one read.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bashgym.daemon.api.routing import Call, resolve
from bashgym.ledger.store import Ledger, Recheck
from fastapi import Request

T = TypeVar("T")


def recheck_of(request: Request, call: Call) -> Recheck:
    """What a request held open checks again while it waits: its credential, resolved afresh, still holds the
    route's capability here, in the path's project."""

    async def recheck() -> None:
        principal = await resolve(call.services, request.headers, call.workspace)
        project = request.path_params.get("project")
        principal.require(call.actor.capability, workspace_id=call.workspace, project_id=project)

    return recheck


async def long_poll(
    ledger: Ledger,
    read: Callable[[], Awaitable[T]],
    is_news: Callable[[T], bool],
    *,
    after_cursor: int,
    wait_s: float,
    recheck: Recheck,
) -> T:
    """What `read` finds once `is_news` says so (or when wait_s has passed), read again after each event past
    after_cursor; what it read after a wait goes out only once `recheck` passes again."""
    deadline = time.monotonic() + wait_s
    has_waited = False
    while True:
        head = ledger.last_cursor  # read first: every event up to it is committed, so `read` sees them
        found = await read()
        if has_waited:
            await recheck()
        remaining = deadline - time.monotonic()
        if is_news(found) or remaining <= 0:
            return found
        await ledger.wait_for_events(max(head, after_cursor), remaining, recheck=recheck)
        has_waited = True
