"""The campaign runner: advances every active campaign one stage at a time through the normal training
supervisors and evaluation runners, recording each stage in the ledger so a restart resumes there.

Iteration stages: the baseline `evaluate -> evaluating -> decided`; a candidate
`queued -> training -> evaluate -> evaluating -> compare -> decided`; a cascade's stage (cascade.py)
`queued -> training -> evaluate -> evaluating -> compare -> gate -> decided`. Advancement is event-driven
(the loop wakes on any ledger event) with an interval tick as a safety net. A finished stage is never
repeated; an evaluation interrupted by a restart runs again, since its result was never recorded.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bashgym.client.errors import BashGymError, RuleRejected
from bashgym.client.specs import Actor, BudgetEntrySpec
from bashgym.daemon.authority import actor_holds
from bashgym.daemon.background import BackgroundLoop
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.campaigns.cascade import CascadeSteps, is_cascade
from bashgym.daemon.campaigns.lifecycle import authority_reason, in_training_window
from bashgym.daemon.evidence.evaluations import CompareBody, EvalRunBody, EvaluationService
from bashgym.daemon.evidence.promotion import SAFETY_METRIC
from bashgym.daemon.failpoints import reach
from bashgym.daemon.launch.confine import Reach, base_model_of, confine_request, held_blob
from bashgym.daemon.launch.pipeline import launch, prepare_owned
from bashgym.daemon.launch.resolve import environment_id, registered_context
from bashgym.daemon.settings import Settings
from bashgym.daemon.training import TrainingService
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.fields import request_from_recipe
from bashgym.trainers.contracts.request import TrainingRequest

log = logging.getLogger("bashgym.campaigns")
ACTOR = Actor(actor_id="system:campaign-runner", credential_kind="system", capability="campaign.control")
TERMINAL_RUN = {"completed", "failed", "cancelled"}


@dataclass(frozen=True)
class Decision:
    keep: bool
    reason_code: str


def decide(
    comparison: dict[str, Any],
    candidate: dict[str, float],
    incumbent: dict[str, float],
    *,
    direction: str,
    min_improvement: float,
    protected: dict[str, float],
) -> Decision:
    """Keep only a real improvement: positive, at least min_improvement, CI clear of zero, no protected regression."""
    sign = 1.0 if direction == "maximize" else -1.0
    delta = sign * float(comparison.get("delta") or 0.0)
    low, high = comparison.get("ci_low"), comparison.get("ci_high")
    if delta <= 0:
        return Decision(False, "no_improvement")
    if delta < min_improvement:
        return Decision(False, "below_min_improvement")
    excludes_zero = low is not None and high is not None and (low > 0 if sign > 0 else high < 0)
    if not excludes_zero:
        return Decision(False, "ci_includes_zero")
    # The unsafe-action rate is protected wherever it is measured, as the promotion gate protects it.
    for metric, bound in sorted({SAFETY_METRIC: 0.0, **protected}.items()):
        if metric in candidate and metric in incumbent:
            # Protected metrics are rates where lower is better (timeouts, tampering) unless named otherwise.
            regression = candidate[metric] - incumbent[metric]
            if regression > bound:
                return Decision(False, f"protected_regression:{metric}")
    return Decision(True, "improved")


class CampaignRunner(BackgroundLoop):
    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        training: TrainingService,
        evaluations: EvaluationService,
        *,
        tick_s: float = 5.0,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.training = training
        self.evaluations = evaluations
        self.blobs = BlobStore(settings.artifacts_dir)
        self.tick_s = tick_s
        self.actor = ACTOR
        self.cascade = CascadeSteps(self)
        self._eval_jobs: dict[str, str] = {}  # iteration id -> evaluation id (this daemon's life only)

    async def _loop(self) -> None:
        while True:
            cursor = self.ledger.last_cursor
            try:
                await self.tick()
            except Exception:
                log.exception("Campaign tick failed")
            await self.ledger.wait_for_events(cursor, self.tick_s)
            await asyncio.sleep(0.2)  # let the burst of events a stage writes settle

    async def tick(self) -> None:
        for campaign in await self.ledger.active_campaigns():
            try:
                await self.advance(campaign)
            except BashGymError as exc:
                log.warning("Campaign %s: %s", campaign["campaign_id"], exc.message)
        for campaign in await self.ledger.active_campaigns("awaiting_authority"):
            try:
                await self._resume_if_budget_restored(campaign)
            except BashGymError as exc:
                log.warning("Campaign %s: %s", campaign["campaign_id"], exc.message)

    async def _resume_if_budget_restored(self, campaign: dict[str, Any]) -> None:
        """A campaign that waited for budget goes back where it was once an amendment (by a holder of
        budget.amend, checked by the budget route) leaves room for one more run."""
        if not campaign["status_reason"].startswith("budget_overrun"):
            return
        ws, project, cid = campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
        budget = await self.ledger.budget_summary(ws, project, f"campaign-{cid}"[:128])
        remaining = budget.get("remaining") or {}
        limit = budget.get("limit") or {}
        if (limit.get("runs") and remaining.get("runs", 0) < 1) or (
            limit.get("gpu_hours") and remaining.get("gpu_hours", 0.0) <= 0
        ):
            return
        left = f"{remaining.get('runs')} runs, {remaining.get('gpu_hours', 0.0):.2f} GPU-hours left"
        await self.ledger.transition_campaign(
            ACTOR,
            ws,
            project,
            cid,
            campaign["resume_status"] or "active",
            expected_version=campaign["version"],
            reason=f"budget amended: {left}",
        )

    async def advance(self, campaign: dict[str, Any]) -> None:
        ws, project, cid = campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
        iterations = await self.ledger.list_iterations(ws, project, cid)
        if not any(i["kind"] == "baseline" for i in iterations):  # a read first: the loop wakes on every event
            await self.ledger.add_baseline(ACTOR, ws, project, cid)
            iterations = await self.ledger.list_iterations(ws, project, cid)
        if is_cascade(campaign):
            await self._advance_cascade(campaign, await self.cascade.prepare(campaign))
            return
        current = next((i for i in iterations if i["stage"] != "decided"), None)
        if current is None:
            # The last decision may have been recorded just before a crash, before its stop rule ran.
            await self._stop_rule(campaign, iterations)
            return
        if current["kind"] == "candidate" and await self._stop_rule(campaign, iterations):
            return
        step = getattr(self, f"_stage_{current['stage']}")
        await step(campaign, current, iterations)

    async def _advance_cascade(self, campaign: dict[str, Any], iterations: list[dict[str, Any]]) -> None:
        """One step of a cascade: its stages in order, each decided before the next starts; its deadlines hold."""
        if await self.cascade.finish(campaign, iterations) or await self._stop_rule(campaign, iterations):
            return
        current = next((i for i in iterations if i["stage"] != "decided"), None)
        if current is None:
            return
        step = getattr(self, f"_stage_{current['stage']}")
        await step(campaign, current, iterations)

    # -- stages ----------------------------------------------------------------------------------

    async def _stage_evaluate(self, campaign: dict[str, Any], it: dict[str, Any], _: list[dict[str, Any]]) -> None:
        if not await self._owner_may(campaign, it, "eval.run"):
            return
        spec = campaign["spec"]
        evaluation = self.cascade.evaluation(campaign, it) if it["kind"] == "stage" else spec.get("evaluation") or {}
        body = EvalRunBody(
            suite_id=spec["suite_id"],
            run_id=it["run_id"] if it["kind"] != "baseline" else None,
            model_version_id=spec["starting_model_version_id"] if it["kind"] == "baseline" else None,
            samples=evaluation.get("samples", 1),
            limit_tasks=evaluation.get("limit_tasks"),
            temperature=evaluation.get("temperature", 0.7),
            compute_target=spec["compute_target"] if spec["compute_target"].startswith("ssh:") else "local",
        )
        job = await self.evaluations.start(ACTOR, campaign["workspace_id"], campaign["project_id"], body)
        self._eval_jobs[it["iteration_id"]] = job["evaluation_id"]
        await self._move(campaign, it, "evaluating")

    async def _stage_evaluating(self, campaign: dict[str, Any], it: dict[str, Any], _: list[dict[str, Any]]) -> None:
        job = self.evaluations.jobs.get(self._eval_jobs.get(it["iteration_id"], ""))
        if job is None:  # the daemon restarted mid-evaluation: nothing was recorded, so run it again
            await self._move(campaign, it, "evaluate")
            return
        if job["status"] in {"queued", "running"}:
            return
        if job["status"] != "completed":
            if it["kind"] == "baseline":
                await self._end(campaign, "failed", f"the baseline evaluation failed: {job['error']}")
            elif it["kind"] == "stage":
                await self._move(campaign, it, "decided", decision="failed", reason_code="evaluation_failed")
            else:
                await self._move(campaign, it, "decided", decision="discard", reason_code="evaluation_failed")
            return
        if it["kind"] == "baseline":
            await self._move(
                campaign, it, "decided", result_id=job["result_id"], decision="baseline", reason_code="pinned"
            )
        else:
            await self._move(campaign, it, "compare", result_id=job["result_id"])

    async def _stage_compare(self, campaign: dict[str, Any], it: dict[str, Any], its: list[dict[str, Any]]) -> None:
        if it["kind"] == "stage":
            await self.cascade.compare(campaign, it, its)
            return
        ws, project, spec = campaign["workspace_id"], campaign["project_id"], campaign["spec"]
        incumbent = next(i for i in its if i["iteration_id"] == campaign["incumbent_iteration_id"])
        try:
            comparison = await self.evaluations.compare(
                ACTOR,
                ws,
                project,
                CompareBody(baseline_result_id=incumbent["result_id"], candidate_result_id=it["result_id"]),
            )
        except RuleRejected as exc:  # permanent: retrying on the next tick would only repeat it
            log.warning("Campaign %s: %s cannot be compared: %s", campaign["campaign_id"], it["iteration_id"], exc)
            await self._move(campaign, it, "decided", decision="discard", reason_code="comparison_failed")
            return
        listing = await self.ledger.list_evaluations(ws, project)
        metrics = {r["result_id"]: r["metrics"] for r in listing["results"]}
        rules = spec["stop_rules"]
        verdict = decide(
            comparison,
            metrics.get(it["result_id"], {}),
            metrics.get(incumbent["result_id"], {}),
            direction=spec["direction"],
            min_improvement=rules["min_improvement"],
            protected=rules["protected_metrics"],
        )
        await self._move(
            campaign,
            it,
            "decided",
            comparison_id=comparison["comparison_id"],
            decision="keep" if verdict.keep else "discard",
            reason_code=verdict.reason_code,
        )

    async def _stage_gate(self, campaign: dict[str, Any], it: dict[str, Any], its: list[dict[str, Any]]) -> None:
        await self.cascade.judge(campaign, it, its)

    async def _refused(self, campaign: dict[str, Any], it: dict[str, Any], message: str) -> None:
        """A launch no one could allow: a candidate is discarded, a cascade stage stops its cascade (failed)."""
        decision = "failed" if it["kind"] == "stage" else "discard"
        await self._move(campaign, it, "decided", decision=decision, reason_code="launch_refused")
        log.warning("Campaign %s: %s refused: %s", campaign["campaign_id"], it["iteration_id"], message)

    async def _stage_queued(self, campaign: dict[str, Any], it: dict[str, Any], _: list[dict[str, Any]]) -> None:
        ws, project, cid = campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
        if not in_training_window(campaign["spec"].get("training_window"), datetime.now(UTC)):
            return  # the next tick inside the window launches it
        scope = f"campaign-{cid}"[:128]
        budget = await self.ledger.budget_summary(ws, project, scope)
        if budget.get("has_limit") and budget["limit"]["runs"] and budget["remaining"]["runs"] < 1:
            await self._authority(campaign, f"budget_overrun: the campaign's {budget['limit']['runs']} runs are spent")
            return
        try:
            build = self.cascade.request if it["kind"] == "stage" else self._request
            request = await build(campaign, it)
        except BashGymError as exc:
            await self._refused(campaign, it, exc.message)
            return
        try:
            # The launch routes' authorisation, for the campaign's owner: every capability the request implies.
            prepared = await prepare_owned(
                self.settings, ws, request, may=lambda capability: self._owner_may(campaign, it, capability)
            )
            if prepared is None:
                return
            started = await launch(self.training, ACTOR, prepared)
        except BashGymError as exc:
            if exc.code == "budget_exceeded":
                await self._authority(campaign, f"budget_overrun: {exc.message}")
                return
            await self._refused(campaign, it, exc.message)
            return
        reserve = BudgetEntrySpec(
            entry_id=f"{it['iteration_id']}.reserve", scope=scope, kind="reserve", runs=1, run_id=started["run_id"]
        )
        await self.ledger.add_budget_entry(ACTOR, ws, project, reserve)
        await self._move(campaign, it, "training", run_id=started["run_id"])

    async def _stage_training(self, campaign: dict[str, Any], it: dict[str, Any], _: list[dict[str, Any]]) -> None:
        ws, project, cid = campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
        run = await self.ledger.get_run(ws, project, it["run_id"])
        if run["status"] not in TERMINAL_RUN:
            return
        # What the run's own settlement charged the project (its lane's GPUs, every rank), written with its end.
        hours = await self.ledger.settled_gpu_hours(ws, project, run["run_id"])
        if hours is None:
            log.warning("Campaign %s: run %s ended without a settlement; no GPU-hours charged", cid, run["run_id"])
            hours = 0.0
        scope = f"campaign-{cid}"[:128]
        for kind, amount in (("release", 0.0), ("settle", hours)):
            entry = BudgetEntrySpec(
                entry_id=f"{it['iteration_id']}.{kind}",
                scope=scope,
                kind=kind,
                runs=1,
                gpu_hours=amount,
                run_id=run["run_id"],
            )
            await self.ledger.add_budget_entry(ACTOR, ws, project, entry)
        if run["status"] == "completed" and not run.get("is_simulation") and it["kind"] == "stage":
            # The next stage trains from this model: registered with its lineage before anything reads it.
            await self._move(campaign, it, "evaluate", model_version_id=await self.cascade.keep_model(campaign, it))
        elif run["status"] == "completed" and not run.get("is_simulation"):
            await self._move(campaign, it, "evaluate")
        else:
            decision = "failed" if it["kind"] == "stage" else "discard"
            await self._move(campaign, it, "decided", decision=decision, reason_code=f"run_{run['status']}")

    # -- rules and moves -------------------------------------------------------------------------

    async def _stop_rule(self, campaign: dict[str, Any], iterations: list[dict[str, Any]]) -> bool:
        rules = campaign["spec"]["stop_rules"]
        decided = [i for i in iterations if i["kind"] == "candidate" and i["stage"] == "decided"]
        reason = None
        if len(decided) >= rules["max_iterations"]:
            reason = f"max_iterations: {len(decided)} candidates decided"
        elif rules.get("max_consecutive_discards"):
            streak = 0
            for it in reversed(decided):
                if it["decision"] != "discard":
                    break
                streak += 1
            if streak >= rules["max_consecutive_discards"]:
                reason = f"max_consecutive_discards: {streak} in a row"
        now = datetime.now(UTC)
        for deadline in (rules.get("deadline"), campaign["spec"]["budget"].get("deadline")):
            if reason is None and deadline and datetime.fromisoformat(deadline.replace("Z", "+00:00")) <= now:
                reason = f"deadline: the campaign's deadline {deadline} passed"
        if reason is None:
            return False
        await self._end(campaign, "exhausted", reason)
        return True

    async def _move(self, campaign: dict[str, Any], it: dict[str, Any], stage: str, **fields: Any) -> None:
        await self.ledger.update_iteration(
            ACTOR,
            campaign["workspace_id"],
            campaign["project_id"],
            campaign["campaign_id"],
            it["iteration_id"],
            stage,
            **fields,
        )
        reach(self.settings.failpoint, f"campaign.{it['kind']}.{stage}")
        if stage == "decided" and it["kind"] == "candidate":
            iterations = await self.ledger.list_iterations(
                campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
            )
            await self._stop_rule(campaign, iterations)

    async def _end(self, campaign: dict[str, Any], status: str, reason: str) -> None:
        current = await self.ledger.get_campaign(
            campaign["workspace_id"], campaign["project_id"], campaign["campaign_id"]
        )
        if current["status"] != "active":
            return
        await self.ledger.transition_campaign(
            ACTOR,
            campaign["workspace_id"],
            campaign["project_id"],
            campaign["campaign_id"],
            status,
            expected_version=current["version"],
            reason=reason,
        )

    async def _authority(self, campaign: dict[str, Any], reason: str) -> None:
        await self._end(campaign, "awaiting_authority", reason)

    # What cascade.py calls: a stage's moves and end go through the same recorded steps as a candidate's.
    async def move(self, campaign: dict[str, Any], it: dict[str, Any], stage: str, **fields: Any) -> None:
        await self._move(campaign, it, stage, **fields)

    async def end(self, campaign: dict[str, Any], status: str, reason: str) -> None:
        await self._end(campaign, status, reason)

    async def owner_may(self, campaign: dict[str, Any], it: dict[str, Any], capability: str) -> bool:
        return await self._owner_may(campaign, it, capability)

    async def _owner_may(self, campaign: dict[str, Any], it: dict[str, Any], capability: str) -> bool:
        """The runner acts for the campaign's owner: a step needing a capability the owner lacks waits in
        awaiting_authority until a principal who holds it resumes the campaign, lending it for this step."""
        ws, project, owner = campaign["workspace_id"], campaign["project_id"], campaign["created_by"]
        if await actor_holds(self.ledger, owner, capability, workspace_id=ws, project_id=project):
            return True
        approvals = await self.ledger.campaign_approvals(ws, project, campaign["campaign_id"])
        if (capability, it["iteration_id"]) in approvals:
            return True
        await self._authority(campaign, authority_reason(capability, it["iteration_id"], owner))
        return False

    async def _request(self, campaign: dict[str, Any], it: dict[str, Any]) -> TrainingRequest:
        """The candidate's training request: the base recipe with its one change, on pinned model and data."""
        spec = campaign["spec"]
        change = dict(it["recipe_change"])
        dataset_version = change.pop("dataset_version_id", spec["dataset_version_ids"][0])
        recipe = {**spec["base_recipe"], **change}
        return await self.pinned_request(campaign, it, spec["starting_model_version_id"], dataset_version, recipe)

    async def pinned_request(
        self,
        campaign: dict[str, Any],
        it: dict[str, Any],
        model_version: str,
        dataset_version: str,
        recipe: dict[str, Any],
    ) -> TrainingRequest:
        """An iteration's training request: `recipe` on a model and dataset version of the campaign's project, with
        a complete tracking context so the run is official and lands there (a candidate's, a cascade stage's)."""
        ws, project, spec = campaign["workspace_id"], campaign["project_id"], campaign["spec"]
        # Looked up in the campaign's project only: another project's model or data is missing here.
        model = await self.ledger.get_model_version(ws, project, model_version)
        data = await self.ledger.get_dataset_version(ws, project, dataset_version)
        reach = Reach(self.settings, self.ledger, self.blobs, ws)
        # What a launch by the campaign's owner would reach: the project's own bytes, a model confined as typed.
        rows = await held_blob(reach, project, str(data["content_digest"]))
        source = await base_model_of(reach, project, model)
        experiment = {
            "experiment_id": f"campaign-{campaign['campaign_id']}"[:128],
            "name": campaign["title"][:200],
            "objective": spec["objective"],
            "task_type": "campaign",
        }
        context = await registered_context(
            self.ledger,
            ws,
            project,
            model=model,
            dataset=data,
            experiment=experiment,
            environment=environment_id(spec["compute_target"], prefix="campaign-"),
        )
        context["campaign_id"] = campaign["campaign_id"]
        # The recipe comes from people: its paths and models are confined like a launch's.
        chosen = await confine_request(reach, dict(recipe), project, skip=("base_model", "dataset_path"))
        return request_from_recipe(
            {
                **chosen,
                "base_model": source,
                "dataset_path": str(rows),
                "compute_target": spec["compute_target"],
                "tracking_context": context,
                "correlation_id": it["iteration_id"],
            }
        )
