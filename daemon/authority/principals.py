"""Capabilities, profiles, and the resolution of each request into a principal (tokens and Discord)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bashgym.client.errors import Forbidden, InvalidInput, NotFound, RateLimited, Unauthenticated
from bashgym.client.specs import Actor
from bashgym.client.validation import IDENTIFIER_RE
from bashgym.daemon.notices.render import CONSOLE_CONSUMER
from bashgym.ledger.store import Ledger

CAPABILITIES: tuple[str, ...] = (
    "ledger.read", "ledger.write", "training.launch", "training.control", "training.stop", "eval.run",
    "eval.protected", "evidence.import", "runcard.write", "promotion.decide", "promotion.override",
    "artifact.publish_private", "artifact.publish_public", "budget.amend", "campaign.create", "campaign.control",
    "campaign.conclude", "device.manage", "authority.manage", "delegate.discord", "ledger.backup",
    "ledger.annotate",
)  # fmt: skip

_VIEWER = frozenset({"ledger.read"})
_RESEARCHER = _VIEWER | {
    "ledger.write", "training.launch", "training.control", "eval.run", "runcard.write", "campaign.create",
    "campaign.control", "artifact.publish_private", "ledger.annotate",
}  # fmt: skip
_LEAD = _RESEARCHER | {
    "training.stop", "promotion.decide", "budget.amend", "eval.protected", "campaign.conclude", "device.manage",
}  # fmt: skip
# promotion.override and artifact.publish_public are granted only explicitly; delegate.discord only to the bot.
# evidence.import (recording results and comparisons another system made) is an admin's: a caller's typed figures
# are not what the daemon measured.
EXPLICIT_ONLY = frozenset({"promotion.override", "artifact.publish_public", "delegate.discord"})
_ADMIN = frozenset(CAPABILITIES) - EXPLICIT_ONLY

PROFILES: dict[str, frozenset[str]] = {
    "viewer": _VIEWER,
    "researcher": frozenset(_RESEARCHER),
    "lead": frozenset(_LEAD),
    "admin": _ADMIN,
}

TOKEN_PREFIX = "bgy_"
DISCORD_USER_HEADER = "x-discord-user-id"
DISCORD_ROLES_HEADER = "x-discord-role-ids"
DISCORD_GUILD_HEADER = "x-discord-guild-id"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_grantable(profile: str, capabilities: list[str]) -> frozenset[str]:
    """The capabilities a profile plus explicit names amount to; unknown names are refused."""
    if profile and profile not in PROFILES:
        raise InvalidInput(f"Unknown profile {profile!r}.", hint=f"Profiles: {', '.join(PROFILES)}.")
    unknown = sorted(set(capabilities) - set(CAPABILITIES))
    if unknown:
        raise InvalidInput(f"Unknown capability {unknown[0]!r}.", hint=f"Capabilities: {', '.join(CAPABILITIES)}.")
    if not profile and not capabilities:
        raise InvalidInput("Name a profile or at least one capability.", hint="For example --profile researcher.")
    return PROFILES.get(profile, frozenset()) | frozenset(capabilities)


@dataclass(frozen=True)
class Principal:
    """Who is calling and what they may do, resolved afresh on every request."""

    actor_id: str
    token_id: str
    capabilities: frozenset[str]
    project_capabilities: Mapping[str, frozenset[str]] = field(default_factory=dict)
    credential_kind: str = "token"
    workspace_id: str | None = None  # None: of no one workspace (the operator's tokens), so of every one
    project_id: str | None = None
    expires_at: str | None = None  # the token's own expiry (ISO, UTC); what it issues may not outlive it

    def actor(self, capability: str, correlation_id: str) -> Actor:
        kind = "discord" if self.credential_kind == "discord" else "token"
        return Actor(actor_id=self.actor_id, credential_kind=kind, capability=capability, correlation_id=correlation_id)

    def holds(self, capability: str, project_id: str | None) -> bool:
        if capability in self.capabilities:
            return True
        return project_id is not None and capability in self.project_capabilities.get(project_id, frozenset())

    def holds_anywhere(self, capability: str) -> bool:
        """Whether it holds `capability` workspace-wide or in at least one project."""
        return capability in self.capabilities or any(capability in c for c in self.project_capabilities.values())

    def all_capabilities(self) -> list[str]:
        every = set(self.capabilities).union(*self.project_capabilities.values())
        return sorted(every)

    def require(self, capability: str, *, workspace_id: str | None, project_id: str | None = None) -> None:
        """Raise Forbidden naming the capability and scope unless this principal holds it there.

        `workspace_id` None is the daemon as a whole (every workspace): only a principal of no one workspace
        acts there."""
        scope = f"project {project_id!r}" if project_id else f"workspace {workspace_id or '*'!r}"
        details: dict[str, object] = {"capability": capability, "scope": scope}
        if self.workspace_id and workspace_id != self.workspace_id:
            beyond = f"workspace {workspace_id!r}" if workspace_id else "every workspace (the daemon as a whole)"
            raise Forbidden(
                f"{self.actor_id} is limited to workspace {self.workspace_id!r}; "
                f"{capability} in {beyond} is beyond it.",
                hint="Ask the daemon's operator, whose admin token reaches every workspace."
                if workspace_id is None
                else f"Use a token of workspace {workspace_id!r}.",
                details=details,
            )
        if self.project_id and self.project_id != project_id:
            raise Forbidden(
                f"{self.actor_id} is limited to project {self.project_id!r}; {capability} for {scope} is beyond it.",
                details=details,
            )
        if not self.holds(capability, project_id):
            raise Forbidden(
                f"{self.actor_id} lacks the capability {capability} for {scope}.",
                hint="Ask an admin to grant it (bashgym auth issue, or bashgym authority grant).",
                details=details,
            )

    def require_daemon_wide(self, capability: str) -> None:
        """Raise Forbidden unless this principal holds `capability` with no workspace limit: what it acts on
        (a backup, every token, the whole audit trail) holds every workspace."""
        self.require(capability, workspace_id=None)


async def resolve_request(
    ledger: Ledger, headers: Mapping[str, str], *, now: datetime, workspace_id: str, allowed_guilds: frozenset[str]
) -> Principal:
    """Turn the Authorization header (and, for the bot, the Discord identity headers) into the Principal acting in
    `workspace_id`; Forbidden when the token is limited to another workspace."""
    token_principal = await resolve_token(ledger, headers.get("authorization"), now)
    return await act_in_workspace(ledger, headers, token_principal, workspace_id, allowed_guilds=allowed_guilds)


async def act_in_workspace(
    ledger: Ledger,
    headers: Mapping[str, str],
    token_principal: Principal,
    workspace_id: str,
    *,
    allowed_guilds: frozenset[str],
) -> Principal:
    """The principal a request of `token_principal` acts as in `workspace_id`: the token's own, or the Discord
    user the bot's token acts for. A token limited to one workspace acts nowhere else, for itself or for others."""
    if token_principal.workspace_id and token_principal.workspace_id != workspace_id:
        raise Forbidden(
            f"{token_principal.actor_id} is limited to workspace {token_principal.workspace_id!r}; "
            f"this request names workspace {workspace_id!r}.",
            hint=f"Leave the workspace out (the token's own applies), or use a token of workspace {workspace_id!r}.",
            details={"scope": f"workspace {workspace_id!r}"},
        )
    discord_user = headers.get(DISCORD_USER_HEADER)
    delegation = [h for h in (DISCORD_USER_HEADER, DISCORD_ROLES_HEADER, DISCORD_GUILD_HEADER) if h in headers]
    if not delegation:
        return token_principal
    if "delegate.discord" not in token_principal.capabilities:
        raise Forbidden(
            f"{token_principal.actor_id} lacks delegate.discord, so it may not act for Discord users.",
            hint="Only the bot's token, which holds delegate.discord, sends Discord identity headers.",
            details={"capability": "delegate.discord", "scope": "workspace"},
        )
    guild = headers.get(DISCORD_GUILD_HEADER, "")
    if guild not in allowed_guilds:
        raise Forbidden(
            f"Discord guild {guild or '(none)'} is not allowed to use this BashGym.",
            hint="Add it to BASHGYM_DISCORD_GUILD_IDS on the daemon.",
        )
    if discord_user is None or not is_snowflake(discord_user):
        raise Unauthenticated("The Discord user id header is missing or not a snowflake.")
    roles = [r for r in headers.get(DISCORD_ROLES_HEADER, "").split(",") if r.strip()]
    if not all(is_snowflake(r.strip()) for r in roles):
        raise Unauthenticated("The Discord role ids header must be comma-separated snowflakes.")
    grants = await ledger.active_grants(workspace_id, discord_user, [r.strip() for r in roles])
    return _discord_principal(discord_user, token_principal.token_id, workspace_id, grants)


def is_snowflake(value: str) -> bool:
    """A Discord id: ASCII digits only (str.isdigit also takes superscripts and other scripts' digits)."""
    return value.isascii() and value.isdigit() and len(value) <= 20


def _discord_principal(user_id: str, via_token: str, workspace_id: str, grants: list[dict[str, object]]) -> Principal:
    workspace_caps: set[str] = set()
    project_caps: dict[str, set[str]] = {}
    for grant in grants:
        caps = PROFILES.get(str(grant["profile"]), frozenset()) | set(grant["capabilities"])  # type: ignore[call-overload]
        project = grant["project_id"]
        if project is None:
            workspace_caps |= caps
        else:
            project_caps.setdefault(str(project), set()).update(caps)
    # The bot's own capability never passes on to the people it acts for.
    workspace_caps.discard("delegate.discord")
    return Principal(
        actor_id=f"discord:{user_id}",
        token_id=via_token,
        capabilities=frozenset(workspace_caps),
        project_capabilities={p: frozenset(c - {"delegate.discord"}) for p, c in project_caps.items()},
        credential_kind="discord",
        workspace_id=workspace_id,
    )


async def resolve_token(ledger: Ledger, authorization: str | None, now: datetime) -> Principal:
    """The principal a bearer token stands for; Unauthenticated when it is missing, unknown, revoked or expired."""
    if not authorization:
        raise Unauthenticated(
            "This route needs a bearer token.",
            hint="Send Authorization: Bearer <token>; the CLI reads $BASHGYM_HOME/admin.token.",
        )
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("The Authorization header must be 'Bearer <token>'.")
    row = await ledger.find_token(hash_token(token.strip()))
    if row is None:
        raise Unauthenticated("The bearer token is not known.", hint="Check the token, or ask an admin for one.")
    return _live_principal(row, now)


async def resolve_token_id(ledger: Ledger, token_id: str, now: datetime) -> Principal:
    """The principal of the token with this id (a web view session holds the id, never the secret); Unauthenticated
    when it is unknown, revoked or expired, as for the token itself."""
    try:
        row = await ledger.get_token(token_id, None)
    except NotFound:
        raise Unauthenticated(f"Token {token_id} is not known.", hint="Ask an admin for a new token.") from None
    return _live_principal(row, now)


def _live_principal(row: Mapping[str, Any], now: datetime) -> Principal:
    """The principal of a token row; Unauthenticated when it was revoked or has expired."""
    if row["revoked_at"]:
        raise Unauthenticated(
            f"Token {row['token_id']} was revoked at {row['revoked_at']}.",
            hint="Ask an admin for a new token (bashgym auth issue).",
        )
    if row["expires_at"] and row["expires_at"] <= now.isoformat():
        raise Unauthenticated(
            f"Token {row['token_id']} expired at {row['expires_at']}.",
            hint="Ask an admin for a new token (bashgym auth issue).",
        )
    return _row_principal(row)


def _row_principal(row: Mapping[str, object]) -> Principal:
    """The principal a live token row stands for (stored capabilities_json or an already decoded list)."""
    stored = row.get("capabilities_json")
    listed = json.loads(str(stored)) if stored is not None else row.get("capabilities", [])
    capabilities = PROFILES.get(str(row["profile"]), frozenset()) | frozenset(listed)  # type: ignore[arg-type]
    project = row["project_id"]
    if project:
        # A project-scoped token holds its capabilities in that project only.
        return Principal(
            actor_id=str(row["actor_id"]),
            token_id=str(row["token_id"]),
            capabilities=frozenset(),
            project_capabilities={str(project): capabilities},
            workspace_id=_optional(row["workspace_id"]),
            project_id=str(project),
            expires_at=_optional(row.get("expires_at")),
        )
    return Principal(
        actor_id=str(row["actor_id"]),
        token_id=str(row["token_id"]),
        capabilities=capabilities,
        workspace_id=_optional(row["workspace_id"]),
        expires_at=_optional(row.get("expires_at")),
    )


class RateLimiter:
    """A token bucket per key (a principal, or a client address for bad tokens)."""

    MAX_KEYS = 100_000  # bounded: a flood of distinct keys must not grow memory without end

    def __init__(self, per_minute: int, burst: int, *, what: str = "changes", hint: str = "") -> None:
        self.rate_per_s = per_minute / 60.0
        self.burst = float(burst)
        self.what = what
        self.hint = hint or "send metric points in larger batches"
        self._buckets: dict[str, tuple[float, float]] = {}

    def check(self, principal: str, now_s: float | None = None) -> None:
        """Take one request from the key's bucket, or raise RateLimited saying when to retry."""
        now = time.monotonic() if now_s is None else now_s
        tokens = self._refilled(principal, now)
        if tokens < 1.0:
            self._buckets[principal] = (tokens, now)
            raise self._limited(principal, tokens)
        if len(self._buckets) >= self.MAX_KEYS and principal not in self._buckets:
            self._buckets.clear()
        self._buckets[principal] = (tokens - 1.0, now)

    def _refilled(self, key: str, now: float) -> float:
        tokens, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate_per_s)

    def _limited(self, key: str, tokens: float) -> RateLimited:
        retry_after = max(1, int((1.0 - tokens) / self.rate_per_s + 0.999))
        return RateLimited(
            f"{key} is over its rate limit for {self.what}.",
            retry_after_s=retry_after,
            hint=f"Retry after {retry_after} s, or {self.hint}.",
        )


class WaitSlots:
    """Long-polls (wait_s > 0) each principal may hold open at once: each held request keeps a socket and a task."""

    def __init__(self, per_principal: int) -> None:
        self.per_principal = per_principal
        self._held: dict[str, int] = {}

    @contextlib.contextmanager
    def hold(self, principal: str) -> Iterator[None]:
        held = self._held.get(principal, 0)
        if held >= self.per_principal:
            raise RateLimited(
                f"{principal} already holds {held} waiting requests open; the limit is {self.per_principal}.",
                retry_after_s=1,
                hint="Wait on one request at a time (one long-poll per consumer), or poll without wait_s.",
            )
        self._held[principal] = held + 1
        try:
            yield
        finally:
            left = self._held[principal] - 1
            if left:
                self._held[principal] = left
            else:
                del self._held[principal]


DAEMON_WIDE = "*"  # the workspace of events that belong to no one workspace (auth.token_issued's too)
DAEMON_ACTOR = "system:daemon"


@dataclass(frozen=True)
class ConsumerScope:
    """Where a durable consumer reads events: the capability its cursor moves with there, and where a move by
    anyone but its owner is recorded. Cursor names are daemon-wide, so the caller's workspace says nothing."""

    capability: str
    workspace_id: str | None  # None: one of the daemon's own consumers, whose events span every workspace
    project_id: str | None = None

    @property
    def is_daemons(self) -> bool:
        return self.workspace_id is None

    @property
    def event_workspace(self) -> str:
        return self.workspace_id or DAEMON_WIDE

    @property
    def owner(self) -> str | None:
        """Whose consumer it is before anyone moved it: the daemon's own are the daemon's, others the first mover's."""
        return DAEMON_ACTOR if self.is_daemons else None


def consumer_scope(name: str, *, default_workspace: str) -> ConsumerScope:
    """Whose events consumer `name` reads, so where acting as it (moving its cursor) needs its capability.

    The console and the sinks are the daemon's own (the daemon moves their cursors itself: `sink.<name>` in the
    default workspace, `sink:<ws>.<name>` in another), so only an admin of no one workspace moves them. Every other
    name belongs to the default workspace, the only one its real callers reach: the bot reads that workspace's
    notices and `bashgym curate` moves its cursor there (neither names a workspace); `curator.<project>` to that
    project of it. A curator of another workspace names it: `curator:<workspace>[.<project>]`."""
    if name == CONSOLE_CONSUMER or name.startswith(("sink.", "sink:")):  # sink cursors: sinks.consumer_name
        return ConsumerScope("authority.manage", None)
    if name.startswith("discord"):
        return ConsumerScope("delegate.discord", default_workspace)
    if name.startswith("curator:"):  # another workspace's curator: curator:WS[.P] (cli/operator.curator_consumer)
        ws, _, project = name.removeprefix("curator:").partition(".")
        return ConsumerScope("ledger.write", ws, project or None)
    if name.startswith("curator."):
        return ConsumerScope("ledger.write", default_workspace, name.removeprefix("curator."))
    return ConsumerScope("ledger.write", default_workspace)


def act_as_consumer(principal: Principal, name: str, default_workspace: str, *, reading: bool = False) -> ConsumerScope:
    """The scope of consumer `name`, once `principal` may act as it there (or, `reading`, read where it stands)."""
    scope = consumer_scope(name, default_workspace=default_workspace)
    require_consumer(
        principal, ConsumerScope("ledger.read", scope.workspace_id, scope.project_id) if reading else scope
    )
    return scope


def require_consumer(principal: Principal, scope: ConsumerScope) -> None:
    """Raise Forbidden unless `principal` holds the consumer's capability where the consumer reads: skipping a
    consumer's events is acting as that consumer, and a grant in another workspace is no right to do that."""
    if scope.is_daemons and (principal.workspace_id or principal.project_id):
        limit = f"project {principal.project_id!r}" if principal.project_id else f"workspace {principal.workspace_id!r}"
        raise Forbidden(
            f"{principal.actor_id} is limited to {limit}; the daemon's own consumers (its console and the sinks, "
            f"which it moves itself) move for {scope.capability} with no workspace limit only.",
            hint="Ask the daemon's operator, whose admin token ($BASHGYM_HOME/admin.token) reaches every workspace.",
            details={"capability": scope.capability, "scope": "workspace '*'"},
        )
    principal.require(scope.capability, workspace_id=scope.workspace_id, project_id=scope.project_id)


def is_identifier(value: str) -> bool:
    return bool(IDENTIFIER_RE.match(value))


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


async def actor_holds(ledger: Ledger, actor_id: str, capability: str, *, workspace_id: str, project_id: str) -> bool:
    """Whether an actor recorded in the ledger (a token's actor or a Discord user) holds `capability` in a
    project right now, through any live token or direct grant. A Discord user's role grants cannot be seen
    without Discord, so only grants to the user themselves count here."""
    if actor_id.startswith("system:"):
        return True
    now = datetime.now(UTC).isoformat()
    if actor_id.startswith("discord:"):
        grants = await ledger.active_grants(workspace_id, actor_id.removeprefix("discord:"), [])
        return _discord_principal(actor_id.removeprefix("discord:"), "", workspace_id, grants).holds(
            capability, project_id
        )
    for row in await ledger.tokens_of_actor(workspace_id, actor_id):
        if row["expires_at"] and row["expires_at"] <= now:
            continue
        principal = _row_principal(row)
        if principal.project_id and principal.project_id != project_id:
            continue
        if principal.holds(capability, project_id):
            return True
    return False
