"""Routes of authority: tokens, Discord grants, whoami and the audit trail."""

from __future__ import annotations

from typing import Annotated

from bashgym.client.errors import InvalidInput
from bashgym.client.models import GrantSpec, TokenIssue, TokenIssued, WhoAmI
from bashgym.client.validation import check_identifier, check_timestamp
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import AUTHENTICATED, Call, check_run_control, requires, written
from bashgym.daemon.authority import check_grantable, hash_token, new_token
from bashgym.daemon.authority.delegation import check_handed_on, token_scope
from bashgym.ledger.tx import new_id
from fastapi import APIRouter, Query
from starlette.responses import Response

AuthCall = Annotated[Call, requires(AUTHENTICATED)]
ManageCall = Annotated[Call, requires("authority.manage")]
_WITHIN = "a token or grant carries only what its issuer holds there (Who issues what)"
IssueCall = Annotated[Call, requires("authority.manage", statement=f"`authority.manage` in the workspace; {_WITHIN}")]
RevokeCall = Annotated[
    Call,
    requires(
        "authority.manage", statement="`authority.manage` in the workspace of what it revokes (any, for the operator)"
    ),
]


router = APIRouter(prefix="/v1", tags=["authority"])


@router.get("/auth/whoami", response_model=WhoAmI)
async def whoami(call: AuthCall) -> Response:
    p = call.principal
    return json_response(
        WhoAmI(
            actor_id=p.actor_id,
            token_id=p.token_id,
            credential_kind=p.credential_kind,
            capabilities=p.all_capabilities(),
            workspace_id=p.workspace_id,
            project_id=p.project_id,
        )
    )


@router.get("/auth/check")
async def check(
    call: AuthCall,
    capability: Annotated[str, Query(min_length=1, max_length=64)],
    project: Annotated[str | None, Query(max_length=128)] = None,
    run: Annotated[str | None, Query(max_length=128)] = None,
) -> Response:
    """Whether the caller may do what `capability` allows in `project` (on `run`, for run control): 200, or
    the very refusal the action itself would meet. Adapters ask before they show a confirmation."""
    if capability in ("training.control", "training.stop") and project and run:
        await check_run_control(call.services.ledger, call.principal, capability, call.workspace, project, run)
    else:
        call.principal.require(capability, workspace_id=call.workspace, project_id=project)
    return json_response({"capability": capability, "project": project, "run": run, "holds": True})


@router.post("/auth/tokens", response_model=TokenIssued, status_code=201)
async def issue_token(call: IssueCall, body: TokenIssue) -> Response:
    """A new token within the issuer's own reach (daemon/authority/delegation.py)."""
    ledger = call.services.ledger
    scope = token_scope(
        call.principal,
        profile=body.profile,
        capabilities=body.capabilities,
        workspace_id=body.workspace_id,
        project_id=body.project_id,
        expires_in_s=body.expires_in_s,
        request_workspace=call.workspace,
        now=ledger.now(),
    )
    token = new_token()
    row = await ledger.insert_token(
        call.actor,
        token_id=new_id("tok"),
        token_hash=hash_token(token),
        actor_id=body.actor_id,
        profile=body.profile,
        capabilities=body.capabilities,
        workspace_id=scope.workspace_id,
        project_id=scope.project_id,
        expires_at=scope.expires_at,
    )
    issued = TokenIssued(token=token, **{k: row[k] for k in TokenIssued.model_fields if k not in {"token", "notice"}})
    return json_response(issued, 201)


@router.get("/auth/tokens")
async def list_tokens(call: ManageCall) -> Response:
    """The tokens of the caller's workspace; every token for the operator (a principal of no workspace)."""
    return json_response(await call.services.ledger.list_tokens(call.principal.workspace_id))


@router.post("/auth/tokens/{token_id}/revoke")
async def revoke_token(call: RevokeCall, token_id: str) -> Response:
    """Revoke a token of the caller's workspace (any token, for the operator)."""
    return written(await call.services.ledger.revoke_token(call.actor, token_id, call.principal.workspace_id))


@router.get("/auth/audit")
async def audit(
    call: ManageCall,
    since: str = "1970-01-01",
    actor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Response:
    """Who changed what: in the caller's workspace, or everywhere (the daemon's own events too) for the operator."""
    check_timestamp(since, field="since")
    if actor is not None:
        check_identifier(actor, field="actor")
    rows = await call.services.ledger.audit_events(
        since=since, actor=actor, limit=limit, workspace_id=call.principal.workspace_id
    )
    return json_response(rows)


@router.post("/authority/grants", status_code=201)
async def grant(call: IssueCall, body: GrantSpec) -> Response:
    if "delegate.discord" in body.capabilities:
        raise InvalidInput("delegate.discord belongs to the bot's token, never to a Discord user or role.")
    check_handed_on(
        call.principal, check_grantable(body.profile, body.capabilities), body.project_id, what="Discord grant"
    )
    record = await call.services.ledger.insert_grant(
        call.actor,
        grant_id=new_id("grant"),
        workspace_id=call.workspace,
        project_id=body.project_id,
        subject_kind=body.subject_kind,
        subject_id=body.subject_id,
        profile=body.profile,
        capabilities=body.capabilities,
    )
    return json_response(record, 201)


@router.get("/authority/grants")
async def list_grants(call: ManageCall) -> Response:
    return json_response(await call.services.ledger.list_grants(call.workspace))


@router.post("/authority/grants/{grant_id}/revoke")
async def revoke_grant(call: RevokeCall, grant_id: str) -> Response:
    return written(await call.services.ledger.revoke_grant(call.actor, grant_id, call.workspace))
