"""The training service: accepts launches, queues them on the local lane, and controls running trainers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from bashgym.daemon.authority import Principal
from bashgym.daemon.settings import Settings
from bashgym.daemon.supervisor import RunHandle, Supervisor, is_trainer_alive
from bashgym.ledger import Ledger
from bashgym.ledger.errors import Conflict, NotFound, RuleRejected
from bashgym.ledger.lineage import parse_context
from bashgym.ledger.models import UNASSIGNED, Actor, BudgetEntrySpec, RunRegistration, RunTransition
from bashgym.ledger.validation import canonical_json, sha256_text
from bashgym.trainers.contracts import format_report, validate_dataset
from bashgym.trainers.specs import TrainingRequest


class BudgetExceeded(RuleRejected):
    code = "budget_exceeded"


class TrainingService:
    """Owns every supervisor task; leaving its `async with` stops the trainers it started."""

    def __init__(self, settings: Settings, ledger: Ledger) -> None:
        self.settings = settings
        self.ledger = ledger
        self._slots = asyncio.Semaphore(settings.local_slots)
        self._active: dict[str, Supervisor] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._group = asyncio.TaskGroup()
        self._is_accepting = True

    async def __aenter__(self) -> TrainingService:
        await self._group.__aenter__()
        await self.reconcile()
        return self

    async def reconcile(self) -> None:
        """After a start, resolve every run the last daemon left active: re-attach a live trainer, record
        the outcome a finished one left, and mark the unprovable `unknown`. Nothing is relaunched."""
        for run in await self.ledger.active_runs():
            run_dir = self.settings.runs_dir / run["run_id"]
            if not (run_dir / "request.json").exists():
                continue  # registered through the ledger API by another system; not ours to resolve
            handle = RunHandle(
                run["workspace_id"], run["project_id"], run["run_id"], run["attempt_id"], run_dir, run["method"]
            )
            supervisor = self._supervisor(handle, Actor(actor_id="system:reconcile", correlation_id=""))
            state = await asyncio.to_thread(_read_state, run_dir)
            pid = state.get("pid")
            if isinstance(pid, int) and is_trainer_alive(pid, run_dir):
                self._tasks[handle.run_id] = self._group.create_task(
                    self._follow(supervisor, pid, is_running=run["status"] == "running")
                )
            elif run["status"] != "paused" or state.get("status") != "paused":
                await supervisor.resolve_from_state()

    async def _follow(self, supervisor: Supervisor, pid: int, *, is_running: bool) -> None:
        run_id = supervisor.handle.run_id
        try:
            async with self._slots:
                self._active[run_id] = supervisor
                await supervisor.follow_existing(pid, is_running=is_running)
        finally:
            self._active.pop(run_id, None)
            self._tasks.pop(run_id, None)

    async def __aexit__(self, *exc: Any) -> None:
        self._is_accepting = False
        for supervisor in list(self._active.values()):
            await supervisor.stop()
        for task in self._tasks.values():
            task.cancel()
        await self._group.__aexit__(*exc)

    async def start(
        self, actor: Actor, workspace: str, request: TrainingRequest, *, may_exceed_budget: bool = False
    ) -> dict[str, Any]:
        """Check, register (verified or unassigned) and queue one run; answer at once."""
        if not self._is_accepting:
            raise RuleRejected("The daemon is shutting down and takes no new runs.", hint="Retry once it is back.")
        if request.lane != "local":
            raise RuleRejected(
                f"compute_target `{request.compute_target}` needs the {request.lane} lane, which this "
                "daemon does not run yet; use compute_target `local`."
            )
        await self._check_dataset(request)
        dataset_sha256 = await asyncio.to_thread(sha256_file, Path(request.dataset_path))
        context, _ = parse_context(request.tracking_context)
        if context is not None and context.dataset_content_digest != dataset_sha256:
            raise RuleRejected(
                f"dataset_path has sha256 {dataset_sha256[:12]}, but the tracking context names dataset version "
                f"{context.dataset_version_id!r} with digest {context.dataset_content_digest[:12]}; an official run "
                "must train on the exact data it names.",
                hint="Register this file as a new dataset version (bashgym dataset register) and name it in the "
                "tracking context, or point dataset_path at the registered file.",
            )
        project = context.project_id if context and context.workspace_id == workspace else UNASSIGNED
        if not may_exceed_budget:
            await self._check_budget(workspace, project)
        registration = RunRegistration(
            method=request.strategy,
            tracking_context=request.tracking_context,
            compute_target=request.compute_target,
            config={**request.model_dump(mode="json", exclude={"tracking_context"}), "dataset_sha256": dataset_sha256},
            recipe_digest=sha256_text(canonical_json(request.model_dump(mode="json", exclude={"correlation_id"}))),
            correlation_id=request.correlation_id or actor.correlation_id,
        )
        written = await self.ledger.register_run(actor, workspace, registration)
        run = written.record
        handle = RunHandle(
            workspace,
            run["project_id"],
            run["run_id"],
            f"{run['run_id']}.a1",
            self.settings.runs_dir / run["run_id"],
            request.strategy,
        )
        if not written.replayed:
            await self.ledger.add_budget_entry(
                actor,
                workspace,
                handle.project,
                BudgetEntrySpec(
                    entry_id=f"{handle.run_id}.reserve",
                    kind="reserve",
                    runs=1,
                    gpu_hours=0.0,
                    run_id=handle.run_id,
                    reason="reserved at launch; GPU-hours settle from measured run time",
                ),
            )
            await asyncio.to_thread(_write_request, handle.run_dir, request)
            self._launch(handle, actor, resume=False)
        return {
            "run_id": handle.run_id,
            "attempt_id": handle.attempt_id,
            "status": run["status"],
            "lane": request.lane,
            "correlation_id": run["correlation_id"],
            "project_id": handle.project,
            "experiment_id": run["experiment_id"],
            "context_status": run["context_status"],
            "missing_context_fields": run["missing_context_fields"],
            "replayed": written.replayed,
        }

    async def _check_budget(self, workspace: str, project: str) -> None:
        try:
            budget = await self.ledger.budget_summary(workspace, project)
        except NotFound:
            return  # a project this launch creates has no budget yet
        remaining = budget["remaining"]
        if remaining is None:
            return
        # A unit is limited only once a limit names it: a runs-only budget leaves GPU-hours open.
        is_runs_limited, is_hours_limited = budget["limit"]["runs"] != 0, budget["limit"]["gpu_hours"] != 0
        if (is_runs_limited and remaining["runs"] < 1) or (is_hours_limited and remaining["gpu_hours"] <= 0):
            raise BudgetExceeded(
                f"Project {project!r} has {remaining['runs']} runs and {remaining['gpu_hours']:.2f} GPU-hours left; "
                "this launch needs 1 run and some GPU time.",
                hint=f"Ask a holder of budget.amend to amend it (bashgym budget amend --project {project}).",
                details={"remaining": remaining},
            )

    async def _check_dataset(self, request: TrainingRequest) -> None:
        for path in filter(None, (request.dataset_path, request.eval_dataset_path)):
            try:
                report = await asyncio.to_thread(
                    validate_dataset, request.strategy, Path(path), teacher_model=request.teacher_model
                )
            except FileNotFoundError as exc:
                raise RuleRejected(str(exc), hint="dataset_path must name a file the daemon can read.") from exc
            if not report.ok:
                raise RuleRejected(
                    f"The dataset breaks the {request.strategy} contract; nothing was launched.\n"
                    f"{format_report(report)}",
                    hint="Fix it; bashgym training validate checks it.",
                    details={"summary": report.summary},
                )

    def _supervisor(self, handle: RunHandle, actor: Actor) -> Supervisor:
        system = Actor(
            actor_id="system:supervisor",
            credential_kind="system",
            capability="training.launch",
            correlation_id=actor.correlation_id,
        )
        python = self.settings.trainer_python or sys.executable
        return Supervisor(handle, self.ledger, system, python, self.settings.grace_s, self.settings.local_gpus)

    def _launch(self, handle: RunHandle, actor: Actor, *, resume: bool) -> None:
        supervisor = self._supervisor(handle, actor)
        self._tasks[handle.run_id] = self._group.create_task(self._run(supervisor, resume=resume))

    async def _run(self, supervisor: Supervisor, *, resume: bool) -> None:
        run_id = supervisor.handle.run_id
        try:
            async with self._slots:
                self._active[run_id] = supervisor
                await supervisor.run(resume=resume)
        finally:
            self._active.pop(run_id, None)
            self._tasks.pop(run_id, None)

    async def pause(self, principal: Principal, workspace: str, project: str, run_id: str) -> dict[str, Any]:
        run = await self._controllable(principal, workspace, project, run_id, "training.control")
        supervisor = self._active.get(run_id)
        if run["status"] != "running" or supervisor is None:
            raise Conflict(f"Run {run_id} is {run['status']}; only a running run can pause.")
        supervisor.pause()
        return {"run_id": run_id, "status": "pausing"}

    async def resume(
        self, principal: Principal, actor: Actor, workspace: str, project: str, run_id: str
    ) -> dict[str, Any]:
        run = await self._controllable(principal, workspace, project, run_id, "training.control")
        if run["status"] != "paused" or run_id in self._tasks:
            raise Conflict(f"Run {run_id} is {run['status']}; only a paused run can resume.")
        handle = RunHandle(
            workspace,
            project,
            run_id,
            run["attempts"][-1]["attempt_id"],
            self.settings.runs_dir / run_id,
            run["method"],
        )
        self._launch(handle, actor, resume=True)
        return {"run_id": run_id, "status": "resuming"}

    async def stop(
        self, principal: Principal, actor: Actor, workspace: str, project: str, run_id: str
    ) -> dict[str, Any]:
        run = await self._controllable(principal, workspace, project, run_id, "training.stop")
        supervisor = self._active.get(run_id)
        if supervisor is not None:
            await supervisor.stop()
        elif run["status"] in {"queued", "paused", "preparing"}:
            task = self._tasks.pop(run_id, None)
            if task is not None:
                task.cancel()
            await self.ledger.transition_run(
                actor, workspace, project, run_id, RunTransition(status="cancelled", reason="stopped before it ran")
            )
        else:
            raise Conflict(f"Run {run_id} is {run['status']}; there is nothing to stop.")
        return dict(await self.ledger.get_run(workspace, project, run_id))

    async def _controllable(
        self, principal: Principal, workspace: str, project: str, run_id: str, capability: str
    ) -> dict[str, Any]:
        """The run to control; who may control it was decided by the route's dependency."""
        return dict(await self.ledger.get_run(workspace, project, run_id))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def _read_state(run_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((run_dir / "run_state.json").read_text()))
    except (OSError, ValueError):
        return {}


def _write_request(run_dir: Path, request: TrainingRequest) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "request.json").write_text(json.dumps(request.model_dump(mode="json"), indent=2))
