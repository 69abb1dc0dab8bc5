"""Signing in to the web view: a one-time code exchanged for an HTTP-only session cookie bound to a principal.

`bashgym ui` (or Discord's `/ui`) asks the API for a link; the daemon keeps, in memory only, the identity the request
came with (its Authorization header, and for the bot the Discord user's headers) under a random code, hashed. The
link's code is good once, for `CODE_TTL_S`. Its exchange sets a cookie whose value is a fresh random session id
(HttpOnly, SameSite=Strict, Path=/ui); the code is spent. Every page resolves the identity again through the same
authority as the API, so a revoked token or grant ends the session's reach at once. Nothing here is written to disk:
a daemon restart signs everyone out. No secret appears in a page or in browser storage; the code is the only value a
URL carries, and it is dead once used or expired.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

CODE_TTL_S = 120.0
SESSION_TTL_S = 8 * 3600.0
COOKIE = "bashgym_ui"
# What identifies a caller: the bearer token, and for the bot the Discord user it acts for.
IDENTITY_HEADERS = ("authorization", "x-discord-user-id", "x-discord-role-ids", "x-discord-guild-id")
_MAX_OPEN = 10_000  # codes or sessions held at once: past this the oldest go


@dataclass(frozen=True)
class Identity:
    """The headers a principal is resolved from, and the workspace the link was made for."""

    headers: Mapping[str, str]
    workspace: str
    actor_id: str


@dataclass
class _Held:
    identity: Identity
    expires_at: float


class SignIns:
    """One-time codes and the sessions they open. `clock` is monotonic seconds (tests pass their own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._codes: dict[str, _Held] = {}
        self._sessions: dict[str, _Held] = {}

    def issue_code(self, headers: Mapping[str, str], workspace: str, actor_id: str) -> tuple[str, float]:
        """A new one-time code for this identity, and the seconds it stays good."""
        kept = {name: headers[name] for name in IDENTITY_HEADERS if name in headers}
        code = secrets.token_urlsafe(32)
        self._put(self._codes, _digest(code), _Held(Identity(kept, workspace, actor_id), self._clock() + CODE_TTL_S))
        return code, CODE_TTL_S

    def exchange(self, code: str) -> tuple[str, Identity] | None:
        """Spend a code: a new session id and its identity, or None for a code that is unknown, used or expired."""
        held = self._codes.pop(_digest(code), None)
        if held is None or held.expires_at < self._clock():
            return None
        session = secrets.token_urlsafe(32)
        self._put(self._sessions, _digest(session), _Held(held.identity, self._clock() + SESSION_TTL_S))
        return session, held.identity

    def identity(self, session: str | None) -> Identity | None:
        """The identity of a live session, or None (unknown or expired: the expired one is forgotten)."""
        if not session:
            return None
        key = _digest(session)
        held = self._sessions.get(key)
        if held is None:
            return None
        if held.expires_at < self._clock():
            del self._sessions[key]
            return None
        return held.identity

    def end(self, session: str | None) -> None:
        if session:
            self._sessions.pop(_digest(session), None)

    def _put(self, table: dict[str, _Held], key: str, held: _Held) -> None:
        now = self._clock()
        for stale in [k for k, v in table.items() if v.expires_at < now]:
            del table[stale]
        while len(table) >= _MAX_OPEN:
            del table[next(iter(table))]
        table[key] = held


def _digest(value: str) -> str:
    """Codes and session ids are kept and looked up by their digest, never as sent."""
    return hashlib.sha256(value.encode()).hexdigest()
