"""Signing in to the web view: a one-time code exchanged for an HTTP-only session cookie bound to a principal.

`bashgym ui` (or Discord's `/ui`) asks the API for a link; the daemon keeps, in memory, who asked (the id of the
token the request came with, never the token, and for the bot the Discord user, roles and guild it acted for) under
a random code, hashed. The link's code is good once, for `CODE_TTL_S`. Its exchange opens a session in the ledger
(ledger/ui_sessions.py: the sha256 of the cookie's value, never the value) and sets a cookie of a fresh random value
(HttpOnly, SameSite=Strict, Path=/ui); the code is spent. A session outlives a daemon restart and ends when it
expires (`SESSION_TTL_S`, never past its token's own expiry), when its browser signs out, when its owner or an admin
revokes it, or when its token is found revoked or expired. Every page resolves the identity again through the same
authority as the API, so a revoked token or grant ends the session's reach at once. No secret appears in a page or
in browser storage; the code is the only value a URL carries, and it is dead once used or expired.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from bashgym.client.specs import Actor
from bashgym.daemon.authority.principals import Principal
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import utc_iso

CODE_TTL_S = 120.0
SESSION_TTL_S = 8 * 3600.0
COOKIE = "bashgym_ui"
NEXT_COOKIE = "bashgym_ui_next"  # the page a signed-out visit asked for, where sign-in returns
# Who a bot's link was made for: the Discord user it acts for (none of them a secret).
DELEGATION_HEADERS = ("x-discord-user-id", "x-discord-role-ids", "x-discord-guild-id")
_MAX_OPEN = 10_000  # codes held at once: past this the oldest go


@dataclass(frozen=True)
class Identity:
    """Whom a link signs in: the token it was asked with (by id), the Discord user the bot acted for, the workspace
    the link was made for."""

    token_id: str
    delegation: Mapping[str, str]
    workspace: str
    actor_id: str
    credential_kind: str = "token"
    token_expires_at: str | None = None


@dataclass
class _Held:
    identity: Identity
    expires_at: float


class SignIns:
    """One-time codes, in memory. `clock` is monotonic seconds (tests pass their own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._codes: dict[str, _Held] = {}

    def issue_code(self, headers: Mapping[str, str], workspace: str, principal: Principal) -> tuple[str, float]:
        """A new one-time code for this principal (as `headers` made it), and the seconds it stays good."""
        delegation = {name: headers[name] for name in DELEGATION_HEADERS if name in headers}
        identity = Identity(
            principal.token_id, delegation, workspace, principal.actor_id, principal.credential_kind,
            principal.expires_at,
        )  # fmt: skip
        code = secrets.token_urlsafe(32)
        now = self._clock()
        for stale in [k for k, v in self._codes.items() if v.expires_at < now]:
            del self._codes[stale]
        while len(self._codes) >= _MAX_OPEN:
            del self._codes[next(iter(self._codes))]
        self._codes[digest(code)] = _Held(identity, now + CODE_TTL_S)
        return code, CODE_TTL_S

    def exchange(self, code: str) -> Identity | None:
        """Spend a code: its identity, or None for a code that is unknown, used or expired."""
        held = self._codes.pop(digest(code), None)
        if held is None or held.expires_at < self._clock():
            return None
        return held.identity


async def open_session(ledger: Ledger, identity: Identity) -> str:
    """Open a session for `identity` in the ledger; the cookie's value (only its digest is kept)."""
    session = secrets.token_urlsafe(32)
    expires_at = utc_iso(ledger.now() + timedelta(seconds=SESSION_TTL_S))
    if identity.token_expires_at:
        expires_at = min(expires_at, utc_iso(datetime.fromisoformat(identity.token_expires_at)))
    await ledger.open_ui_session(
        _actor(identity.actor_id, identity.credential_kind),
        session_hash=digest(session), workspace_id=identity.workspace, actor_id=identity.actor_id,
        token_id=identity.token_id, delegation=dict(identity.delegation), expires_at=expires_at,
    )  # fmt: skip
    return session


async def session_identity(ledger: Ledger, session: str | None) -> Identity | None:
    """The identity of a live session, or None (unknown, ended or expired)."""
    if not session:
        return None
    found = await ledger.live_ui_session(digest(session))
    if found is None:
        return None
    kind = "discord" if found["delegation"] else "token"
    return Identity(found["token_id"], found["delegation"], found["workspace_id"], found["actor_id"], kind)


async def end_session(ledger: Ledger, session: str | None, *, reason: str = "signed_out") -> None:
    """End the session of this cookie, if it is live (signing out, or its token found dead)."""
    identity = await session_identity(ledger, session)
    if session and identity is not None:
        actor = _actor(identity.actor_id, identity.credential_kind)
        await ledger.end_ui_session(actor, session_hash=digest(session), reason=reason)


def same_site_page(target: str) -> str | None:
    """`target` when it is a page of this view (a path under /ui, with its query), else None: sign-in redirects only
    there, never to another site (`//evil.com`, `https://evil.com`, `/\\evil.com`, `javascript:`)."""
    if not target or len(target) > 2000 or any(c in target for c in "\\\r\n\t") or not target.isprintable():
        return None
    parts = urlsplit(target)
    path = parts.path
    if parts.scheme or parts.netloc or target.startswith("//") or "//" in path or "/../" in f"{path}/":
        return None
    if path.startswith("/ui/signin"):
        return None  # a sign-in link is spent once used: going back to it would only refuse
    return target if path == "/ui" or path.startswith("/ui/") else None


def digest(value: str) -> str:
    """Codes and session ids are kept and looked up by their digest, never as sent."""
    return hashlib.sha256(value.encode()).hexdigest()


def _actor(actor_id: str, credential_kind: str) -> Actor:
    return Actor(actor_id=actor_id, credential_kind="discord" if credential_kind == "discord" else "token",
                 capability="authenticated")  # fmt: skip
