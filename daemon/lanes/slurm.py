"""The Slurm lane: a run is one batch job on a registered cluster, staged in the cluster's shared directory,
submitted with `sbatch`, followed through `scontrol`/`sacct`, stopped with `scancel`.

The job carries the run's id in its name and comment, so a daemon that died between `sbatch` and recording the
job id finds the job instead of submitting it again. Like the SSH lane, a daemon that merely shuts down leaves
the job to Slurm and follows it again at its next start (`lane.json` keeps the job id and offsets).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from bashgym.client.specs import Actor, RunTransition
from bashgym.client.states import TERMINAL
from bashgym.daemon.background import until_stored
from bashgym.daemon.failpoints import reach
from bashgym.daemon.lanes.remote import MAX_LOST_POLLS, LaneState, MirroringSupervisor, remote_request
from bashgym.daemon.lanes.slurm_files import RunFiles, SlurmCommands, SlurmUnavailable
from bashgym.daemon.lanes.slurm_jobs import (
    LOST_STATES,
    SACCT,
    SACCT_FORMAT,
    SBATCH,
    SCANCEL,
    SCONTROL,
    SQUEUE,
    Cluster,
    JobState,
    job_comment,
    job_name,
    parse_found_jobs,
    parse_sacct,
    parse_scontrol,
    parse_submitted,
    render_script,
)
from bashgym.daemon.lanes.ssh import asyncssh
from bashgym.daemon.lanes.supervisor import RunHandle, read_request
from bashgym.ledger.store import Ledger

log = logging.getLogger("bashgym.slurm")

SCRIPT = "job.sbatch"
TIME_LIMIT_MARK = "time_limit_warned"  # written by the batch script when Slurm warns of the time limit
PAUSE_EXIT = 75  # trainers/contracts/rundir.py: the trainer checkpointed and exited on SIGUSR1


class SlurmSupervisor(MirroringSupervisor):
    """One run as one Slurm batch job: stage, submit once, follow, mirror, cancel, settle from Slurm's accounting."""

    stops_with_daemon = False

    def __init__(
        self,
        handle: RunHandle,
        ledger: Ledger,
        actor: Actor,
        cluster: Cluster,
        *,
        commands: SlurmCommands,
        files: RunFiles,
        grace_s: float,
        poll_s: float,
        failpoint: str = "",
    ) -> None:
        super().__init__(handle, ledger, actor, cluster.python, grace_s, cluster.gpus_per_node)
        self.cluster = cluster
        self.commands = commands
        self.files = files
        self.lane = LaneState(handle.run_dir)
        self.poll_s = poll_s
        self.failpoint = failpoint
        self.job: JobState | None = None
        self._is_pausing = False
        self._is_queued = False  # a new attempt (a requeued job) waits queued until Slurm places it
        self._done = asyncio.Event()

    @property
    def job_id(self) -> str | None:
        job_id = self.lane.data.get("job_id")
        return str(job_id) if job_id else None

    async def run(self, *, resume: bool) -> str:
        request = await asyncio.to_thread(read_request, self.handle.run_dir)
        if not resume:
            await self._transition("preparing", reason=f"staging into cluster {self.cluster.cluster_id}")
        try:
            await self.files.open()
            if not resume:
                await self.files.upload(*await asyncio.to_thread(remote_request, self.handle.run_dir))
            await self._submit(nodes=request.num_machines, distributed=request.is_distributed, resume=resume)
        except (SlurmUnavailable, asyncssh.Error, OSError) as exc:
            self._done.set()
            await self.files.close()
            message = exc.message if isinstance(exc, SlurmUnavailable) else str(exc)
            await self._transition("failed", reason="the cluster did not take the job", error_summary=message)
            return "failed"
        return await self._follow_to_end()

    async def reattach(self) -> str:
        """After a daemon restart: follow the recorded job; a submission never recorded is looked up by the run's
        name and comment (and submitted only when Slurm has no such job)."""
        run = await self.ledger.get_run(self.handle.workspace, self.handle.project, self.handle.run_id)
        self._is_running = run["status"] == "running"
        try:
            await self.files.open()
            if self.lane.data.get("submitting"):
                request = await asyncio.to_thread(read_request, self.handle.run_dir)
                await self._submit(
                    nodes=request.num_machines,
                    distributed=request.is_distributed,
                    resume=bool(self.lane.data.get("resume")),
                )
        except (SlurmUnavailable, asyncssh.Error, OSError) as exc:
            self._done.set()
            return await self._unknown(f"cluster {self.cluster.cluster_id} did not answer after the restart: {exc}")
        if self.job_id is None:
            self._done.set()
            return await self._unknown("the daemon stopped while staging the run; nothing was submitted")
        return await self._follow_to_end()

    async def _submit(self, *, nodes: int, distributed: bool, resume: bool) -> None:
        """Submit the run's job once: the submission is marked in lane.json first, and a job already bearing its
        comment (a daemon killed after sbatch, before the id was recorded) is taken instead of a second one."""
        if not self.lane.data.get("submitting"):
            submission = int(self.lane.data.get("submission", 0)) + 1
            await self.lane.update(
                lane="slurm", cluster_id=self.cluster.cluster_id, submission=submission, submitting=True,
                resume=resume, job_id=None, nodes=nodes,
            )  # fmt: skip
        submission = int(self.lane.data["submission"])
        h = self.handle
        comment = job_comment(h.run_id, h.attempt_id, submission)
        job_id = await self._find_job(comment)
        if job_id is None:
            script = render_script(
                self.cluster, run_id=h.run_id, attempt_id=h.attempt_id, submission=submission, nodes=nodes,
                distributed=distributed, resume=resume,
            )  # fmt: skip
            await self.files.write_text(SCRIPT, script)
            await asyncio.to_thread((h.run_dir / SCRIPT).write_text, script)
            job_id = await self._sbatch()
            reach(self.failpoint, "training.slurm.submitted")
            how = f"submitted Slurm job {job_id} to partition {self.cluster.partition}"
        else:
            how = f"found Slurm job {job_id} submitted before the daemon restarted; nothing was submitted again"
        jobs = [*self.lane.data.get("jobs", []), job_id]
        await self.lane.update(job_id=job_id, submitting=False, jobs=jobs)
        log.info("Run %s: %s", h.run_id, how)
        await self._remote_log(f"{how} ({comment})")
        if self._is_stopping:  # a stop that came while the job was being submitted
            await self._scancel()

    async def _sbatch(self) -> str:
        script = f"{self.cluster.run_dir(self.handle.run_id)}/{SCRIPT}"
        code, out, err = await self.commands([SBATCH, "--parsable", script])
        job_id = parse_submitted(out) if code == 0 else None
        if job_id is None:
            raise SlurmUnavailable(
                f"sbatch refused the job of run {self.handle.run_id} on cluster {self.cluster.cluster_id} "
                f"(exit {code}): {err.strip()[-1000:] or out.strip()[-1000:]}",
                hint=f"Check the cluster's partition, account and QoS (bashgym cluster show "
                f"{self.cluster.cluster_id}) and the script {script}.",
            )
        return job_id

    async def _find_job(self, comment: str) -> str | None:
        """A job of this run's name carrying exactly this submission's comment, pending, running or recently ended."""
        name = job_name(self.handle.run_id)
        code, out, _ = await self.commands([SQUEUE, "--noheader", "--states=all", f"--name={name}", "--format=%i|%k"])
        found = parse_found_jobs(out, comment) if code == 0 else []
        if not found:
            code, out, _ = await self.commands(
                [SACCT, "-X", "-n", "-P", f"--name={name}", "--format=JobID,Comment", "--starttime=now-7days"]
            )
            found = parse_found_jobs(out, comment) if code == 0 else []
        return found[-1] if found else None

    async def look(self) -> JobState | None:
        """The job as Slurm holds it now: the controller's record, or the accounting's once it has forgotten it."""
        job_id = self.job_id
        assert job_id is not None
        code, out, _ = await self.commands([SCONTROL, "show", "job", "-o", job_id])
        state = parse_scontrol(out) if code == 0 else None
        if state is None:
            code, out, _ = await self.commands([SACCT, "-X", "-n", "-P", "-j", job_id, f"--format={SACCT_FORMAT}"])
            state = parse_sacct(out, job_id) if code == 0 else None
        return state

    async def _follow_to_end(self) -> str:
        try:
            job = await self._follow_job()
        except asyncio.CancelledError:
            await asyncio.shield(self.files.close())  # daemon shutdown: the job is Slurm's; the next start follows it
            raise
        except (SlurmUnavailable, asyncssh.Error, OSError) as exc:
            await asyncio.shield(self.files.close())
            self._done.set()
            return await self._unknown(f"cluster {self.cluster.cluster_id} stopped answering: {exc}")
        try:
            return await asyncio.shield(
                until_stored(lambda: self._record_job_end(job), what=f"the end of run {self.handle.run_id}")
            )
        finally:
            await asyncio.shield(self.files.close())
            self._done.set()

    async def _follow_job(self) -> JobState | None:
        """Poll until the job has ended (None: Slurm has forgotten it), mirroring the run's files at each look."""
        lost = 0
        while True:
            job = await self.look()
            await self._mirror()
            if job is None:
                lost += 1
                if lost >= MAX_LOST_POLLS:
                    return None
            else:
                lost = 0
                self.job = job
                await self._observe(job)
                if not job.is_active:
                    await self._mirror()  # what the trainer wrote last, before its exit
                    return job
            await asyncio.sleep(self.poll_s)

    async def _mirror(self) -> None:
        await self.files.sync()
        await self._process_protocol()
        await self._ingest_metrics()

    async def _observe(self, job: JobState) -> None:
        """Say what Slurm says: why a job waits (each new reason once), that it runs, that it was requeued."""
        seen = str(self.lane.data.get("observed", ""))
        said = f"{job.state}:{job.reason}:{job.restarts}"
        if said == seen:
            return
        await self.lane.update(observed=said)
        where = f"Slurm job {job.job_id}"
        # Once the old allocation is gone (COMPLETING: its trainer may still write its last lines, which are its
        # attempt's): those lines first, then the new attempt.
        if job.restarts > int(self.lane.data.get("restarts", 0)) and job.state != "COMPLETING":
            await self._mirror()
            await self.lane.update(restarts=job.restarts)
            await self._requeued(f"{where} was requeued by Slurm (restart {job.restarts})")
        if job.is_waiting:
            await self._remote_log(f"{where} is {job.state.lower()}" + (f" ({job.reason})" if job.reason else ""))
            if self._is_queued:
                self._is_queued = False
                await self._transition("preparing", reason=f"{where} is waiting for its allocation")
        elif job.state == "RUNNING":
            await self._remote_log(f"{where} is running" + (f" on {job.nodes}" if job.nodes else ""))
            await self._mark_running(f"{where} is running")

    async def _requeued(self, why: str) -> None:
        """A requeued job (preempted, a node lost) runs again from its last checkpoint: that is a new attempt of
        the run, as a lost trainer's resume is. The steps the old attempt recorded stay its own."""
        h = self.handle
        await self._remote_log(f"{why}; it goes on from its last checkpoint as a new attempt")
        await self._transition("unknown", reason=f"{why}; its trainer was stopped")
        attempt_id = await self.ledger.supersede_attempt(
            self.actor, h.workspace, h.project, h.run_id, f"{why}; the run went on as a new attempt"
        )
        self.handle = dataclasses.replace(h, attempt_id=attempt_id)
        self.metrics.attempt_id = attempt_id  # from the same offset: the new attempt's lines follow the old one's
        self._is_running, self._is_queued = False, True

    async def _remote_log(self, message: str) -> None:
        await self._append("run.remote_log", {"message": message[:2000], "reported_at": ""})

    async def _record_job_end(self, job: JobState | None) -> str:
        """The run's end from the job's: Slurm's verdict where the trainer could not give one (time limit, a lost
        node, a cancel), the trainer's exit code otherwise."""
        await self._add_gpu_seconds(job)
        code = await self.files.exit_code()
        state = job.state if job is not None else "UNKNOWN"
        where = f"Slurm job {self.job_id}"
        # The trainer checkpointed on Slurm's warning (SIGUSR1 ahead of the limit) and exited as if paused.
        warned = code == PAUSE_EXIT and not self._is_pausing and await self.files.has(TIME_LIMIT_MARK)
        if state == "TIMEOUT" or warned:
            limit = f"{where} reached its time limit of {self.cluster.time_limit_min} min"
            if warned:
                limit = (
                    f"{where} was about to reach its time limit of {self.cluster.time_limit_min} min; the trainer "
                    f"saved a checkpoint in {self.cluster.run_dir(self.handle.run_id)} and stopped"
                )
            await self._transition("failed", reason=f"time limit: {limit}", error_summary=f"{limit}.")
            return "failed"
        if state in LOST_STATES:
            await self._transition("failed", reason=f"{where}: {LOST_STATES[state]}", error_summary=LOST_STATES[state])
            return "failed"
        if state == "CANCELLED":  # whatever the trainer managed to say before the job was cancelled
            by = f"stopped by {self.stopped_by}" if self.stopped_by else "cancelled in Slurm (scancel outside BashGym)"
            await self._transition("cancelled", reason=f"{by}; {where} was cancelled")
            return "cancelled"
        if code is None and job is not None and job.exit_code is not None and state != "CANCELLED":
            code = job.exit_code
        if code is None and job is None:
            return await self._unknown(f"Slurm no longer knows {where} and it left no exit code")
        return await self._record_exit(code)

    async def _add_gpu_seconds(self, job: JobState | None) -> None:
        """Add this job's elapsed time times its allocated GPUs to the run's tally (lane.json), once per job."""
        if job is None or job.job_id in self.lane.data.get("charged_jobs", []):
            return
        # AllocTRES names the GPUs Slurm gave the job; a cluster that does not track them as TRES is charged what
        # its registration says a node has.
        gpus = job.gpus or self.cluster.gpus_per_node * int(self.lane.data.get("nodes", 1))
        seconds = int(self.lane.data.get("gpu_seconds", 0)) + job.elapsed_s * gpus
        await self.lane.update(gpu_seconds=seconds, charged_jobs=[*self.lane.data.get("charged_jobs", []), job.job_id])

    async def _collect_outputs(self) -> None:
        await self.files.download_artifacts()
        await self.files.remove()  # everything the policy keeps is home and verified

    async def _transition(self, status: str, *, reason: str, error_summary: str = "") -> None:
        if status not in TERMINAL:
            await super()._transition(status, reason=reason, error_summary=error_summary)
            return
        h = self.handle
        spec = RunTransition(status=status, attempt_id=h.attempt_id, reason=reason, error_summary=error_summary)
        hours = self.measured_gpu_hours()
        await self.ledger.transition_run(
            self.actor, h.workspace, h.project, h.run_id, spec, settle_gpus=self.gpus, gpu_hours=hours
        )

    def measured_gpu_hours(self) -> float:
        """Each of the run's jobs' elapsed time times the GPUs Slurm allocated it, summed (lane.json's tally)."""
        return int(self.lane.data.get("gpu_seconds", 0)) / 3600

    async def pause(self) -> None:
        """The trainer checkpoints and exits (SIGUSR1 to the job's steps); the job ends with it, and resume submits
        a new one from that checkpoint."""
        self._is_pausing = True
        await self._scancel("--signal=USR1")

    async def stop(self) -> None:
        """Cancel the job as Slurm does (`scancel`: SIGTERM to its steps and batch shell, SIGKILL after the
        cluster's KillWait; the trainer saves its state and exits on SIGTERM), then SIGKILL what is left after
        grace_s. Waits until the follower has recorded the end."""
        self._is_stopping = True
        await self._scancel()
        try:
            async with asyncio.timeout(self.grace_s):
                await self._done.wait()
        except TimeoutError:
            await self._scancel("--signal=KILL", "--full")
            await self._done.wait()

    async def _scancel(self, *options: str) -> None:
        job_id = self.job_id
        if job_id is None:
            return
        code, _, err = await self.commands([SCANCEL, *options, job_id])
        if code != 0:
            log.warning("Run %s: scancel %s %s answered %d: %s", self.handle.run_id, options, job_id, code, err)
