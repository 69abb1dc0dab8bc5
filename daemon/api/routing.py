"""How a route declares its capability: the `requires` dependency, and the Call it hands the handler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from bashgym.client.errors import Conflict, Unauthenticated
from bashgym.client.specs import Actor, WriteResult
from bashgym.client.validation import check_identifier
from bashgym.daemon.api import replays
from bashgym.daemon.api.responses import MUTATING, json_response
from bashgym.daemon.authority import Principal, act_in_workspace, resolve_request, resolve_token
from bashgym.daemon.launch.confine import Reach
from bashgym.daemon.services import Services
from bashgym.ledger.store import Ledger
from fastapi import Depends, Query, Request
from starlette.responses import Response


@dataclass(frozen=True)
class Call:
    """One authorised request: who, in which workspace, under which capability and correlation id."""

    services: Services
    principal: Principal
    workspace: str
    actor: Actor

    @property
    def reach(self) -> Reach:
        """What this request may reach on the daemon's host (launch.confine)."""
        return Reach(self.services.settings, self.services.ledger, self.services.blobs, self.workspace)


AUTHENTICATED = "authenticated"  # the declared "capability" of routes any valid principal may call


async def authenticate(request: Request, workspace: str | None) -> tuple[Services, str, Principal]:
    """Who calls, in which workspace; changes are rate-limited per principal here.

    A request that names no workspace acts in its token's own one (the daemon's default for a token of none)."""
    services: Services = request.app.state.services
    named = check_identifier(workspace, field="workspace") if workspace else None
    guilds = frozenset(services.settings.discord_guild_ids)
    try:
        token = await resolve_token(services.ledger, request.headers.get("authorization"), services.ledger.now())
        ws = named or token.workspace_id or services.settings.default_workspace
        principal = await act_in_workspace(services.ledger, request.headers, token, ws, allowed_guilds=guilds)
    except Unauthenticated:
        # Guessing tokens is throttled per client address; a good token from the same address is never held up.
        services.bad_token_limiter.check(request.client.host if request.client else "unknown")
        raise
    limiter = services.limiter if request.method in MUTATING else services.read_limiter
    limiter.check(principal.actor_id)
    return services, ws, principal


async def resolve(services: Services, headers: Mapping[str, str], ws: str) -> Principal:
    """The principal that `headers` (a bearer token, and for the bot a Discord user) stand for in workspace `ws`,
    resolved afresh: a revoked or expired token or a revoked grant counts from this call on."""
    return await resolve_request(
        services.ledger,
        headers,
        now=services.ledger.now(),
        workspace_id=ws,
        allowed_guilds=frozenset(services.settings.discord_guild_ids),
    )


def call_of(request: Request, services: Services, ws: str, principal: Principal, capability: str) -> Call:
    """The authorised request; called once the route's authorisation passed, so a request whose Idempotency-Key
    holds a stored answer gets that answer here, before its handler runs (replays.py)."""
    replays.hand_out()
    correlation = request.scope.get("state", {}).get("correlation_id", "")
    return Call(services, principal, ws, principal.actor(capability, correlation))


@dataclass(frozen=True)
class Rule:
    """What a route asks of its caller, as its dependency declares it: the capability a refusal names first, any
    other it needs too, and the rule in words (docs/security.md's route table is made
    from these, daemon/api/route_table.py)."""

    capability: str
    also: tuple[str, ...] = ()
    statement: str = ""


def declare(dependency: Any, rule: Rule) -> Any:
    """Mark `dependency` with its rule, for the tests and the route table, and wrap it for FastAPI."""
    dependency.rule = rule
    dependency.capability = rule.capability  # what a 403 names: the tests read it
    return Depends(dependency)


def requires(capability: str, *, also: tuple[str, ...] = (), statement: str = "") -> Any:
    """Dependency that authenticates, rate-limits changes and checks `capability` (and each of `also`) in the
    route's project, or in the workspace for a route of none, before the handler runs."""

    async def authorise(request: Request, workspace: Annotated[str | None, Query()] = None) -> Call:
        services, ws, principal = await authenticate(request, workspace)
        if capability != AUTHENTICATED:
            for needed in (capability, *also):
                principal.require(needed, workspace_id=ws, project_id=request.path_params.get("project"))
        return call_of(request, services, ws, principal, capability)

    return declare(authorise, Rule(capability, also, statement))


def decided_in_handler(capability: str, statement: str) -> Any:
    """For routes whose capability depends on what they name (a consumer: whose cursor it is): the dependency only
    authenticates, and the handler judges; `capability` is what it asks of the generic case."""

    async def authenticated(request: Request, workspace: Annotated[str | None, Query()] = None) -> Call:
        services, ws, principal = await authenticate(request, workspace)
        return call_of(request, services, ws, principal, AUTHENTICATED)

    return declare(authenticated, Rule(capability, statement=statement))


def requires_somewhere(capability: str, *, also: tuple[str, ...] = (), statement: str = "") -> Any:
    """For routes whose project is named in the body (a run's tracking context, an upload's `?project=`): the
    caller must hold `capability` (and each of `also`) in some project here; the handler then judges them against
    the project the request names, with `authorise(call, project)` or `principal.require`."""

    async def authorise_later(request: Request, workspace: Annotated[str | None, Query()] = None) -> Call:
        services, ws, principal = await authenticate(request, workspace)
        for needed in (capability, *also):
            if not principal.holds_anywhere(needed):
                principal.require(needed, workspace_id=ws)  # raises, naming the capability and the scope
        return call_of(request, services, ws, principal, capability)

    named = f"`{capability}` in the project the request names"
    rule = Rule(capability, also=also, statement=f"{named}; {statement}" if statement else named)
    return declare(authorise_later, rule)


def authorise(call: Call, project: str) -> None:
    """Judge the route's capability against the project the request names (see requires_somewhere)."""
    call.principal.require(call.actor.capability, workspace_id=call.workspace, project_id=project)


async def check_run_control(
    ledger: Ledger, principal: Principal, capability: str, ws: str, project: str, run_id: str
) -> None:
    """Raise Forbidden unless `principal` may use `capability` (training.control or training.stop) on the run."""
    if capability == "training.control":
        principal.require("training.control", workspace_id=ws, project_id=project)
    if not principal.holds("training.stop", project):
        run = await ledger.get_run(ws, project, run_id)
        is_own = run["launched_by"] == principal.actor_id
        if not (is_own and principal.holds("training.control", project)):
            principal.require("training.stop", workspace_id=ws, project_id=project)


RUN_CONTROL = {
    "training.control": "`training.control` on the caller's own run, or on any run with `training.stop` too",
    "training.stop": "`training.stop` in the project, or `training.control` on the caller's own run",
}


def requires_run_control(capability: str) -> Any:
    """Run control: `training.stop` acts on any run; `training.control` on the caller's own runs, or on any
    run for a principal who also holds `training.stop` ("own" = launched by the caller)."""

    async def authorise(request: Request, workspace: Annotated[str | None, Query()] = None) -> Call:
        services, ws, principal = await authenticate(request, workspace)
        project, run_id = request.path_params["project"], request.path_params["run_id"]
        await check_run_control(services.ledger, principal, capability, ws, project, run_id)
        return call_of(request, services, ws, principal, capability)

    return declare(authorise, Rule(capability, statement=RUN_CONTROL[capability]))


ReadCall = Annotated[Call, requires("ledger.read")]
# Acting as a durable consumer (moving its cursor, holding its lease): judged in the handler where it reads.
ConsumerCall = Annotated[
    Call,
    decided_in_handler(
        "ledger.write",
        "the consumer's own capability where it reads (Security model): `ledger.write`, the bot's "
        "`delegate.discord`, the operator's `authority.manage` for the daemon's own",
    ),
]
WriteCall = Annotated[Call, requires("ledger.write")]
# Routes whose project is named in the request (an upload's ?project=, a run's context, a new project's id).
NamedProjectWrite = Annotated[Call, requires_somewhere("ledger.write")]
NamedProjectsRead = Annotated[Call, requires_somewhere("ledger.read")]


def written(result: WriteResult) -> Response:
    return json_response(result, 200 if result.replayed else 201)


def check_optional(value: str | None, check: Callable[[str], object]) -> None:
    """A filter left out matches everything; one given must be well formed, or it would silently match nothing."""
    if value is not None:
        check(value)


async def refuse_daemon_records(call: Call, project: str, run_id: str, what: str) -> None:
    """A run this daemon launched or follows is the daemon's to record (its state, metrics and artifacts): written
    here, they would be a caller's words in the daemon's voice (a loss curve of 200 steps for a 2-step run, which
    the gate reads as steps trained). 404 first, the same answer as for a run that does not exist."""
    assert call.services.training is not None, "the daemon always runs a training service"
    await call.services.ledger.run_row(call.workspace, project, run_id)  # not get_run: every metric batch asks
    if await call.services.training.drives(call.workspace, run_id):
        raise Conflict(
            f"Run {run_id} is trained by this daemon, which records its {what}; nothing was changed.",
            hint=f"Use bashgym training pause, resume or stop --project {project} {run_id} for its state; its "
            "metrics and artifacts are what its trainer reported.",
            details={"run_id": run_id},
        )
