"""The Slurm lane's pure parts: a registered cluster, the one batch script of a run, and what `scontrol`, `squeue`
and `sacct` answer, read into job states. No I/O here: daemon/lanes/slurm.py runs the commands."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

# The Slurm client commands the lane runs, by these fixed names: nothing in a request or a cluster names a program.
SBATCH, SQUEUE, SACCT, SCONTROL, SCANCEL = "sbatch", "squeue", "sacct", "scontrol", "scancel"
SINFO, SACCTMGR = "sinfo", "sacctmgr"  # `bashgym doctor` asks these (daemon/lanes/slurm_doctor.py)

# Slurm job states (squeue/sacct/scontrol JobState) in which the job still holds, or waits for, its allocation.
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "SUSPENDED",
    }
)
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"})
# Ends the trainer cannot report itself: the allocation was taken away under it.
LOST_STATES = {
    "NODE_FAIL": "a node of the job failed",
    "OUT_OF_MEMORY": "the job ran out of memory",
    "BOOT_FAIL": "the job's nodes failed to boot",
    "DEADLINE": "the job reached its deadline",
    "PREEMPTED": "the job was preempted and not requeued",
    "REVOKED": "the job was revoked",
}
MAIN_PORT_BASE = 29500  # accelerate's rendezvous on the first node: base + job id % 1000, so two jobs never share one


@dataclass(frozen=True)
class Cluster:
    """A registered Slurm cluster (ledger/clusters.py), as the lane uses it."""

    cluster_id: str
    access: str
    login_device_id: str | None
    partition: str
    account: str | None
    qos: str | None
    gpu_type: str | None
    gpus_per_node: int
    max_nodes: int
    time_limit_min: int
    shared_dir: str
    python: str

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Cluster:
        return cls(**{name: record[name] for name in cls.__dataclass_fields__})

    def run_dir(self, run_id: str) -> str:
        return f"{self.shared_dir.rstrip('/')}/{run_id}"


def job_name(run_id: str) -> str:
    return f"bashgym-{run_id}"


def job_comment(run_id: str, attempt_id: str, submission: int) -> str:
    """The job's comment: which run, attempt and submission it is, so a daemon that lost the job id finds it."""
    return f"bashgym:{run_id}:{attempt_id}:{submission}"


def signal_grace_s(time_limit_min: int) -> int:
    """How long before its time limit the job's trainer is asked to checkpoint (SIGUSR1): a quarter of the limit,
    between 10 s and 5 minutes."""
    return max(10, min(300, time_limit_min * 60 // 4))


def sbatch_options(cluster: Cluster, *, run_id: str, attempt_id: str, submission: int, nodes: int) -> list[str]:
    """The #SBATCH lines: one job per run, named and commented after it, with the cluster's honest time limit."""
    run_dir = cluster.run_dir(run_id)
    options = [
        f"--job-name={job_name(run_id)}",
        f"--comment={job_comment(run_id, attempt_id, submission)}",
        f"--partition={cluster.partition}",
        *([f"--account={cluster.account}"] if cluster.account else []),
        *([f"--qos={cluster.qos}"] if cluster.qos else []),
        f"--time={cluster.time_limit_min}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        *_gpu_options(cluster),
        f"--chdir={run_dir}",
        f"--output={run_dir}/training.log",
        "--open-mode=append",
        f"--signal=B:USR1@{signal_grace_s(cluster.time_limit_min)}",
        "--requeue",
    ]
    return options


def _gpu_options(cluster: Cluster) -> list[str]:
    if cluster.gpus_per_node == 0:
        return []
    kind = f"{cluster.gpu_type}:" if cluster.gpu_type else ""
    return [f"--gpus-per-node={kind}{cluster.gpus_per_node}"]


def render_script(
    cluster: Cluster, *, run_id: str, attempt_id: str, submission: int, nodes: int, distributed: bool, resume: bool
) -> str:
    """The run's one batch script. It runs the trainer as a job step (srun), forwards Slurm's time-limit warning
    (SIGUSR1 to the batch shell) to it so it checkpoints, and records the trainer's exit code beside its files.
    A requeued job (preempted, or a node failed) starts again from its last checkpoint. No secret appears in it."""
    run_dir = cluster.run_dir(run_id)
    started = f"started-{submission}"
    header = "\n".join(
        f"#SBATCH {option}"
        for option in sbatch_options(cluster, run_id=run_id, attempt_id=attempt_id, submission=submission, nodes=nodes)
    )
    step = _multi_node_step(cluster, run_dir) if nodes > 1 else _one_node_step(cluster, run_dir, distributed)
    return f"""#!/bin/bash
{header}
# BashGym run {run_id}, attempt {attempt_id}, submission {submission}. One job per run; rerun by hand with
# `sbatch {run_dir}/job.sbatch`.
set -u
cd {shlex.quote(run_dir)} || exit 1
rm -f exit_code
resume={"--resume" if resume else '""'}
# Requeued (preempted, a node lost): this submission ran here before, so it goes on from its last checkpoint.
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ] || [ -e {started} ]; then resume=--resume; fi
touch {started}
# Slurm sends SIGTERM before a preemption, a requeue and the time limit as well as on scancel: the trainer
# checkpoints and keeps its checkpoints; Slurm's verdict on the job says how the run ended.
export BASHGYM_TERM_PAUSES=1
step=""
warned() {{ date +%s > time_limit_warned; [ -n "$step" ] && kill -USR1 "$step"; }}
trap warned USR1
{step} &
step=$!
wait "$step"; code=$?
while kill -0 "$step" 2>/dev/null; do wait "$step"; code=$?; done  # a trapped signal interrupts wait
echo "$code" > exit_code.tmp && mv exit_code.tmp exit_code
exit "$code"
"""


def _one_node_step(cluster: Cluster, run_dir: str, distributed: bool) -> str:
    module = "bashgym.trainers.launch" if distributed else "bashgym.trainers"
    python, where = shlex.quote(cluster.python), shlex.quote(run_dir)
    return (
        f"srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 {python} -u -m {module} {where} $resume "
        ">> protocol.jsonl 2>> training.log < /dev/null"
    )


def _multi_node_step(cluster: Cluster, run_dir: str) -> str:
    """One launcher per node through `accelerate launch` (bashgym.trainers.launch): node 0 in the run directory,
    node k in machine-k/ of it (each its own config, protocol and exit code on the shared filesystem), meeting at
    the first node of the allocation."""
    python, where = shlex.quote(cluster.python), shlex.quote(run_dir)
    per_node = (
        f'd={where}; [ "$SLURM_NODEID" = 0 ] || d={where}/machine-$SLURM_NODEID; mkdir -p "$d"; '
        f'for f in request.json dataset.jsonl eval_dataset.jsonl; do [ "$d" = {where} ] || [ ! -e {where}/$f ] '
        f'|| ln -sf {where}/$f "$d/$f"; done; cd "$d" && exec {python} -u -m bashgym.trainers.launch "$d" ${{1:-}} '
        '--machine-rank "$SLURM_NODEID" --main-address "$MAIN" --main-port "$PORT" '
        '>> "$d/protocol.jsonl" 2>> "$d/training.log" < /dev/null'
    )
    return (
        'MAIN=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) '
        f"PORT=$(({MAIN_PORT_BASE} + SLURM_JOB_ID % 1000)) "
        f'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 --export=ALL,MAIN,PORT '
        f"bash -c {shlex.quote(per_node)} node $resume"
    )


@dataclass(frozen=True)
class JobState:
    """One look at a job: its state, why it waits, its exit code, time it ran, GPUs allocated, restarts."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    elapsed_s: int = 0
    gpus: int = 0
    restarts: int = 0
    nodes: str = ""

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_waiting(self) -> bool:
        return self.state in WAITING_STATES


_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?$")


def parse_duration_s(text: str) -> int:
    """Slurm's [D-][HH:]MM:SS (Elapsed, RunTime) in seconds; 0 for what it is not."""
    match = _DURATION.match(text.strip())
    if match is None:
        return 0
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def tres_gpus(tres: str) -> int:
    """GPUs in a TRES list (`cpu=4,mem=16G,node=1,gres/gpu=2` or `gres/gpu:a100=2`); the typed entry repeats the
    untyped one, so the untyped count wins where both are listed."""
    untyped, typed = 0, 0
    for entry in tres.split(","):
        key, _, value = entry.partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            untyped = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return untyped or typed


def parse_exit_code(text: str) -> int | None:
    """`ExitCode=2:0` (code:signal): the code, or 128 + the signal that killed it."""
    code, _, signal = text.strip().partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(code)


def parse_scontrol(text: str) -> JobState | None:
    """`scontrol show job -o ID`: one line of Key=Value pairs (values without spaces, but Reason's and
    Comment's may hold some, so a pair ends where the next `Key=` begins)."""
    fields = dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(.*?)(?=\s[A-Za-z/:]+=|$)", text.strip()))
    if "JobId" not in fields or "JobState" not in fields:
        return None
    reason = fields.get("Reason", "")
    return JobState(
        job_id=fields["JobId"],
        state=fields["JobState"].split()[0],
        reason="" if reason in {"None", "(null)"} else reason,
        exit_code=parse_exit_code(fields.get("ExitCode", "")),
        elapsed_s=parse_duration_s(fields.get("RunTime", "")),
        gpus=tres_gpus(fields.get("AllocTRES") or fields.get("TRES", "")),
        restarts=int(fields["Restarts"]) if fields.get("Restarts", "").isdigit() else 0,
        nodes=fields.get("NodeList", "") if fields.get("NodeList") != "(null)" else "",
    )


SACCT_FORMAT = "JobID,State,Reason,ExitCode,Elapsed,AllocTRES,Restarts,NodeList"


def parse_sacct(text: str, job_id: str) -> JobState | None:
    """`sacct -X -n -P -j ID --format=SACCT_FORMAT`: the allocation's line (its steps are left out with -X). A
    CANCELLED state reads `CANCELLED by 1000`."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 8 or parts[0] != job_id:
            continue
        _, state, reason, exit_code, elapsed, tres, restarts, nodes = parts
        return JobState(
            job_id=job_id,
            state=state.split()[0] if state else "UNKNOWN",
            reason="" if reason in {"None", ""} else reason,
            exit_code=parse_exit_code(exit_code),
            elapsed_s=parse_duration_s(elapsed),
            gpus=tres_gpus(tres),
            restarts=int(restarts) if restarts.isdigit() else 0,
            nodes="" if nodes in {"None assigned", ""} else nodes,
        )
    return None


def parse_found_jobs(text: str, comment_prefix: str) -> list[str]:
    """`squeue --noheader --format=%i|%k`: ids of the jobs whose comment starts with this run's prefix."""
    found = []
    for line in text.splitlines():
        job_id, _, comment = line.strip().partition("|")
        if job_id.isdigit() and comment.startswith(comment_prefix):
            found.append(job_id)
    return found


def parse_submitted(text: str) -> str | None:
    """`sbatch --parsable`: `ID` or `ID;CLUSTER`."""
    job_id = text.strip().split(";")[0]
    return job_id if job_id.isdigit() else None


def slurm_plan(record: dict[str, Any], *, run_id: str, nodes: int) -> dict[str, Any]:
    """What `training plan` shows of a Slurm launch: the cluster, where the run directory goes, the job's options."""
    cluster = Cluster.from_record(record)
    return {
        "cluster_id": cluster.cluster_id,
        "access": cluster.access,
        "login_device_id": cluster.login_device_id,
        "run_dir": cluster.run_dir(run_id),
        "python": cluster.python,
        "nodes": nodes,
        "sbatch": sbatch_options(cluster, run_id=run_id, attempt_id=f"{run_id}.a1", submission=1, nodes=nodes),
    }
