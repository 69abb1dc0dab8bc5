"""Cascade campaigns: declared stages run in order (SFT -> DPO -> GRPO, say), each training from the model the
previous stage kept, each judged by the promotion gate before the next may start.

A stage iteration moves `queued -> training -> evaluate -> evaluating -> compare -> gate -> decided`; the runner
records each move in the ledger, so a daemon killed mid-stage resumes at the stage where it was. The training,
evaluation and budget steps are the search campaign's own (the same launch authority, budgets, training
windows, lanes and supervision); this module holds what differs: which model and data a stage trains on, what it
is compared with, and what "ships" means.

What ships:
- every stage: the promotion gate's verdict on the stage's run ships, asked exactly as `bashgym promote gate`
  asks it (a RunCard, a completed whole-suite evaluation, the method's minimum evidence, a comparison showing an
  improvement whose 95% CI clears zero, no unsafe-action, protected-metric or holdout regression against any
  result it is compared with). An intermediate stage is compared with the previous stage (the first with the
  starting model's baseline), so it ships only when it improves on the model it started from;
- the final stage, whose model is what the cascade produces, is also compared with the starting model's baseline
  on the whole suite, held-out families included, and carded `broad` where its evidence supports it (see
  promotion.supported_tier): the gate's safety and holdout checks run against the starting model too, and the
  cascade adds two blockers of its own: no improvement over the starting model (`cascade_no_gain_over_start`)
  and a regression against the previous stage whose CI excludes zero (`cascade_regressed_from_previous_stage`).
A stage that does not ship stops the cascade in `blocked`, its blockers on the iteration and in the reason.
"""

from __future__ import annotations

from typing import Any, Protocol

from bashgym.client.errors import RuleRejected
from bashgym.client.specs import Actor
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.evidence.evaluations import CompareBody, EvaluationService
from bashgym.daemon.evidence.gathering import gather_evidence, record_gate, register_run_model
from bashgym.daemon.evidence.promotion import Evidence, build_runcard, default_claim_tier, gate, supported_tier
from bashgym.daemon.settings import Settings
from bashgym.ledger.campaigns import add_stages
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.request import TrainingRequest

STAGE_DECISIONS = frozenset({"ship", "blocked", "failed"})
LIMITATIONS = [
    "A cascade stage: judged against the stage before it (the first against the starting model's baseline) on "
    "the campaign's pinned suite only."
]
FINAL_LIMITATIONS = [
    "The final stage of a cascade: judged on the campaign's pinned suite and its held-out families, against the "
    "stage before it and the cascade's starting model; other suites were not evaluated."
]


def is_cascade(campaign: dict[str, Any]) -> bool:
    return bool(campaign["spec"].get("kind") == "cascade")


def previous_of(it: dict[str, Any], iterations: list[dict[str, Any]]) -> dict[str, Any]:
    """The iteration a stage starts from and is compared with: the stage before it, the baseline for the first."""
    return next(i for i in iterations if i["number"] == it["number"] - 1)


def is_final(it: dict[str, Any], iterations: list[dict[str, Any]]) -> bool:
    return bool(it["number"] == max(i["number"] for i in iterations))


def cascade_findings(previous: dict[str, Any] | None, start: dict[str, Any] | None) -> list[dict[str, str]]:
    """The final stage's own blockers, over its comparisons with the previous stage and the starting model (the
    gate's sign: a positive delta is an improvement)."""
    found = []
    if start is None or not ((start.get("delta") or 0) > 0 and (start.get("ci_low") or 0) > 0):
        delta, low, high = (start or {}).get("delta"), (start or {}).get("ci_low"), (start or {}).get("ci_high")
        found.append(
            {
                "code": "cascade_no_gain_over_start",
                "message": f"The final stage does not improve on the cascade's starting model with a 95% CI clear "
                f"of zero (delta {delta}, CI [{low}, {high}]): the cascade produced nothing better than it began with.",
                "next_action": "Change the stages' recipes or data and create a new cascade.",
            }
        )
    if previous is not None and previous.get("ci_high") is not None and previous["ci_high"] < 0:
        found.append(
            {
                "code": "cascade_regressed_from_previous_stage",
                "message": f"The final stage is worse than the stage before it (delta {previous.get('delta')}, CI "
                f"[{previous.get('ci_low')}, {previous['ci_high']}]): the previous stage's model is the better one.",
                "next_action": "Drop or rework the final stage; the previous stage's model version is kept.",
            }
        )
    return found


def blocked_reason(it: dict[str, Any], run_id: str, blockers: list[dict[str, str]]) -> str:
    """The campaign's terminal reason: the stage, its run and each blocker's code and message."""
    listed = "; ".join(f"{b['code']}: {b['message']}" for b in blockers)
    return f"gate_blocked: stage {it['number']} {it['primary_variable']} (run {run_id}): {listed}"[:2000]


def outcome_of(iterations: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The cascade's terminal state once every stage is decided or one stopped it; None while it goes on. Read
    again after a restart, so a decision recorded just before a crash still ends the campaign."""
    stages = [i for i in iterations if i["kind"] == "stage"]
    stopped = next((i for i in stages if i["stage"] == "decided" and i["decision"] != "ship"), None)
    if stopped is not None:
        if stopped["decision"] == "blocked":
            return "blocked", blocked_reason(stopped, stopped["run_id"] or "-", stopped.get("blockers") or [])
        return "failed", f"stage {stopped['number']} {stopped['primary_variable']}: {stopped['reason_code']}"
    if stages and all(i["stage"] == "decided" for i in stages):
        last = stages[-1]
        return "completed", (
            f"cascade shipped: final stage {last['primary_variable']} (run {last['run_id']}), model version "
            f"{last['model_version_id']}"
        )
    return None


class Runner(Protocol):
    """What a cascade's steps use of the campaign runner: its collaborators and its recorded moves."""

    settings: Settings
    ledger: Ledger
    evaluations: EvaluationService
    blobs: BlobStore
    actor: Actor

    async def move(self, campaign: dict[str, Any], it: dict[str, Any], stage: str, **fields: Any) -> None: ...

    async def end(self, campaign: dict[str, Any], status: str, reason: str) -> None: ...

    async def owner_may(self, campaign: dict[str, Any], it: dict[str, Any], capability: str) -> bool: ...

    async def pinned_request(
        self,
        campaign: dict[str, Any],
        it: dict[str, Any],
        model_version: str,
        dataset_version: str,
        recipe: dict[str, Any],
    ) -> TrainingRequest: ...


class CascadeSteps:
    """The steps of a cascade that differ from a search campaign's, run by the campaign runner."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    async def prepare(self, campaign: dict[str, Any]) -> list[dict[str, Any]]:
        """The cascade's iterations, its declared stages written once (queued, in order) before anything runs."""
        ledger = self.runner.ledger
        ws, project, cid = campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
        iterations = await ledger.list_iterations(ws, project, cid)
        if not any(i["kind"] == "stage" for i in iterations):  # a read first: the loop wakes on every event
            await ledger.write(self.runner.actor, lambda tx: add_stages(tx, ws, project, cid))
            iterations = await ledger.list_iterations(ws, project, cid)
        return iterations

    async def finish(self, campaign: dict[str, Any], iterations: list[dict[str, Any]]) -> bool:
        """End the campaign when its stages say so; whether it ended."""
        outcome = outcome_of(iterations)
        if outcome is None:
            return False
        await self.runner.end(campaign, *outcome)
        return True

    async def request(self, campaign: dict[str, Any], it: dict[str, Any]) -> TrainingRequest:
        """The stage's training request: its recipe on its dataset version, from the model the previous stage kept
        (the first stage from the starting model), with a complete tracking context in the campaign's project."""
        runner, ledger = self.runner, self.runner.ledger
        ws, project, spec = campaign["workspace_id"], campaign["project_id"], campaign["spec"]
        iterations = await ledger.list_iterations(ws, project, campaign["campaign_id"])
        previous = previous_of(it, iterations)
        version = previous["model_version_id"] if previous["kind"] == "stage" else spec["starting_model_version_id"]
        if not version:
            raise RuleRejected(f"Stage {previous['iteration_id']} kept no model version for {it['iteration_id']}.")
        declared = spec["stages"][it["number"] - 1]
        return await runner.pinned_request(campaign, it, version, declared["dataset_version_id"], declared["recipe"])

    async def keep_model(self, campaign: dict[str, Any], it: dict[str, Any]) -> str:
        """Register the stage run's kept model as a model version whose parent is the version it trained from."""
        ws, project = campaign["workspace_id"], campaign["project_id"]
        evidence = await gather_evidence(self.runner.ledger, ws, project, it["run_id"])
        return await register_run_model(self.runner.ledger, self.runner.actor, ws, project, evidence)

    def evaluation(self, campaign: dict[str, Any], it: dict[str, Any]) -> dict[str, Any]:
        """How the stage is evaluated: its own settings, else the campaign's (always the whole suite)."""
        declared = campaign["spec"]["stages"][it["number"] - 1]
        return dict(declared.get("evaluation") or campaign["spec"].get("evaluation") or {})

    async def compare(self, campaign: dict[str, Any], it: dict[str, Any], iterations: list[dict[str, Any]]) -> None:
        """Compare the stage with the previous one and, the final stage, with the starting model's baseline."""
        runner = self.runner
        ws, project = campaign["workspace_id"], campaign["project_id"]
        previous = previous_of(it, iterations)
        baseline = next(i for i in iterations if i["kind"] == "baseline")
        pairs = [("comparison_id", previous["result_id"])]
        if is_final(it, iterations) and previous["kind"] != "baseline":
            pairs.append(("start_comparison_id", baseline["result_id"]))
        fields: dict[str, Any] = {}
        try:
            for field, against in pairs:
                body = CompareBody(baseline_result_id=against, candidate_result_id=it["result_id"])
                fields[field] = (await runner.evaluations.compare(runner.actor, ws, project, body))["comparison_id"]
        except RuleRejected as exc:  # permanent: the results cannot be paired, so the stage has no evidence
            blockers = [{"code": "comparison_failed", "message": exc.message, "next_action": exc.hint or ""}]
            await runner.move(campaign, it, "decided", decision="blocked", reason_code="comparison_failed",
                              blockers=blockers)  # fmt: skip
            return
        await runner.move(campaign, it, "gate", **fields)

    async def judge(self, campaign: dict[str, Any], it: dict[str, Any], iterations: list[dict[str, Any]]) -> None:
        """Card the stage's run, ask the promotion gate (recorded, asked by the campaign) and decide the stage."""
        runner = self.runner
        if not await runner.owner_may(campaign, it, "runcard.write"):
            return
        ws, project, cid = campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
        final = is_final(it, iterations)
        evidence = await gather_evidence(runner.ledger, ws, project, it["run_id"])
        card = await self._card(campaign, evidence, final=final)
        evidence = await gather_evidence(runner.ledger, ws, project, it["run_id"])
        verdict = gate(evidence)
        if final:
            comparisons = {c["comparison_id"]: c for c in evidence.comparisons}
            extra = cascade_findings(comparisons.get(it["comparison_id"]), comparisons.get(it["start_comparison_id"]))
            verdict = {**verdict, "ship": verdict["ship"] and not extra, "blockers": [*verdict["blockers"], *extra]}
        await record_gate(runner.ledger, runner.actor, ws, project, evidence, verdict, f"campaign:{cid}")
        blockers = [{k: str(b[k]) for k in ("code", "message", "next_action")} for b in verdict["blockers"]]
        await runner.move(
            campaign,
            it,
            "decided",
            card_id=card,
            decision="ship" if verdict["ship"] else "blocked",
            reason_code="gate_shipped" if verdict["ship"] else "gate_blocked",
            blockers=blockers,
        )

    async def _card(self, campaign: dict[str, Any], evidence: Evidence, *, final: bool) -> str:
        """The stage run's RunCard, written once (the same evidence gives the same content-addressed card)."""
        runner = self.runner
        tier = default_claim_tier(evidence)
        # The final stage claims broad where its evidence supports it (supported_tier): a card never claims more.
        if final and supported_tier(evidence)[0] == "broad":
            tier = "broad"
        content = build_runcard(
            evidence,
            claim_tier=tier,
            decision="pending",
            limitations=FINAL_LIMITATIONS if final else LIMITATIONS,
            creator=campaign["created_by"],
        )
        written = await runner.ledger.record_runcard(
            runner.actor, campaign["workspace_id"], campaign["project_id"], content
        )
        return str(written.record["card_id"])
