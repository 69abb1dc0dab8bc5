"""Capabilities, profiles and the resolution of a bearer token into a principal."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime

from bashgym.ledger import Ledger
from bashgym.ledger.errors import Forbidden, Unauthenticated
from bashgym.ledger.models import Actor

CAPABILITIES: tuple[str, ...] = (
    "ledger.read",
    "ledger.write",
    "training.launch",
    "training.control",
    "training.stop",
    "eval.run",
    "eval.protected",
    "runcard.write",
    "promotion.decide",
    "promotion.override",
    "artifact.publish_private",
    "artifact.publish_public",
    "budget.amend",
    "campaign.create",
    "campaign.control",
    "campaign.conclude",
    "device.manage",
    "authority.manage",
    "delegate.discord",
)

_VIEWER = frozenset({"ledger.read"})
_RESEARCHER = _VIEWER | {
    "ledger.write",
    "training.launch",
    "training.control",
    "eval.run",
    "runcard.write",
    "campaign.create",
    "campaign.control",
    "artifact.publish_private",
}
_LEAD = _RESEARCHER | {
    "training.stop",
    "promotion.decide",
    "budget.amend",
    "eval.protected",
    "campaign.conclude",
    "device.manage",
}
# promotion.override and artifact.publish_public are granted only explicitly; delegate.discord only to the bot.
_EXPLICIT_ONLY = frozenset({"promotion.override", "artifact.publish_public", "delegate.discord"})
_ADMIN = frozenset(CAPABILITIES) - _EXPLICIT_ONLY

PROFILES: dict[str, frozenset[str]] = {
    "viewer": _VIEWER,
    "researcher": frozenset(_RESEARCHER),
    "lead": frozenset(_LEAD),
    "admin": _ADMIN,
}

TOKEN_PREFIX = "bgy_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling and what they may do, resolved afresh on every request."""

    actor_id: str
    token_id: str
    capabilities: frozenset[str]
    credential_kind: str = "token"
    workspace_id: str | None = None
    project_id: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def actor(self, capability: str, correlation_id: str) -> Actor:
        kind = "discord" if self.credential_kind == "discord" else "token"
        return Actor(actor_id=self.actor_id, credential_kind=kind, capability=capability, correlation_id=correlation_id)

    def require(self, capability: str, *, workspace_id: str | None = None, project_id: str | None = None) -> None:
        """Raise Forbidden naming the capability and scope unless this principal holds it there."""
        scope = f"project {project_id!r}" if project_id else f"workspace {workspace_id or '*'!r}"
        if capability not in self.capabilities:
            raise Forbidden(
                f"{self.actor_id} lacks the capability {capability} for {scope}.",
                hint="Ask an admin to grant it (bashgym auth issue, or a profile that includes it).",
                details={"capability": capability, "scope": scope},
            )
        if self.workspace_id and workspace_id and self.workspace_id != workspace_id:
            raise Forbidden(
                f"{self.actor_id}'s token is limited to workspace {self.workspace_id!r}, not {scope}.",
                details={"capability": capability, "scope": scope},
            )
        if self.project_id and project_id and self.project_id != project_id:
            raise Forbidden(
                f"{self.actor_id}'s token is limited to project {self.project_id!r}, not {scope}.",
                details={"capability": capability, "scope": scope},
            )


async def resolve_bearer(ledger: Ledger, authorization: str | None, now: datetime) -> Principal:
    """Turn an Authorization header into a Principal, or raise Unauthenticated saying why."""
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
        raise Unauthenticated("The bearer token is not known.", hint="Check the token, or issue a new one.")
    if row["revoked_at"]:
        raise Unauthenticated(
            f"Token {row['token_id']} was revoked at {row['revoked_at']}.", hint="Ask an admin for a new token."
        )
    if row["expires_at"] and row["expires_at"] <= now.isoformat():
        raise Unauthenticated(
            f"Token {row['token_id']} expired at {row['expires_at']}.", hint="Ask an admin for a new token."
        )
    return Principal(
        actor_id=row["actor_id"],
        token_id=row["token_id"],
        capabilities=_capabilities(row),
        workspace_id=row["workspace_id"],
        project_id=row["project_id"],
    )


def _capabilities(row: dict[str, object]) -> frozenset[str]:
    explicit = frozenset(json.loads(str(row["capabilities_json"])))
    return PROFILES.get(str(row["profile"]), frozenset()) | explicit
