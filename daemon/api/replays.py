"""An Idempotency-Key's stored answer goes only to a caller who may have it now.

IdempotencyMiddleware finds the stored answer of the key (or the 409 its reuse with another body meets) among the
keys of the request's principal, and then lets the request go through the route's own authorisation instead of
answering at once. Every authorising dependency ends in routing.call_of, which hands the answer out (`hand_out`)
once the caller has authenticated now and holds the route's capability; a caller who fails meets the route's
refusal (401 for a revoked or expired token, 403 for a grant that is gone, 429), and nothing of the stored answer.
The handler never runs a second time. Keys belong to the principal (`principal_digest`): the bot's one token speaks
for many Discord users, and none of them gets another's answer.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from contextvars import ContextVar

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

_PENDING: ContextVar[Response | None] = ContextVar("bashgym_pending_replay", default=None)


class Replay(Exception):
    """Raised where the route's authorisation passed, with the stored answer to send instead of the handler's."""

    def __init__(self, answer: Response) -> None:
        super().__init__("the stored answer of an Idempotency-Key")
        self.answer = answer


@contextlib.contextmanager
def pending(answer: Response) -> Iterator[None]:
    """While the request runs through the route's authorisation, `answer` waits to be handed out."""
    token = _PENDING.set(answer)
    try:
        yield
    finally:
        _PENDING.reset(token)


def hand_out() -> None:
    """Called once a route's authorisation passed: raise Replay with the request's stored answer, if it has one."""
    answer = _PENDING.get()
    if answer is not None:
        raise Replay(answer)


async def answer(request: Request, exc: Exception) -> Response:
    """The app's handler of Replay: the stored answer itself."""
    assert isinstance(exc, Replay)
    return exc.answer


def principal_digest(scope: Scope) -> str:
    """Whose keys a request's are: its bearer token, and for the bot the Discord user it acts for. Headers are read
    as the principal is resolved from them (a header sent twice counts the first time), so the keys looked up are
    those of the principal the route authenticates. A token's digest is that of its Authorization header alone, as
    keys stored before were filed."""
    headers = Headers(scope=scope)
    credential = headers.get("authorization", "")
    user = headers.get("x-discord-user-id")
    if user is not None:
        credential += f"\nx-discord-user-id: {user}"
    return hashlib.sha256(credential.encode("latin-1")).hexdigest()
