"""`POST /v1/compute/plans`: a training request rendered as a SkyPilot or dstack plan, recorded with its digest, and
launched through the engine's own client only where the engine is configured where the daemon runs.

A plan is only a plan: it is recorded with no job id. SkyPilot's own check (`sky launch --dryrun` through the
operator's `sky`) runs on every plan where it is configured. A launch is refused before anything is recorded where
the engine is not configured, the plan has no timeout (its GPU-hours are reserved from it) or its checkpoint store
is not one the daemon reads (its outputs are imported from there); the answer says the plan was rendered and nothing
ran, with what to set and the command that runs it by hand. Otherwise the run and its external job are recorded
`submitting` with the ceiling reserved, the engine is called (SkyPilot: a managed job through `sky`; dstack: its own
client), and the job is followed to its end like a Hugging Face Job (follow.py): a lost answer is found again by the
plan's name, never launched twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

from bashgym.client.errors import RuleRejected
from bashgym.client.external import ExternalJobSpec, ExternalObservation, PlanRecord, PlanSubmission
from bashgym.client.specs import UNASSIGNED, Actor, BudgetEntrySpec, RunRegistration, context_in_workspace
from bashgym.daemon.external.engines import launch_plan, launch_refusal, validate
from bashgym.daemon.external.follow import SYSTEM
from bashgym.daemon.external.hf_jobs import UpstreamError
from bashgym.daemon.external.plans import PlanOptions, RenderedPlan, gpu_count, render_plan, write_plan
from bashgym.daemon.external.service import ExternalJobs, check_budget
from bashgym.ledger.tx import new_id
from bashgym.trainers.contracts.external_job import JOB_ID_ENV
from bashgym.trainers.contracts.request import TrainingRequest


def constraints_file() -> Path | None:
    """The constraints file this BashGym was tested with, where the install has one (a source checkout)."""
    found = Path(__file__).resolve().parents[2] / "constraints.txt"
    return found if found.is_file() else None


async def submit_plan(
    external: ExternalJobs,
    actor: Actor,
    ws: str,
    request: TrainingRequest,
    body: PlanSubmission,
    *,
    may_exceed_budget: bool = False,
) -> dict[str, Any]:
    """Render, check with the engine's own validation, record; with `launch`, submit it and follow it."""
    settings, ledger = external.settings, external.ledger
    context, _ = context_in_workspace(request.tracking_context, ws)
    project = context.project_id if context else UNASSIGNED
    plan_id = new_id("plan")
    folder = settings.home / "plans" / plan_id
    options = PlanOptions(**body.options.model_dump(), constraints_path=constraints_file(), plan_dir=folder, name=None)
    plan = await asyncio.to_thread(render_plan, body.engine, request, options)
    path = await asyncio.to_thread(write_plan, plan, folder)
    secrets = external.plan_secrets()
    plan = await _validated(external, plan, path, secrets)
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
    refusal = _refusal(external, plan, body, secrets)
    if refusal is not None:
        return {
            **answer,
            "reason": f"The {plan.engine} plan {plan.name} (sha256 {plan.digest[:12]}) was rendered and nothing ran: "
            f"{refusal}",
            "hint": f"Run it by hand once the engine is set up: {plan.command}",
        }
    ceiling_hours = _ceiling_hours(body)
    if not may_exceed_budget:
        await check_budget(ledger, ws, project, ceiling_hours)
    job = await _record_launch(external, actor, ws, project, request, plan, plan_id, body, ceiling_hours)
    job = await _launched(external, job, plan, path, secrets)
    await ledger.mark_plan_launched(actor, ws, plan_id, job["job_id"])
    return {**answer, "launched": job["state"] != "failed", "job": job}


async def _validated(external: ExternalJobs, plan: RenderedPlan, path: Path, secrets: dict[str, str]) -> RenderedPlan:
    """SkyPilot's own check through the operator's `sky` where it is configured; else the library's where it
    imports here (dstack's, in our environment)."""
    if plan.engine == "skypilot" and external.settings.skypilot_bin:
        checked = await external.followers.sky().validate(path, plan.name, _named(plan, secrets))
        return dataclasses.replace(plan, validation=checked)
    return await asyncio.to_thread(validate, plan)


def _named(plan: RenderedPlan, secrets: dict[str, str]) -> dict[str, str]:
    return {name: secrets[name] for name in plan.secret_names if secrets.get(name)}


def _refusal(external: ExternalJobs, plan: RenderedPlan, body: PlanSubmission, secrets: dict[str, str]) -> str | None:
    """Why the plan is not launched from here, or None: checked before anything is recorded."""
    settings = external.settings
    if body.options.timeout_minutes is None:
        return "a launched plan needs timeout_minutes (--timeout-minutes): its GPU-hours are reserved from it."
    store = body.options.checkpoint_store
    if store is None or external.followers.outputs.folder(store) is None:
        mounts = ", ".join(settings.engine_outputs) or "none"
        return (
            f"its checkpoint store {store!r} is not one the daemon reads (BASHGYM_ENGINE_OUTPUTS names {mounts}), so "
            "its outputs could not be imported; name a store the operator mounted there (--checkpoint-store)."
        )
    home = external.followers.dstack_home()
    return launch_refusal(plan, secrets=secrets, home=home, sky_bin=settings.skypilot_bin)


async def _record_launch(
    external: ExternalJobs,
    actor: Actor,
    ws: str,
    project: str,
    request: TrainingRequest,
    plan: RenderedPlan,
    plan_id: str,
    body: PlanSubmission,
    ceiling_hours: float,
) -> dict[str, Any]:
    """The run and its external job, `submitting`, the ceiling reserved: written before the engine is called, so a
    daemon that dies in between finds the job by the plan's name instead of launching it again."""
    ledger = external.ledger
    run_id, job_id = new_id("run"), new_id("ext")
    config = {**plan.request, "compute_target": plan.engine, "plan_id": plan_id, "external_job_id": job_id}
    registration = RunRegistration(
        run_id=run_id,
        source_system=plan.engine,
        method=request.method,
        tracking_context=request.tracking_context,
        compute_target=plan.engine,
        config=config,
        recipe_digest=plan.request_digest,
    )
    await ledger.register_run(actor, ws, registration)
    minutes = body.options.timeout_minutes or 0
    await ledger.add_budget_entry(
        actor,
        ws,
        project,
        BudgetEntrySpec(
            entry_id=f"{run_id}.reserve",
            kind="reserve",
            runs=1,
            gpu_hours=ceiling_hours,
            run_id=run_id,
            reason=f"reserved at launch of plan {plan_id} (ceiling {ceiling_hours:g} GPU-hours: timeout times GPUs); "
            "settles from the job's running time",
        ),
    )
    engine_project = ""
    if plan.engine == "dstack":
        from bashgym.daemon.external.dstack_runs import dstack_project

        found = await asyncio.to_thread(dstack_project, external.followers.dstack_home())
        engine_project = found["name"] if found else ""
    spec = ExternalJobSpec(
        job_id=job_id,
        project_id=project,
        run_id=run_id,
        surface=plan.engine,
        provider=plan.engine,
        flavor=str(plan.document.get("resources", {}).get("accelerators") or body.options.accelerators or "cpu")[:64],
        timeout_s=minutes * 60,
        ceiling_gpu_hours=ceiling_hours,
        request=plan.request,
        request_digest=plan.request_digest,
        lineage={
            "plan_id": plan_id,
            "plan_digest": plan.digest,
            "engine_name": plan.name,
            "engine_project": engine_project,
            "launched_epoch": time.time(),
        },
        destination=str(body.options.checkpoint_store),
    )
    return (await ledger.begin_external_job(actor, ws, spec)).record


async def _launched(
    external: ExternalJobs, job: dict[str, Any], plan: RenderedPlan, path: Path, secrets: dict[str, str]
) -> dict[str, Any]:
    """Call the engine; its id proves the submission and the job is followed. A refusal ends the job (the run
    fails, its reservation released); a failure that may have reached the engine leaves it `unknown`, found again."""
    env = {JOB_ID_ENV: job["job_id"]}
    try:
        if plan.engine == "skypilot":
            sky = external.followers.sky(job)
            receipt = {"id": await sky.launch(path, plan.name, env, _named(plan, secrets)), "name": plan.name}
        else:
            receipt = await asyncio.to_thread(launch_plan, plan, plan_path=path, secrets=secrets, env=env)
    except (UpstreamError, RuleRejected) as exc:
        transient = isinstance(exc, UpstreamError) and exc.transient
        state = "unknown" if transient else "failed"
        reason = f"the launch {'may not have reached' if transient else 'was refused by'} {plan.engine}: {exc}"
        job = await external.followers.observe(job, ExternalObservation(kind="state", state=state, reason=reason))
        if transient:
            external.followers.follow(job)
        return job
    written = await external.ledger.record_external_submission(
        SYSTEM, job["workspace_id"], job["job_id"], receipt["id"], receipt
    )
    job = written.record
    await external.followers.sync_run(job, f"launched on {plan.engine} as {receipt['id']}")
    external.followers.follow(job)
    return job


def _ceiling_hours(body: PlanSubmission) -> float:
    """A launched plan's most GPU-hours: its timeout times its GPUs (none without a timeout: the engine's own)."""
    minutes = body.options.timeout_minutes
    return round(minutes / 60 * gpu_count(body.options.accelerators), 4) if minutes else 0.0


def _shown(plan: RenderedPlan, path: Path) -> dict[str, Any]:
    shown = dataclasses.asdict(plan)
    shown.pop("document")
    return {**shown, "plan_path": str(path)}
