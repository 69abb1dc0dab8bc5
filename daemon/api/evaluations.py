"""Evidence routes: running evaluations, comparing results, RunCards, the promotion gate and decision."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from bashgym.client.errors import RuleRejected
from bashgym.client.specs import AliasMove, DecisionSpec
from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ReadCall, requires, written
from bashgym.daemon.evidence.evaluations import CompareBody, EvalRunBody
from bashgym.daemon.evidence.gathering import alias_holder, record_gate, register_run_model, run_model_version_id
from bashgym.daemon.evidence.gathering import gather_evidence as gather
from bashgym.daemon.evidence.promotion import (
    Evidence,
    build_runcard,
    default_claim_tier,
    gate,
    overclaim,
    validate_runcard,
)
from bashgym.daemon.launch.confine import data_reference
from bashgym.daemon.ui.evaluation import comparison_view, result_view
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

EvalCall = Annotated[Call, requires("eval.run")]
CardCall = Annotated[Call, requires("runcard.write")]
DecideCall = Annotated[
    Call,
    requires(
        "promotion.decide", statement="`promotion.decide` in the project; `promotion.override` too when the gate blocks"
    ),
]
WITHHELD = {"withheld": "This suite is protected: per-task rows open only with eval.protected."}


class RunCardBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Left out: local_smoke below the method's minimum steps or on partial suites only, else narrow.
    claim_tier: Literal["local_smoke", "narrow", "broad"] | None = None
    decision: Literal["pending", "hold", "promote", "reject"] = "pending"
    known_limitations: list[Annotated[str, Field(max_length=2000)]] = Field(default_factory=list, max_length=50)


class DecideBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alias: str = "champion"
    model_version_id: str | None = None
    override_reason: Annotated[str, Field(min_length=1, max_length=2000)] | None = None


async def _record_gate(
    call: Call, project: str, evidence: Evidence, verdict: dict[str, Any], asked_by: str
) -> dict[str, Any]:
    return await record_gate(call.services.ledger, call.actor, call.workspace, project, evidence, verdict, asked_by)


async def gather_evidence(call: Call, project: str, run_id: str) -> Evidence:
    return await gather(call.services.ledger, call.workspace, project, run_id)


async def withhold_protected(call: Call, project: str, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-task details of protected suites stay closed to principals without eval.protected."""
    if not results or call.principal.holds("eval.protected", project):
        return results
    protected = await call.services.ledger.protected_suites(call.workspace, project)
    return [{**r, "details": WITHHELD} if r["suite_id"] in protected else r for r in results]


router = APIRouter(prefix="/v1", tags=["evidence"])


@router.post("/projects/{project}/evaluations", status_code=202)
async def evaluation_start(call: EvalCall, project: str, body: EvalRunBody) -> Response:
    for field in ("dataset_path", "corpus_path"):
        value = getattr(body, field)
        if value is not None:
            place = await data_reference(call.reach, value, field=field, project=project)
            body = body.model_copy(update={field: place})
    started = await call.services.evaluator.start(call.actor, call.workspace, project, body)
    return json_response(started, 202)


@router.get("/projects/{project}/evaluation-jobs")
async def evaluation_jobs(call: ReadCall, project: str) -> Response:
    """The evaluations this daemon ran or runs since it started (the campaign runner's included), oldest first."""
    return json_response({"jobs": call.services.evaluator.jobs_of(call.workspace, project)})


@router.get("/projects/{project}/evaluations/{evaluation_id}")
async def evaluation_status(call: ReadCall, project: str, evaluation_id: str) -> Response:
    return json_response(call.services.evaluator.status(call.workspace, project, evaluation_id))


@router.get("/projects/{project}/eval-results/{result_id}")
async def evaluation_result(call: ReadCall, project: str, result_id: str) -> Response:
    """One result task by task, as the web view shows it: families, tasks with their samples (measured results:
    command, exit code, verifier verdict, redacted and cut transcripts), canaries, safety and its comparisons."""
    check_identifier(result_id, field="result")
    view = await result_view(
        call.services.ledger, call.services.blobs, call.workspace, project, result_id,
        may_see_protected=call.principal.holds("eval.protected", project),
    )  # fmt: skip
    return json_response(view)


@router.get("/projects/{project}/comparisons/{comparison_id}")
async def comparison_flips(call: ReadCall, project: str, comparison_id: str) -> Response:
    """A comparison with its CI, per family both sides' pass@1, and the tasks whose verdict changed."""
    check_identifier(comparison_id, field="comparison")
    view = await comparison_view(
        call.services.ledger, call.workspace, project, comparison_id,
        may_see_protected=call.principal.holds("eval.protected", project),
    )  # fmt: skip
    return json_response(view)


@router.post("/projects/{project}/evaluations/compare", status_code=201)
async def evaluation_compare(call: EvalCall, project: str, body: CompareBody) -> Response:
    return json_response(await call.services.evaluator.compare(call.actor, call.workspace, project, body), 201)


@router.post("/projects/{project}/runs/{run_id}/runcards", status_code=201)
async def runcard_create(call: CardCall, project: str, run_id: str, body: RunCardBody) -> Response:
    evidence = await gather_evidence(call, project, run_id)
    if body.claim_tier and (refused := overclaim(evidence, body.claim_tier)) is not None:
        raise RuleRejected(f"Run {run_id}: {refused.message}", hint=refused.next_action)
    card = build_runcard(
        evidence,
        claim_tier=body.claim_tier or default_claim_tier(evidence),
        decision=body.decision,
        limitations=body.known_limitations,
        creator=call.principal.actor_id,
    )
    return written(await call.services.ledger.record_runcard(call.actor, call.workspace, project, card))


@router.get("/projects/{project}/runs/{run_id}/runcards")
async def runcard_list(call: ReadCall, project: str, run_id: str) -> Response:
    ledger = call.services.ledger
    # The cards are immutable; `since` is what happened to the run after them (gate, decisions, aliases). It is
    # read first: an unknown project or run is a 404 here, not an empty list.
    since = await ledger.runcard_followups(call.workspace, project, run_id)
    cards = await ledger.runcards_of_run(call.workspace, project, run_id)
    return json_response({"runcards": cards, "since": since})


@router.get("/projects/{project}/runs/{run_id}/runcards/validate")
async def runcard_validate(call: ReadCall, project: str, run_id: str, promotion: bool = False) -> Response:
    findings = validate_runcard(await gather_evidence(call, project, run_id), promotion=promotion)
    return json_response(
        {"run_id": run_id, "ok": not any(f["severity"] == "fail" for f in findings), "findings": findings}
    )


@router.get("/projects/{project}/runs/{run_id}/gate")
async def promotion_gate(call: ReadCall, project: str, run_id: str, asked_by: str = "gate") -> Response:
    """The gate's verdict, recorded as `gate.evaluated` (once per state of the evidence) so channels see it."""
    evidence = await gather_evidence(call, project, run_id)
    verdict = gate(evidence)
    recorded = await _record_gate(call, project, evidence, verdict, asked_by)
    return json_response({**verdict, "recorded": recorded})


@router.post("/projects/{project}/runs/{run_id}/promote", status_code=201)
async def promotion_decide(call: DecideCall, project: str, run_id: str, body: DecideBody) -> Response:
    evidence = await gather_evidence(call, project, run_id)
    # The alias's current holder is a baseline the run must beat too (unless the run's own model holds it already).
    holder = await alias_holder(call.services.ledger, call.workspace, project, body.alias)
    if holder is not None and holder["model_version_id"] != (body.model_version_id or run_model_version_id(run_id)):
        evidence.alias_holder = holder
    verdict = gate(evidence)
    await _record_gate(call, project, evidence, verdict, "decide")
    if not verdict["ship"] and body.override_reason is None:
        raise RuleRejected(
            f"The promotion gate blocks run {run_id}: {', '.join(b['code'] for b in verdict['blockers'])}.",
            hint=f"bashgym promote gate --project {project} --run {run_id} lists each blocker with its next action; "
            "an override needs "
            "promotion.override and --override-reason.",
            details=verdict,
        )
    if not verdict["ship"]:
        call.principal.require("promotion.override", workspace_id=call.workspace, project_id=project)
    ledger = call.services.ledger
    version = body.model_version_id or await _register_run_model(call, project, evidence)
    outcome = "promote" if verdict["ship"] else "override"
    rationale = (
        f"gate shipped run {run_id}"
        if verdict["ship"]
        else f"override of blockers {[b['code'] for b in verdict['blockers']]}: {body.override_reason}"
    )
    refs = [*(r["result_id"] for r in evidence.results), *(c["comparison_id"] for c in evidence.comparisons)]
    refs += [card["card_id"] for card in evidence.runcards[:1]]
    decision = await ledger.record_decision(
        call.actor,
        call.workspace,
        project,
        DecisionSpec(
            decision_type="promotion",
            outcome=outcome,
            rationale=rationale,
            run_id=run_id,
            evidence_refs=refs[:200],
        ),
    )
    moved = await ledger.move_alias(
        call.actor,
        call.workspace,
        project,
        AliasMove(alias=body.alias, model_version_id=version, decision_id=decision.record["decision_id"]),
    )
    return json_response({"gate": verdict, "decision": decision.record, "alias": moved.record}, 201)


async def _register_run_model(call: Call, project: str, evidence: Evidence) -> str:
    """The run's kept model as a model version, with its lineage and file digests."""
    return await register_run_model(call.services.ledger, call.actor, call.workspace, project, evidence)
