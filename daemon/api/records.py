"""Evidence records other systems write: artifacts, suites, results, comparisons, decisions, aliases, budget
entries, reports and annotations, one POST each, straight to the ledger's writer."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from bashgym.client.errors import RuleRejected
from bashgym.client.models import (
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BudgetBookkeeping,
    ComparisonSpec,
    DecisionSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    ReportSpec,
    WriteResult,
)
from bashgym.client.specs import Actor
from bashgym.daemon.api.routing import (
    Call,
    WriteCall,
    refuse_daemon_records,
    requires,
    written,
)
from bashgym.ledger.store import Ledger
from fastapi import APIRouter
from starlette.responses import Response

router = APIRouter(prefix="/v1/projects/{project}", tags=["evidence"])


# The ledger's writer of each record, given the ledger: `lambda ledger: ledger.register_artifact`.
Writer = Callable[[Ledger], Callable[[Actor, str, str, Any], Awaitable[WriteResult]]]

# A record of an action needs the capability of the action: results and comparisons another system made are
# imported evidence, recorded as asserted (the gate counts only what the daemon measured); a decision is a
# promotion's; an alias moved without the gate (the promote route asks it) is an override of it; budget bookkeeping
# moves what may still be spent.
ImportCall = Annotated[Call, requires("evidence.import")]
DecideCall = Annotated[Call, requires("promotion.decide")]
AliasCall = Annotated[
    Call,
    requires(
        "promotion.decide",
        also=("promotion.override",),
        statement="`promotion.decide` and `promotion.override` in the project: an alias moved here skips the gate "
        "(`POST .../runs/{run_id}/promote` asks it)",
    ),
]
AmendCall = Annotated[
    Call,
    requires(
        "budget.amend",
        statement="`budget.amend` in the project; reservations, settlements and releases only, none negative",
    ),
]


def add(path: str, spec: type[Any], writer: Writer, call: Any = WriteCall) -> None:
    async def handler(call: Call, project: str, body: Any) -> Response:
        return written(await writer(call.services.ledger)(call.actor, call.workspace, project, body))

    # Real annotation objects (this module's annotations are strings) so FastAPI sees the body model.
    handler.__annotations__ = {"call": call, "project": str, "body": spec, "return": Response}
    handler.__name__ = f"post_{path.replace('-', '_')}"
    router.add_api_route(f"/{path}", handler, methods=["POST"], response_model=WriteResult, status_code=201)


async def _bookkeeping_budget_entry(
    ledger: Ledger, actor: Actor, ws: str, project: str, spec: BudgetBookkeeping
) -> WriteResult:
    """Reservations, settlements and releases from other systems; a release frees no more than is reserved, so
    no entry here lifts a spent budget (limits and amendments: POST .../budget/{kind})."""
    if spec.kind == "release":
        reserved = (await ledger.budget_summary(ws, project, spec.scope))["reserved"]
        if spec.gpu_hours > reserved["gpu_hours"] or spec.runs > reserved["runs"]:
            raise RuleRejected(
                f"A release of {spec.gpu_hours} GPU-hours and {spec.runs} runs frees more than scope {spec.scope!r} "
                f"holds reserved ({reserved['gpu_hours']} GPU-hours, {reserved['runs']} runs).",
                hint=f"Release what a reservation holds; to grant more, amend the budget "
                f"(POST /v1/projects/{project}/budget/amend, bashgym budget amend).",
                details={"reserved": reserved},
            )
    return await ledger.add_budget_entry(actor, ws, project, spec)


async def post_artifacts(call: WriteCall, project: str, body: ArtifactSpec) -> Response:
    """An artifact of a run another system trains; a run this daemon trains registers its own kept files."""
    if body.run_id:
        await refuse_daemon_records(call, project, body.run_id, "artifacts")
    return written(await call.services.ledger.register_artifact(call.actor, call.workspace, project, body))


router.add_api_route("/artifacts", post_artifacts, methods=["POST"], response_model=WriteResult, status_code=201)
add("eval-suites", EvalSuiteSpec, lambda ledger: ledger.register_eval_suite)
add(
    "eval-results",
    EvalResultSpec,
    lambda ledger: functools.partial(ledger.record_eval_result, provenance="asserted"),
    ImportCall,
)
add(
    "comparisons",
    ComparisonSpec,
    lambda ledger: functools.partial(ledger.record_comparison, provenance="asserted"),
    ImportCall,
)
add("decisions", DecisionSpec, lambda ledger: ledger.record_decision, DecideCall)
add("aliases", AliasMove, lambda ledger: ledger.move_alias, AliasCall)
add(
    "budget-entries",
    BudgetBookkeeping,
    lambda ledger: functools.partial(_bookkeeping_budget_entry, ledger),
    AmendCall,
)
add("reports", ReportSpec, lambda ledger: ledger.record_report)
add("annotations", AnnotationSpec, lambda ledger: ledger.add_annotation)
