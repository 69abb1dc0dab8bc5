"""Evidence records other systems write: artifacts, suites, results, comparisons, decisions, aliases, budget
entries, reports and annotations, one POST each, straight to the ledger's writer."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from bashgym.client.errors import Forbidden
from bashgym.client.models import (
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BudgetEntrySpec,
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
    written,
)
from bashgym.ledger.store import Ledger
from fastapi import APIRouter
from starlette.responses import Response

router = APIRouter(prefix="/v1/projects/{project}", tags=["evidence"])


# The ledger's writer of each record, given the ledger: `lambda ledger: ledger.register_artifact`.
Writer = Callable[[Ledger], Callable[[Actor, str, str, Any], Awaitable[WriteResult]]]


def add(path: str, spec: type[Any], writer: Writer) -> None:
    async def handler(call: Call, project: str, body: Any) -> Response:
        return written(await writer(call.services.ledger)(call.actor, call.workspace, project, body))

    # Real annotation objects (this module's annotations are strings) so FastAPI sees the body model.
    handler.__annotations__ = {"call": WriteCall, "project": str, "body": spec, "return": Response}
    handler.__name__ = f"post_{path.replace('-', '_')}"
    router.add_api_route(f"/{path}", handler, methods=["POST"], response_model=WriteResult, status_code=201)


async def _bookkeeping_budget_entry(
    ledger: Ledger, actor: Actor, ws: str, project: str, spec: BudgetEntrySpec
) -> WriteResult:
    """Reservations and settlements from other systems; limits and amendments need budget.amend."""
    if spec.kind in {"limit", "amend"}:
        raise Forbidden(
            f"A budget {spec.kind} changes what may be spent; it needs budget.amend.",
            hint=f"Use bashgym budget set or amend (POST /v1/projects/{project}/budget/{spec.kind}).",
            details={"capability": "budget.amend"},
        )
    return await ledger.add_budget_entry(actor, ws, project, spec)


add("artifacts", ArtifactSpec, lambda ledger: ledger.register_artifact)
add("eval-suites", EvalSuiteSpec, lambda ledger: ledger.register_eval_suite)
add("eval-results", EvalResultSpec, lambda ledger: ledger.record_eval_result)
add("comparisons", ComparisonSpec, lambda ledger: ledger.record_comparison)
add("decisions", DecisionSpec, lambda ledger: ledger.record_decision)
add("aliases", AliasMove, lambda ledger: ledger.move_alias)
add("budget-entries", BudgetEntrySpec, lambda ledger: functools.partial(_bookkeeping_budget_entry, ledger))
add("reports", ReportSpec, lambda ledger: ledger.record_report)
add("annotations", AnnotationSpec, lambda ledger: ledger.add_annotation)
