"""What a principal may hand on: a token or a Discord grant carries only what its issuer holds, where it holds it.

A workspace's admin is a tenant like any other, so what it issues stays inside its own reach: its workspace, the
capabilities it holds there (in the project named, for a project's token), and no later expiry than its own. Only a
principal of no one workspace (the operator's admin token) issues tokens of no workspace, and it alone hands on the
capabilities granted only by name (`EXPLICIT_ONLY`): the bot's `delegate.discord`, overrides, public publishing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bashgym.client.errors import Forbidden
from bashgym.daemon.authority.principals import EXPLICIT_ONLY, Principal, check_grantable
from bashgym.ledger.tx import utc_iso


@dataclass(frozen=True)
class TokenScope:
    """Where a new token acts, what it holds there, and until when."""

    workspace_id: str | None
    project_id: str | None
    capabilities: frozenset[str]
    expires_at: str | None


def token_scope(
    issuer: Principal,
    *,
    profile: str,
    capabilities: list[str],
    workspace_id: str | None,
    project_id: str | None,
    expires_in_s: int | None,
    request_workspace: str,
    now: datetime,
) -> TokenScope:
    """The scope of the token `issuer` asks for, once it is within the issuer's own; Forbidden naming what is not.

    A project's token names a project of one workspace: the one asked for, else the issuer's, else the request's.
    Any other token without a workspace is of every workspace, which only an issuer of no workspace may make."""
    granted = check_grantable(profile, capabilities)
    workspace = workspace_id or issuer.workspace_id or (request_workspace if project_id else None)
    if issuer.workspace_id and workspace != issuer.workspace_id:
        where = f"workspace {workspace!r}" if workspace else "every workspace"
        raise Forbidden(
            f"{issuer.actor_id} is limited to workspace {issuer.workspace_id!r}; a token for {where} is beyond it.",
            hint=f"Leave the workspace out (the token is then of {issuer.workspace_id!r}), or ask the operator.",
            details={"capability": "authority.manage", "scope": where},
        )
    check_handed_on(issuer, granted, project_id, what="token")
    return TokenScope(workspace, project_id, granted, _expiry(issuer, expires_in_s, now))


def check_handed_on(issuer: Principal, capabilities: frozenset[str], project_id: str | None, *, what: str) -> None:
    """Forbidden unless `issuer` may hand each capability on where the token or grant will hold it."""
    if issuer.project_id and issuer.project_id != project_id:
        raise Forbidden(
            f"{issuer.actor_id} is limited to project {issuer.project_id!r}; a {what} beyond it is not its to give.",
            details={"capability": "authority.manage", "scope": f"project {issuer.project_id!r}"},
        )
    beyond = sorted(c for c in capabilities if not _may_hand_on(issuer, c, project_id))
    if beyond:
        where = f"project {project_id!r}" if project_id else f"workspace {issuer.workspace_id or '*'!r}"
        raise Forbidden(
            f"{issuer.actor_id} cannot give {', '.join(beyond)} in {where}: a {what} carries only what its issuer "
            f"holds there.",
            hint="Ask for less, or ask someone who holds it there (the operator holds every capability).",
            details={"capability": beyond[0], "scope": where},
        )


def _may_hand_on(issuer: Principal, capability: str, project_id: str | None) -> bool:
    if capability in EXPLICIT_ONLY:
        return is_operator(issuer)
    return issuer.holds(capability, project_id)


def is_operator(principal: Principal) -> bool:
    """A token's principal of no one workspace or project that manages authority: the operator's admin."""
    return (
        principal.credential_kind == "token"
        and principal.workspace_id is None
        and principal.project_id is None
        and "authority.manage" in principal.capabilities
    )


def _expiry(issuer: Principal, expires_in_s: int | None, now: datetime) -> str | None:
    """The new token's expiry: as asked, never later than the issuer's own (which it gets when none is asked)."""
    asked = utc_iso(now + timedelta(seconds=expires_in_s)) if expires_in_s else None
    if issuer.expires_at is None:
        return asked
    if asked is None:
        return issuer.expires_at
    if asked > issuer.expires_at:
        raise Forbidden(
            f"A token of {issuer.actor_id} may not outlive it: asked until {asked}, its own ends at "
            f"{issuer.expires_at}.",
            hint="Ask for a shorter lifetime (--expires-in), or leave it out to end with the issuer's.",
            details={"capability": "authority.manage", "scope": "expiry"},
        )
    return asked
