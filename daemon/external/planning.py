"""`POST /v1/compute/plans`: a training request rendered as a SkyPilot or dstack plan, recorded with its digest, and
launched through the engine's own client only where the engine is configured where the daemon runs.

A plan is only a plan: it is recorded with no job id. A launch that the engine takes records an external job with the
engine's id (its state `submitted`: the engine's own CLI follows it); a launch the engine cannot take answers that
the plan was rendered and nothing ran, with the command that runs it by hand.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from bashgym.client.errors import RuleRejected
from bashgym.client.external import ExternalJobSpec, PlanRecord, PlanSubmission
from bashgym.client.specs import UNASSIGNED, Actor, BudgetEntrySpec, RunRegistration, context_in_workspace
from bashgym.daemon.external.engines import launch_plan, validate
from bashgym.daemon.external.plans import PlanOptions, RenderedPlan, gpu_count, render_plan, write_plan
from bashgym.daemon.external.service import check_budget
from bashgym.daemon.settings import Settings
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import new_id
from bashgym.trainers.contracts.request import TrainingRequest


def constraints_file() -> Path | None:
    """The constraints file this BashGym was tested with, where the install has one (a source checkout)."""
    found = Path(__file__).resolve().parents[2] / "constraints.txt"
    return found if found.is_file() else None


async def submit_plan(
    settings: Settings,
    ledger: Ledger,
    actor: Actor,
    ws: str,
    request: TrainingRequest,
    body: PlanSubmission,
    secrets: dict[str, str],
    *,
    may_exceed_budget: bool = False,
) -> dict[str, Any]:
    """Render, check with the engine's library, record; with `launch`, submit through the engine's client."""
    context, _ = context_in_workspace(request.tracking_context, ws)
    project = context.project_id if context else UNASSIGNED
    plan_id = new_id("plan")
    folder = settings.home / "plans" / plan_id
    options = PlanOptions(**body.options.model_dump(), constraints_path=constraints_file(), plan_dir=folder, name=None)
    plan = await asyncio.to_thread(lambda: validate(render_plan(body.engine, request, options)))
    path = await asyncio.to_thread(write_plan, plan, folder)
    record = PlanRecord(
        plan_id=plan_id,
        project_id=project,
        engine=body.engine,
        request_digest=plan.request_digest,
        plan_digest=plan.digest,
        plan_text=plan.text,
        validation=plan.validation,
    )
    stored = (await ledger.record_compute_plan(actor, ws, record)).record
    answer = {**stored, **_shown(plan, path), "launched": False}
    if not body.launch:
        return {**answer, "reason": "a plan is only a plan: nothing ran (send launch to submit it)"}
    ceiling_hours = _ceiling_hours(body)
    if not may_exceed_budget:
        await check_budget(ledger, ws, project, ceiling_hours)
    try:
        launched = await asyncio.to_thread(launch_plan, plan, plan_path=path, secrets=secrets)
    except RuleRejected as exc:
        return {**answer, "reason": exc.message, "hint": exc.hint}
    job = await _record_launch(ledger, actor, ws, project, request, plan, plan_id, launched)
    await ledger.add_budget_entry(
        actor,
        ws,
        project,
        BudgetEntrySpec(
            entry_id=f"{job['run_id']}.reserve",
            kind="reserve",
            runs=1,
            gpu_hours=ceiling_hours,
            run_id=job["run_id"],
            reason=f"reserved at launch of plan {plan_id} (ceiling {ceiling_hours:g} GPU-hours: timeout times GPUs)",
        ),
    )
    await ledger.mark_plan_launched(actor, ws, plan_id, job["job_id"])
    return {**answer, "launched": True, "job": job}


async def _record_launch(
    ledger: Ledger,
    actor: Actor,
    ws: str,
    project: str,
    request: TrainingRequest,
    plan: RenderedPlan,
    plan_id: str,
    launched: dict[str, str],
) -> dict[str, Any]:
    """The engine took the plan: its id is an upstream id, so the launch is an external job, `submitted`."""
    run_id = new_id("run")
    await ledger.register_run(
        actor,
        ws,
        RunRegistration(
            run_id=run_id,
            source_system=plan.engine,
            method=request.method,
            tracking_context=request.tracking_context,
            compute_target=plan.engine,
            config={**plan.request, "compute_target": plan.engine, "plan_id": plan_id},
            recipe_digest=plan.request_digest,
        ),
    )
    spec = ExternalJobSpec(
        job_id=new_id("ext"),
        project_id=project,
        run_id=run_id,
        surface=plan.engine,
        provider=plan.engine,
        flavor=str(plan.document.get("resources", {}).get("accelerators") or plan.engine)[:64],
        request=plan.request,
        request_digest=plan.request_digest,
        lineage={"plan_id": plan_id, "plan_digest": plan.digest},
        destination=f"{plan.engine}://{plan.name}",
    )
    await ledger.begin_external_job(actor, ws, spec)
    written = await ledger.record_external_submission(actor, ws, spec.job_id, launched["engine_job_id"], launched)
    return dict(written.record)


def _ceiling_hours(body: PlanSubmission) -> float:
    """A launched plan's most GPU-hours: its timeout times its GPUs (none without a timeout: the engine's own)."""
    minutes = body.options.timeout_minutes
    return round(minutes / 60 * gpu_count(body.options.accelerators), 4) if minutes else 0.0


def _shown(plan: RenderedPlan, path: Path) -> dict[str, Any]:
    shown = dataclasses.asdict(plan)
    shown.pop("document")
    return {**shown, "plan_path": str(path)}
