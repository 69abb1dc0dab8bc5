"""The training service: accepts launches, queues them on the local lane, and controls running trainers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import secrets
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

from bashgym.client.errors import BashGymError, Conflict, NotFound, RuleRejected
from bashgym.client.redaction import redact_text, redact_values
from bashgym.client.specs import (
    UNASSIGNED,
    Actor,
    RunStatus,
    RunTransition,
    context_in_workspace,
)
from bashgym.client.states import TERMINAL
from bashgym.daemon.authority import Principal
from bashgym.daemon.failpoints import reach
from bashgym.daemon.lanes.admission import shaped_for_lane, trainer_python
from bashgym.daemon.lanes.group import GroupSupervisor
from bashgym.daemon.lanes.nemo import PAUSE_REFUSED, NemoCustomizer, NemoError
from bashgym.daemon.lanes.nemo_data import NemoDataset, customizer_dataset, job_body, job_hyperparameters
from bashgym.daemon.lanes.remote import LaneState, NemoSupervisor, SshSupervisor
from bashgym.daemon.lanes.slurm import SlurmSupervisor
from bashgym.daemon.lanes.slurm_files import LocalCommands, LocalRunFiles, SshCommands, SshRunFiles
from bashgym.daemon.lanes.slurm_jobs import Cluster
from bashgym.daemon.lanes.ssh import Device, RemoteRun
from bashgym.daemon.lanes.supervisor import RunHandle, Supervisor, is_trainer_alive, spawned_pid
from bashgym.daemon.launch.authorise import check_no_credentials
from bashgym.daemon.launch.check import LaunchChecks
from bashgym.daemon.launch.register import register_run, reserve_launch, started
from bashgym.daemon.launch.trackers import trainer_environment
from bashgym.daemon.settings import Settings, child_environment
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import new_id
from bashgym.trainers.contracts.request import TrainingRequest

log = logging.getLogger("bashgym.training")


class TrainingService:
    """Owns every supervisor task; leaving its `async with` stops the trainers it started."""

    def __init__(
        self, settings: Settings, ledger: Ledger, environ: dict[str, str] | None = None, *, threads: int | None = None
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self._environ = environ or {}  # the daemon's own: its trainers get child_environment's share of it
        self._nemo_key = self._environ.get(settings.nemo_api_key_env) or None
        self._threads = threads  # each local trainer's torch threads (settings.local_thread_limit); None: its default
        self._slots = asyncio.Semaphore(settings.local_slots)
        self._device_slots: dict[str, asyncio.Semaphore] = {}
        self._active: dict[str, Supervisor] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._group = asyncio.TaskGroup()
        self._is_accepting = True
        self.checks = LaunchChecks(settings, ledger, self._environ, busy=lambda: len(self._active))

    async def __aenter__(self) -> TrainingService:
        await self._group.__aenter__()
        await self.reconcile()
        return self

    async def reconcile(self) -> None:
        """After a start, resolve every run the last daemon left active: re-attach a live trainer, record
        the outcome a finished one left, start one that never started, and mark the unprovable `unknown`.
        Nothing that ran is relaunched."""
        for run in await self.ledger.active_runs():
            if run.get("external_job_id"):
                continue  # its compute is someone else's: daemon/external/ follows it by asking the upstream
            run_dir = self.settings.runs_dir / run["run_id"]
            handle = RunHandle(
                run["workspace_id"], run["project_id"], run["run_id"], run["attempt_id"], run_dir, run["method"]
            )
            actor = Actor(actor_id="system:reconcile", correlation_id="")
            if not (run_dir / "request.json").exists():
                if _launched_here(run) and run["status"] == "queued":
                    # Recorded by a launch here that died before writing the trainer's request: nothing ran, and
                    # nothing can, so the run ends saying so instead of waiting queued for ever.
                    await self._settle(handle, actor, "failed", NEVER_WRITTEN)
                continue  # otherwise registered through the ledger API by another system; not ours to resolve
            state = await asyncio.to_thread(_read_state, run_dir)
            lane = await asyncio.to_thread(LaneState, run_dir)
            if lane.lane != "local":
                if run["status"] == "paused" and state.get("status") == "paused":
                    continue  # paused on its device; resume relaunches it there
                await self._reattach_remote(handle, actor, lane)
                continue
            supervisor = self._supervisor(handle, actor)
            pid = state.get("pid") or await asyncio.to_thread(spawned_pid, run_dir)
            if isinstance(pid, int) and is_trainer_alive(pid, run_dir):
                self._tasks[handle.run_id] = self._group.create_task(
                    self._follow(supervisor, pid, is_running=run["status"] == "running")
                )
            elif run["status"] == "queued" and pid is None:
                # It never started: the daemon stopped while it waited for a slot. Starting it now is its
                # first launch, not a relaunch.
                self._launch(handle, actor, resume=False)
            elif run["status"] != "paused" or state.get("status") != "paused":
                await supervisor.resolve_from_state()

    async def _reattach_remote(self, handle: RunHandle, actor: Actor, lane: LaneState) -> None:
        try:
            supervisor = await self._remote_supervisor(handle, actor, lane)
        except NotFound as exc:
            await self._settle(handle, actor, "unknown", f"{exc.message} The daemon cannot follow the run.")
            return
        if isinstance(supervisor, SshSupervisor | SlurmSupervisor):
            self._tasks[handle.run_id] = self._group.create_task(self._supervise(supervisor, supervisor.reattach()))
        else:
            self._tasks[handle.run_id] = self._group.create_task(
                self._supervise(supervisor, supervisor.run(resume=False))
            )

    async def _supervise(self, supervisor: Supervisor, work: Coroutine[Any, Any, str]) -> None:
        async with self._supervising(supervisor):
            await work

    @contextlib.asynccontextmanager
    async def _supervising(self, supervisor: Supervisor) -> AsyncIterator[None]:
        """The supervisor is the run's active one, watched for progress. A failure of its supervision stays
        that run's: these tasks share one TaskGroup, where an escaped error would end every run and the daemon."""
        run_id = supervisor.handle.run_id
        try:
            self._active[run_id] = supervisor
            async with self._watching(supervisor):
                yield
        except Exception as exc:
            await self._supervision_failed(supervisor, exc)
        finally:
            self._active.pop(run_id, None)
            self._tasks.pop(run_id, None)
            await self._scrub_if_ended(supervisor.handle)

    async def _scrub_if_ended(self, handle: RunHandle) -> None:
        """An ended run's logs lose their secrets (scrub_logs). A run that goes on (paused, or on a device the
        daemon will follow again) keeps its log as written: its mirror appends to it by byte offset."""
        try:
            run = await self.ledger.get_run(handle.workspace, handle.project, handle.run_id)
            if run["status"] in TERMINAL:
                await asyncio.to_thread(scrub_logs, handle.run_dir)
        except (BashGymError, OSError):
            log.warning("Run %s: its logs were not scrubbed of secrets", handle.run_id, exc_info=True)

    async def _supervision_failed(self, supervisor: Supervisor, exc: Exception) -> None:
        """Stop a local trainer nobody follows any more, and say so on the run; the log has the traceback."""
        h, reference = supervisor.handle, secrets.token_hex(3)
        log.error("Supervision of run %s failed (ref %s)", h.run_id, reference, exc_info=exc)
        detail = exc.message if isinstance(exc, BashGymError) else str(exc)
        status: RunStatus = "unknown"
        outcome = "its trainer may still run: inspect training.log, then resume or stop the run"
        if supervisor.stops_with_daemon:
            with contextlib.suppress(Exception):
                await supervisor.stop()
                status, outcome = "failed", "its trainer was stopped"
        reason = f"The daemon's supervision of this run failed ({type(exc).__name__}: {detail[:500]}; ref {reference})"
        with contextlib.suppress(BashGymError):  # the ledger itself may be what failed; a restart resolves the run
            await self._settle(h, supervisor.actor, status, f"{reason}; {outcome}.")

    async def _settle(self, handle: RunHandle, actor: Actor, status: RunStatus, reason: str) -> None:
        """Move a run the daemon cannot (or can no longer) supervise to `status`, saying why. An end settles its
        launch reservation in the same write, as a supervisor's does."""
        gpus, hours = await self._charged(handle, actor) if status in TERMINAL else (None, None)
        transition = RunTransition(status=status, reason=reason)
        await self.ledger.transition_run(
            actor, handle.workspace, handle.project, handle.run_id, transition, settle_gpus=gpus, gpu_hours=hours
        )

    async def _charged(self, handle: RunHandle, actor: Actor) -> tuple[int, float | None]:
        """The GPUs a run without a supervisor held (stopped while paused, or lost), by its lane, and the GPU-hours
        its lane measured (a Slurm run's jobs), if it did."""
        try:
            supervisor = await self._supervisor_for(handle, actor)
        except NotFound as exc:
            log.warning("Run %s: its GPUs are unknown (%s); its time is settled without GPU-hours", handle.run_id, exc)
            return 0, None
        return await supervisor.charged_gpus(), supervisor.measured_gpu_hours()

    @contextlib.asynccontextmanager
    async def _watching(self, supervisor: Supervisor) -> AsyncIterator[None]:
        """While the supervisor works, check every so often that its trainer still makes progress."""
        limit = self.settings.no_progress_s

        async def watch() -> None:
            while True:
                await asyncio.sleep(min(limit / 4, 30.0))
                try:
                    await supervisor.check_progress(limit)
                except Exception:  # a failed check must not end the run's supervision
                    log.exception("Progress check of %s failed", supervisor.handle.run_id)

        watcher = asyncio.create_task(watch())
        try:
            yield
        finally:
            watcher.cancel()

    async def _follow(self, supervisor: Supervisor, pid: int, *, is_running: bool) -> None:
        async with self._slots, self._supervising(supervisor):
            await supervisor.follow_existing(pid, is_running=is_running)

    async def __aexit__(self, *exc: Any) -> None:
        self._is_accepting = False
        for supervisor in list(self._active.values()):
            if supervisor.stops_with_daemon:
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
        check_no_credentials(request)  # the API checked it already; a campaign's or the demo's launch too
        request = await shaped_for_lane(self.ledger, workspace, request)
        reward_model_version = request.grpo_reward_model
        request, device, found = await self.checks.required(workspace, request)
        context, _ = context_in_workspace(request.tracking_context, workspace)
        project = context.project_id if context else UNASSIGNED
        request = request.model_copy(update={"hf_repo_owner": f"{workspace}/{project}"})
        if not may_exceed_budget:
            await self.checks.check_budget(workspace, project)
        run_id, job, uploaded = None, None, None
        if request.lane == "nemo":
            run_id = new_id("run")
            job, uploaded = await self._submit_nemo_job(run_id, request)
        try:
            written = await register_run(
                self.ledger,
                actor,
                workspace,
                request,
                found,
                reward_model_version=reward_model_version,
                job=job,
                uploaded=uploaded,
                run_id=run_id,
            )
        except BaseException:
            if job is not None:
                await asyncio.shield(self._cancel_orphan(job["id"]))
            raise
        reach(self.settings.failpoint, "training.start.registered")
        run = written.record
        handle = RunHandle(
            workspace,
            run["project_id"],
            run["run_id"],
            f"{run['run_id']}.a1",
            self.settings.runs_dir / run["run_id"],
            request.method,
        )
        if not written.replayed:
            await reserve_launch(self.ledger, actor, workspace, handle.project, handle.run_id)
            await asyncio.to_thread(_write_request, handle.run_dir, request)
            lane = await asyncio.to_thread(LaneState, handle.run_dir)
            if device is not None:
                await lane.update(lane="ssh", device_id=device.device_id)
            if request.device_group is not None:
                await lane.update(lane="ssh-group", group_id=request.device_group)
            if request.slurm_cluster is not None:
                await lane.update(lane="slurm", cluster_id=request.slurm_cluster)
            if job is not None and uploaded is not None:
                await lane.update(
                    lane="nemo", job_id=job["id"], output_model=job.get("output_model"), dataset=uploaded.record()
                )
            self._launch(handle, actor, resume=False)
        return started(request, written, handle.attempt_id)

    def runs_on_device(self, device_id: str) -> list[str]:
        """Ids of the active runs on SSH device `device_id`, alone or as a member of a device group."""
        return [
            run_id
            for run_id, supervisor in self._active.items()
            if isinstance(supervisor, SshSupervisor)
            and device_id in {d.device_id for d in getattr(supervisor, "devices", [supervisor.device])}
        ]

    def runs_on_cluster(self, cluster_id: str) -> list[str]:
        """Ids of the active runs submitted to Slurm cluster `cluster_id`; its removal waits for them."""
        return [
            run_id
            for run_id, supervisor in self._active.items()
            if isinstance(supervisor, SlurmSupervisor) and supervisor.cluster.cluster_id == cluster_id
        ]

    def runs_on_group(self, group_id: str) -> list[str]:
        """Ids of the active runs that train across device group `group_id`; its removal waits for them."""
        return [
            run_id
            for run_id, supervisor in self._active.items()
            if isinstance(supervisor, GroupSupervisor) and supervisor.group_id == group_id
        ]

    async def _submit_nemo_job(self, run_id: str, request: TrainingRequest) -> tuple[dict[str, Any], NemoDataset]:
        """Upload the validated dataset to the NeMo Data Store, register it, then create the job that names it."""
        dataset = await asyncio.to_thread(customizer_dataset, request, namespace=self.settings.nemo_namespace)
        body = job_body(
            config=request.base_model,
            dataset_namespace=dataset.namespace,
            dataset_name=dataset.name,
            hyperparameters=job_hyperparameters(request),
            name=run_id,
            description=f"BashGym run {run_id}",
            output_model=None,
        )
        async with self._nemo() as client:
            try:
                await client.publish_dataset(dataset, description=f"BashGym {request.method} data for run {run_id}")
            except NemoError as exc:
                raise RuleRejected(
                    f"The dataset could not be published to NeMo: {exc.message}",
                    hint="Nothing was launched and no run was registered.",
                ) from exc
            try:
                return await client.create_job(body), dataset
            except NemoError as exc:
                raise RuleRejected(
                    f"NeMo Customizer refused the job: {exc.message}",
                    hint=f"Nothing was launched; dataset {dataset.dataset_id} stays in the Data Store.",
                ) from exc

    async def _cancel_orphan(self, job_id: str) -> None:
        try:
            async with self._nemo() as client:
                await client.cancel_job(job_id)
        except NemoError:
            pass  # best effort: the job was never recorded as a run

    def _nemo(self) -> NemoCustomizer:
        settings = self.settings
        return NemoCustomizer(
            settings.nemo_base_url,
            self._nemo_key,
            datastore_url=settings.nemo_datastore_url,
            entity_store_url=settings.nemo_entity_store_url,
        )

    async def _supervisor_for(self, handle: RunHandle, actor: Actor) -> Supervisor:
        """The supervisor of the run's lane (lane.json in its run directory)."""
        lane = await asyncio.to_thread(LaneState, handle.run_dir)
        if lane.lane == "local":
            return self._supervisor(handle, actor)
        return await self._remote_supervisor(handle, actor, lane)

    def _supervisor(self, handle: RunHandle, actor: Actor) -> Supervisor:
        system = Actor(
            actor_id="system:supervisor",
            credential_kind="system",
            capability="training.launch",
            correlation_id=actor.correlation_id,
        )
        return Supervisor(
            handle,
            self.ledger,
            system,
            trainer_python(self.settings),
            self.settings.grace_s,
            self.settings.local_gpus,
            threads=self._threads,
            environment=functools.partial(trainer_environment, self.settings, self._environ),
        )

    async def _remote_supervisor(self, handle: RunHandle, actor: Actor, lane: LaneState) -> Supervisor:
        system = Actor(
            actor_id="system:supervisor",
            credential_kind="system",
            capability="training.launch",
            correlation_id=actor.correlation_id,
        )
        if lane.lane == "ssh":
            device = Device.from_record(await self.ledger.get_device(handle.workspace, str(lane.data["device_id"])))
            return SshSupervisor(handle, self.ledger, system, device, self.settings.grace_s, self.settings.ssh_poll_s)
        if lane.lane == "slurm":
            return await self._slurm_supervisor(handle, system, str(lane.data["cluster_id"]))
        if lane.lane == "ssh-group":
            group = await self.ledger.get_device_group(handle.workspace, str(lane.data["group_id"]))
            devices = [Device.from_record(await self.ledger.get_device(handle.workspace, m)) for m in group["members"]]
            return GroupSupervisor(
                handle, self.ledger, system, devices, group, self.settings.grace_s, self.settings.ssh_poll_s
            )
        return NemoSupervisor(
            handle, self.ledger, system, self._nemo, self.settings.nemo_poll_s, self.settings.nemo_gpus
        )

    async def _slurm_supervisor(self, handle: RunHandle, system: Actor, cluster_id: str) -> SlurmSupervisor:
        """The run's job on a Slurm cluster: its commands run here (access `local`) or on the login node (`ssh`)."""
        cluster = Cluster.from_record(await self.ledger.get_cluster(handle.workspace, cluster_id))
        files: LocalRunFiles | SshRunFiles
        commands: LocalCommands | SshCommands
        if cluster.access == "ssh":
            record = await self.ledger.get_device(handle.workspace, str(cluster.login_device_id))
            login = dataclasses.replace(Device.from_record(record), work_dir=cluster.shared_dir)
            remote = RemoteRun(login, handle.run_id, handle.run_dir)
            files, commands = SshRunFiles(remote), SshCommands(remote)
        else:
            files = LocalRunFiles(Path(cluster.run_dir(handle.run_id)), handle.run_dir)
            commands = LocalCommands(child_environment(self.settings, self._environ), self.settings.slurm_conf)
        return SlurmSupervisor(
            handle,
            self.ledger,
            system,
            cluster,
            commands=commands,
            files=files,
            grace_s=self.settings.grace_s,
            poll_s=self.settings.slurm_poll_s,
            failpoint=self.settings.failpoint,
        )

    def _slots_for(self, supervisor: Supervisor) -> contextlib.AbstractAsyncContextManager[Any] | None:
        if isinstance(supervisor, GroupSupervisor):
            return self._group_slots(supervisor.devices)
        if isinstance(supervisor, SshSupervisor):
            device = supervisor.device
            return self._device_slots.setdefault(device.device_id, asyncio.Semaphore(device.slots))
        if isinstance(supervisor, NemoSupervisor | SlurmSupervisor):
            return None  # the service (Slurm: the cluster's scheduler) queues its own jobs
        return self._slots

    @contextlib.asynccontextmanager
    async def _group_slots(self, devices: list[Device]) -> AsyncIterator[None]:
        """A slot on every member, taken in one order (by device id) so two group runs never deadlock."""
        async with contextlib.AsyncExitStack() as stack:
            for device in sorted(devices, key=lambda d: d.device_id):
                slots = self._device_slots.setdefault(device.device_id, asyncio.Semaphore(device.slots))
                await stack.enter_async_context(slots)
            yield

    def _launch(self, handle: RunHandle, actor: Actor, *, resume: bool) -> None:
        self._tasks[handle.run_id] = self._group.create_task(self._run(handle, actor, resume=resume))

    async def _run(self, handle: RunHandle, actor: Actor, *, resume: bool) -> None:
        try:
            supervisor = await self._supervisor_for(handle, actor)
        except BashGymError as exc:  # its device was removed meanwhile: this run's failure, not the daemon's
            self._tasks.pop(handle.run_id, None)
            with contextlib.suppress(BashGymError):
                await self._settle(handle, actor, "failed", f"The run could not be launched: {exc.message}")
            return
        async with self._slots_for(supervisor) or contextlib.nullcontext(), self._supervising(supervisor):
            await supervisor.run(resume=resume)

    async def pause(self, principal: Principal, workspace: str, project: str, run_id: str) -> dict[str, Any]:
        run = await self._controllable(principal, workspace, project, run_id, "training.control")
        if run.get("source_system") == "nemo-customizer":  # whatever its status: the lane never pauses
            raise Conflict(
                f"Run {run_id} runs on NeMo Customizer, and {PAUSE_REFUSED}; nothing was changed.",
                hint="Let it finish, or stop it (bashgym training stop), which cancels the job.",
            )
        supervisor = self._active_of(workspace, project, run_id)
        if run["status"] != "running" or supervisor is None:
            raise Conflict(f"Run {run_id} is {run['status']}; only a running run can pause.")
        await supervisor.pause()
        return {"run_id": run_id, "status": "pausing"}

    async def resume(
        self, principal: Principal, actor: Actor, workspace: str, project: str, run_id: str
    ) -> dict[str, Any]:
        run = await self._controllable(principal, workspace, project, run_id, "training.control")
        task = self._tasks.get(run_id)
        if task is not None and run["status"] == "paused":
            # Paused is recorded before its supervisor finishes tidying up: a resume sent at once waits for that.
            await asyncio.wait({task}, timeout=PAUSED_TIDY_S)
        if run_id in self._tasks or not (run["status"] == "paused" or await self._is_orphaned(run)):
            raise Conflict(
                f"Run {run_id} is {run['status']}; only a paused run, or an `unknown` one whose local trainer is "
                "gone, can resume."
            )
        run_dir = self.settings.runs_dir / run_id
        attempt_id = run["attempts"][-1]["attempt_id"]
        if run["status"] == "unknown":
            # The lost trainer recorded steps past its last complete checkpoint; the resumed one redoes them,
            # as a new attempt with a metrics file of its own.
            lost = attempt_id
            attempt_id = await self.ledger.supersede_attempt(
                actor, workspace, project, run_id, "the trainer was lost; the run went on as a new attempt"
            )
            await asyncio.to_thread(_set_aside_metrics, run_dir, lost)
        handle = RunHandle(workspace, project, run_id, attempt_id, run_dir, run["method"])
        self._launch(handle, actor, resume=True)
        return {"run_id": run_id, "status": "resuming", "attempt_id": attempt_id}

    async def stop(
        self, principal: Principal, actor: Actor, workspace: str, project: str, run_id: str
    ) -> dict[str, Any]:
        run = await self._controllable(principal, workspace, project, run_id, "training.stop")
        supervisor = self._active_of(workspace, project, run_id)
        by = stopped_by(actor)
        if supervisor is not None:
            supervisor.stopped_by = by
            await supervisor.stop()
        elif run["status"] in {"queued", "paused", "preparing"} or await self._is_orphaned(run):
            task = self._tasks.pop(run_id, None)
            if task is not None:
                task.cancel()
            reason = {"unknown": "stopped while unknown", "paused": "stopped while paused"}.get(
                run["status"], "stopped before it ran"
            )
            reason = f"{reason}, by {by}"
            handle = RunHandle(
                workspace, project, run_id, run["attempts"][-1]["attempt_id"], self.settings.runs_dir / run_id,
                run["method"],
            )  # fmt: skip
            await self._settle(handle, actor, "cancelled", reason)
        else:
            raise Conflict(f"Run {run_id} is {run['status']}; there is nothing to stop.")
        return dict(await self.ledger.get_run(workspace, project, run_id))

    async def drives(self, workspace: str, run_id: str) -> bool:
        """Whether this daemon launched the run (its request is in the run's directory, here, on a device or a
        cloud lane) or follows its external job: then the daemon alone records the run's state."""
        if run_id in self._tasks or await self.ledger.external_job_of_run(workspace, run_id) is not None:
            return True
        return await asyncio.to_thread((self.settings.runs_dir / run_id / "request.json").exists)

    def live_step(self, workspace: str, project: str, run_id: str) -> dict[str, int | float | None] | None:
        """The step a running run's trainer last announced (every step, unlike its logged metrics), or None."""
        supervisor = self._active_of(workspace, project, run_id)
        return None if supervisor is None or supervisor.live is None else supervisor.live.as_dict()

    def _active_of(self, workspace: str, project: str, run_id: str) -> Supervisor | None:
        """The live supervisor of exactly this run: run ids are unique across the ledger, and this checks it."""
        supervisor = self._active.get(run_id)
        if supervisor is None or (supervisor.handle.workspace, supervisor.handle.project) != (workspace, project):
            return None
        return supervisor

    async def _is_orphaned(self, run: dict[str, Any]) -> bool:
        """An `unknown` local run whose trainer is gone: what its `unknown` reason offers, resume or stop, is safe."""
        run_dir = self.settings.runs_dir / run["run_id"]
        if run["status"] != "unknown" or run["run_id"] in self._tasks:
            return False
        lane = await asyncio.to_thread(LaneState, run_dir)
        state = await asyncio.to_thread(_read_state, run_dir)
        pid = state.get("pid") or await asyncio.to_thread(spawned_pid, run_dir)
        return lane.lane == "local" and not (isinstance(pid, int) and is_trainer_alive(pid, run_dir))

    async def _controllable(
        self, principal: Principal, workspace: str, project: str, run_id: str, capability: str
    ) -> dict[str, Any]:
        """The run to control; who may control it was decided by the route's dependency."""
        return dict(await self.ledger.get_run(workspace, project, run_id))


def _read_state(run_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((run_dir / "run_state.json").read_text()))
    except (OSError, ValueError):
        return {}


def stopped_by(actor: Actor) -> str:
    """Who stopped a run and with which command, for its end's reason (and so the "Run cancelled" notice)."""
    via = "/run stop in Discord" if (actor.correlation_id or "").startswith("discord-") else "training stop"
    return f"{actor.actor_id} ({via})"


NEVER_WRITTEN = (
    "The daemon stopped after recording this run and before writing its trainer's request: nothing trained. "
    "Launch it again (bashgym training start)."
)


def _launched_here(run: dict[str, Any]) -> bool:
    """A run this daemon's launch recorded (a training request's digest and data digest), not one another system
    registered through the ledger API to report its own training."""
    return bool(run.get("recipe_digest")) and bool(run.get("dataset_sha256"))


def _write_request(run_dir: Path, request: TrainingRequest) -> None:
    """The trainer's request, as sent. What the trainer never reads (the tracking context, the correlation id) is
    redacted by shape: a credential pasted into a note there never lands on disk. The fields it trains on stay as
    sent."""
    run_dir.mkdir(parents=True, exist_ok=True)
    # The fields the request set, only: a profile's value gives way to a field the user sent and to no other,
    # so the trainer must see which were sent (trainers/contracts/fields.py). The rest take the model's defaults.
    written = request.model_dump(mode="json", exclude_unset=True)
    for field in ("tracking_context", "correlation_id"):
        if field in written:
            written[field] = redact_values(written[field])
    (run_dir / "request.json").write_text(json.dumps(written, indent=2))


# What an ended run's trainer wrote that may quote what it was given: its logs, and its state (the error it died of).
LOGS = ("training.log", "rank-*.log", "launcher.log", "run_state.json")
PAUSED_TIDY_S = 30.0  # how long a resume waits for a just-paused run's supervisor to finish


def scrub_logs(run_dir: Path) -> None:
    """Once a trainer is done, its logs (and run_state.json's error) are rewritten with every credential-shaped
    string redacted: a trainer prints what it meets (a traceback, a library's message), and a log at rest keeps no
    secret. A request holding one is refused at the door (launch.authorise.check_no_credentials).
    While it runs, the log is the daemon user's alone (0600), and `training log` answers redacted lines."""
    for pattern in LOGS:
        for path in run_dir.glob(pattern):
            _scrub(path)


def _scrub(path: Path) -> None:
    scrubbed = path.with_name(path.name + ".scrubbed")
    changed = False
    with path.open(errors="replace") as source, scrubbed.open("w") as target:
        for line in source:
            clean = redact_text(line)
            changed = changed or clean != line
            target.write(clean)
    if changed:
        scrubbed.replace(path)
    else:
        scrubbed.unlink()


def _set_aside_metrics(run_dir: Path, attempt_id: str) -> None:
    """metrics.jsonl is the current attempt's; a superseded attempt's lines move to metrics.<attempt>.jsonl."""
    current = run_dir / "metrics.jsonl"
    if current.exists():
        current.replace(run_dir / f"metrics.{attempt_id}.jsonl")
