"""The Hugging Face Jobs half of tests/support/hub_standin.py: job records, the hardware list, the two ways a job
moves (scripted by the test, or executed as a local process) and the two server-sent event streams.

Facts relied on, read from huggingface_hub 2.4.0 (hf_api.py, _jobs_api.py):
- `run_job` posts `{command, arguments: [], environment, flavor, dockerImage | spaceId}` to /api/jobs/{namespace},
  with `secrets`, `timeoutSeconds` (the client turns "5m" into 300), `labels` (always holding a "name" label: the
  client derives one from the image and command when none is given) and `attempts` only when set. It parses the
  answer as JobInfo: camelCase `id, createdAt, startedAt, finishedAt, dockerImage, spaceId, command, arguments,
  environment, secrets, flavor, labels, status {stage, message}, owner {id, name, type}, initiator`. JobInfo has no
  timeout field: the stand-in echoes `timeoutSeconds`, and the client drops it.
- `list_jobs` sends `stage=<STAGE>` and `label=<key>=<value>` query parameters (repeated) and follows `Link` pages;
  the stand-in filters on both and answers one page.
- `fetch_job_logs` reads /logs as server-sent events, each line `data: {"data": <line>, "timestamp": <iso>}`, and
  drops lines starting "===== Job started" (the Hub's banner, which the stand-in writes when a job starts running).
  `tail=N` starts at the last N lines. With follow=False the client reads until the stream ends, a read waits 5 s,
  or an event is stamped after the answer's Date + 1 s. With follow=True it reads until the stream ends, then asks
  the job's stage: if terminal it stops, else it waits 2 s (then longer), asks again (stopping if terminal by then)
  and reconnects, skipping as many lines as it already yielded. The Hub keeps a running job's stream open (a
  `: keep-alive` comment every 30 s) and ends it when the job ends, so the client sees every line.
- `fetch_job_metrics` reads /metrics, events `event: metric` / `data: {sample}`, with no history (the first event is
  the current sample; the Hub sends one a second); follow=False keeps only that first one; a finished job answers
  406, which the client takes as "no metrics".
- `cancel_job` posts /api/jobs/{namespace}/{id}/cancel and ignores the body; `list_jobs_hardware` reads
  /api/jobs/hardware as a list of `{name, prettyName, cpu, ram, ephemeralStorage, accelerator {type, model,
  quantity, vram, manufacturer} | null, unitCostMicroUSD, unitCostUSD, unitLabel}`.

Where the stand-in is not the Hub: the logs stream is the Hub's (open until the job ends), so a no-follow read of a
job that is still scheduling or running waits out the client's 5 s. `idle_close_s` ends a stream after that long
without a new line instead: no-follow reads get fast, but a follow=True reader then misses the lines a job writes
between the client's stage check and its end. A metrics stream without a new sample ends after `idle_close_s`, or
1 s (the Hub's sample period) without it, and a following reader gets the current sample again when it reconnects.
`secrets` is answered as `{name: null}`: names only, never values. The hardware prices are illustrative.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets as _secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

STAGES = ("SCHEDULING", "RUNNING", "COMPLETED", "ERROR", "CANCELED", "DELETED")
TERMINAL = ("COMPLETED", "ERROR", "CANCELED", "DELETED")
JOB_MODES = ("scripted", "execute")
STARTED_BANNER = "===== Job started"
# What a job's process inherits from the test process; everything else it gets from its spec.
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "USER", "LOGNAME")
CANCEL_GRACE_S = 3.0  # SIGTERM, then SIGKILL for a process group still alive after this
KEEPALIVE_S = 30.0  # as the Hub; it must stay above the client's 5 s no-follow read timeout
METRICS_PERIOD_S = 1.0


def now_iso() -> str:
    """The Hub's timestamp shape, which huggingface_hub's parse_datetime requires: 2025-07-22T16:06:25.079Z."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def hardware(
    name: str,
    pretty_name: str,
    cpu: str,
    ram: str,
    cost_micro_usd: int,
    accelerator: tuple[str, int, str] | None = None,
    *,
    storage: str = "50 GB",
) -> dict[str, Any]:
    """One entry of /api/jobs/hardware; `accelerator` is (model, quantity, total vram), all Nvidia GPUs."""
    gpu = None
    if accelerator is not None:
        model, quantity, vram = accelerator
        gpu = {"type": "gpu", "model": model, "quantity": str(quantity), "vram": vram, "manufacturer": "Nvidia"}
    return {
        "name": name,
        "prettyName": pretty_name,
        "cpu": cpu,
        "ram": ram,
        "ephemeralStorage": storage,
        "accelerator": gpu,
        "unitCostMicroUSD": cost_micro_usd,
        "unitCostUSD": cost_micro_usd / 1_000_000,
        "unitLabel": "minute",
    }


def default_hardware() -> list[dict[str, Any]]:
    """A fresh copy of the default flavors (per-minute prices illustrative, shaped like the Hub's)."""
    return [
        hardware("cpu-basic", "CPU Basic", "2 vCPU", "16 GB", 167, storage="20 GB"),
        hardware("cpu-upgrade", "CPU Upgrade", "8 vCPU", "32 GB", 500),
        hardware("t4-small", "Nvidia T4 - small", "4 vCPU", "15 GB", 6667, ("T4", 1, "16 GB")),
        hardware("a10g-small", "Nvidia A10G - small", "4 vCPU", "15 GB", 16667, ("A10G", 1, "24 GB")),
        hardware("a10g-large", "Nvidia A10G - large", "12 vCPU", "46 GB", 25000, ("A10G", 1, "24 GB")),
        hardware("a100-large", "Nvidia A100 - large", "12 vCPU", "142 GB", 41667, ("A100", 1, "80 GB")),
        hardware("h200", "Nvidia H200", "23 vCPU", "256 GB", 83333, ("H200", 1, "141 GB")),
        hardware("h200x2", "2x Nvidia H200", "46 vCPU", "512 GB", 166667, ("H200", 2, "282 GB")),
    ]


@dataclass
class JobRecord:
    """One job as the stand-in keeps it. `spec` is the body run_job posted, secrets included (the answers never
    carry secret values, so a test can check both sides); `events` are the log lines as the /logs stream sends
    them; `metrics` the samples /metrics sends."""

    id: str
    namespace: str
    spec: dict[str, Any]
    owner: dict[str, str]
    initiator: dict[str, str]
    mode: str
    created_at: str
    stage: str = "SCHEDULING"
    message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    events: list[dict[str, str]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    process: subprocess.Popen[str] | None = field(default=None, repr=False)
    stop_requested: bool = False

    @property
    def logs(self) -> list[str]:
        """The lines the job wrote, without the Hub's start banner (the client leaves it out too)."""
        return [e["data"] for e in self.events if not e["data"].startswith(STARTED_BANNER)]

    @property
    def argv(self) -> list[str]:
        return [*(self.spec.get("command") or []), *(self.spec.get("arguments") or [])]

    def to_json(self) -> dict[str, Any]:
        """The Hub's JobInfo shape; secret values are left out (names only)."""
        spec = self.spec
        body: dict[str, Any] = {
            "id": self.id,
            "createdAt": self.created_at,
            "command": spec.get("command"),
            "arguments": spec.get("arguments", []),
            "environment": spec.get("environment", {}),
            "secrets": dict.fromkeys(spec.get("secrets") or {}),
            "flavor": spec.get("flavor"),
            "labels": spec.get("labels"),
            "status": {"stage": self.stage, "message": self.message},
            "owner": self.owner,
            "initiator": self.initiator,
        }
        body["spaceId" if "spaceId" in spec else "dockerImage"] = spec.get("spaceId") or spec.get("dockerImage")
        for key, value in (("startedAt", self.started_at), ("finishedAt", self.finished_at)):
            if value is not None:
                body[key] = value
        for key in ("timeoutSeconds", "attempts", "volumes"):
            if key in spec:
                body[key] = spec[key]
        return body


def check_spec(spec: Any, flavors: Iterable[str]) -> str | None:
    """What is wrong with a posted job spec, or None."""
    if not isinstance(spec, dict):
        return "the body must be a JSON object"
    command = spec.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        return "command must be a non-empty list of strings"
    arguments = spec.get("arguments", [])
    if not isinstance(arguments, list) or not all(isinstance(a, str) for a in arguments):
        return "arguments must be a list of strings"
    if not (spec.get("dockerImage") or spec.get("spaceId")):
        return "dockerImage or spaceId is required"
    for key in ("environment", "secrets", "labels"):
        if not isinstance(spec.get(key, {}), dict):
            return f"{key} must be an object"
    if spec.get("flavor") not in set(flavors):
        return f"Invalid flavor {spec.get('flavor')!r}"
    timeout = spec.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or timeout <= 0):
        return "timeoutSeconds must be a positive integer"
    return None


class HubJobs:
    """The jobs the stand-in holds and moves. In "scripted" mode a job stays where `advance` puts it; in "execute"
    mode the stand-in's way of running a container is to run the job's command + arguments as a local process (the
    image is recorded, never pulled) in a fresh temporary directory, with an environment built from the spec (see
    `_environment`); its stdout and stderr lines become the job's logs as they arrive."""

    def __init__(
        self,
        jobs: dict[str, JobRecord],
        changed: threading.Condition,
        *,
        mode: str = "scripted",
        hardware: list[dict[str, Any]] | None = None,
        idle_close_s: float | None = None,
    ) -> None:
        self.jobs = jobs
        self.changed = changed
        self.mode = checked_mode(mode)
        self.hardware = default_hardware() if hardware is None else hardware
        self.idle_close_s = idle_close_s
        self.endpoint = ""  # the stand-in's URL, told to executed jobs as HF_ENDPOINT
        self.closing = False
        self._threads: list[threading.Thread] = []

    # -- the routes' work ------------------------------------------------------------------------------------------

    def create(self, namespace: str, spec: dict[str, Any], owner_type: str, initiator: str) -> JobRecord:
        job = JobRecord(
            id=_secrets.token_hex(12),
            namespace=namespace,
            spec=spec,
            owner={"id": _object_id(namespace), "name": namespace, "type": owner_type},
            initiator={"type": "user", "id": _object_id(initiator), "name": initiator},
            mode=self.mode,
            created_at=now_iso(),
        )
        with self.changed:
            self.jobs[job.id] = job
        if job.mode == "execute":
            runner = threading.Thread(target=self._execute, args=(job,), name=f"hub-job-{job.id[:8]}", daemon=True)
            self._threads.append(runner)
            runner.start()
        return job

    def find(self, namespace: str, job_id: str) -> JobRecord | None:
        with self.changed:
            job = self.jobs.get(job_id)
        return job if job is not None and job.namespace == namespace else None

    def listing(self, namespace: str, stages: Sequence[str], labels: Sequence[str]) -> list[dict[str, Any]]:
        wanted = [tuple(label.split("=", 1)) for label in labels if "=" in label]
        with self.changed:
            jobs = [j for j in self.jobs.values() if j.namespace == namespace]
            return [
                j.to_json()
                for j in jobs
                if (not stages or j.stage in stages)
                and all((j.spec.get("labels") or {}).get(key) == value for key, value in wanted)
            ]

    def cancel(self, job: JobRecord) -> None:
        """CANCELED at once, as the Hub answers; an executing process group gets SIGTERM, then SIGKILL."""
        with self.changed:
            if job.stage in TERMINAL:
                return
            self._set_stage(job, "CANCELED", None)
        self._stop(job)

    def _stop(self, job: JobRecord) -> None:
        """Stop a job's process, if it has a live one, in the background: SIGTERM, then SIGKILL after a grace."""
        with self.changed:
            job.stop_requested = True
            process = job.process
        if process is not None and process.returncode is None:
            stopper = threading.Thread(target=_stop_group, args=(process, CANCEL_GRACE_S), daemon=True)
            self._threads.append(stopper)
            stopper.start()

    def advance(
        self,
        job_id: str,
        stage: str | None = None,
        *,
        logs: Iterable[str] = (),
        metrics: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        message: str | None = None,
    ) -> JobRecord:
        """Append log lines and metric samples, then move the job to `stage` (with `message`) if given. A terminal
        stage given to an executing job also stops its process (its stage stays the one given)."""
        if stage is not None and stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        samples = [metrics] if isinstance(metrics, Mapping) else list(metrics or [])
        with self.changed:
            job = self.jobs[job_id]
            if stage == "RUNNING" and job.started_at is None:
                self._set_stage(job, "RUNNING", message)
            for line in logs:
                job.events.append({"data": line, "timestamp": now_iso()})
            job.metrics.extend(dict(sample) for sample in samples)
            if stage is not None and (stage != job.stage or message is not None):
                self._set_stage(job, stage, message)
            self.changed.notify_all()
        if stage in TERMINAL:
            self._stop(job)  # an executing job told it is over stops running
        return job

    # -- server-sent events ----------------------------------------------------------------------------------------

    def stream_logs(self, job: JobRecord, tail: int | None, write: Callable[[bytes], None]) -> None:
        """Replay the job's lines (the last `tail` of them), then new ones as they come, until the job is over."""
        with self.changed:
            start = max(0, len(job.events) - tail) if tail is not None else 0
        self._stream(job, job.events, start, write, _log_event, self.idle_close_s)

    def stream_metrics(self, job: JobRecord, write: Callable[[bytes], None]) -> None:
        """The current sample first (no history), then new ones, until the job is over."""
        with self.changed:
            start = max(0, len(job.metrics) - 1)
        self._stream(job, job.metrics, start, write, _metric_event, self.idle_close_s or METRICS_PERIOD_S)

    def _stream(
        self,
        job: JobRecord,
        items: list[Any],
        sent: int,
        write: Callable[[bytes], None],
        encode: Callable[[Any], bytes],
        idle_close_s: float | None,
    ) -> None:
        """Send items[sent:] and every later one until the job is over (or the stand-in closes), a keep-alive comment
        after KEEPALIVE_S of quiet; with idle_close_s, end after that long without a new item instead."""
        last_news = time.monotonic()
        while True:
            with self.changed:
                while True:
                    batch = items[sent:]
                    over = job.stage in TERMINAL or self.closing
                    quiet = time.monotonic() - last_news
                    if batch or over:
                        break
                    if idle_close_s is not None and quiet >= idle_close_s:
                        return
                    if quiet >= KEEPALIVE_S:
                        break
                    self.changed.wait(min(idle_close_s or KEEPALIVE_S, KEEPALIVE_S) - quiet)
            for item in batch:
                write(encode(item))
            if not batch and not over:
                write(b": keep-alive\n\n")  # also finds out a reader that went away
            sent += len(batch)
            if over:
                return
            last_news = time.monotonic()

    # -- execute mode ------------------------------------------------------------------------------------------------

    def _environment(self, job: JobRecord, workdir: str) -> dict[str, str]:
        """The test process's PATH/HOME/locale/TMPDIR only, PATH led by this Python's directory (so `python` is the
        test venv's), then the job's environment and secrets, then the stand-in's endpoint (HF_ENDPOINT, Xet off).
        PYTHONUNBUFFERED=1 (which the spec may override) makes a Python job's lines arrive as it prints them;
        HF_HOME points into the job's directory so a job never reads the developer's cached token or cache."""
        env = {key: os.environ[key] for key in PASSED_ENV if key in os.environ}
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
        env["PYTHONUNBUFFERED"] = "1"
        env["HF_HOME"] = os.path.join(workdir, ".hf-home")
        for source in (job.spec.get("environment") or {}, job.spec.get("secrets") or {}):
            env.update({str(k): str(v) for k, v in source.items() if v is not None})
        env["HF_ENDPOINT"] = self.endpoint
        env["HF_HUB_DISABLE_XET"] = "1"
        return env

    def _execute(self, job: JobRecord) -> None:
        workdir = tempfile.mkdtemp(prefix=f"hub-job-{job.id[:8]}-")
        try:
            self._run_process(job, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run_process(self, job: JobRecord, workdir: str) -> None:
        try:
            process = subprocess.Popen(
                job.argv,
                cwd=workdir,
                env=self._environment(job, workdir),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,  # its own process group, so cancel and exit stop its children too
            )
        except OSError as exc:
            with self.changed:
                if job.stage not in TERMINAL:
                    self._set_stage(job, "ERROR", f"could not start {job.argv[0]!r}: {exc}")
            return
        with self.changed:
            job.process = process
            stopped = job.stop_requested or self.closing
            if not stopped:
                self._set_stage(job, "RUNNING", None)
        if stopped:
            _stop_group(process, 0)
        assert process.stdout is not None
        reader = threading.Thread(target=self._read_lines, args=(job, process.stdout), daemon=True)
        reader.start()
        timeout = job.spec.get("timeoutSeconds")
        timed_out = False
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop_group(process, 0)
            code = process.wait()
        reader.join()
        process.stdout.close()
        with self.changed:
            job.returncode = code
            if job.stage in TERMINAL:
                return  # canceled while it ran
            if timed_out:
                self._set_stage(job, "ERROR", f"Job timed out after {timeout} seconds")
            elif self.closing:
                self._set_stage(job, "ERROR", "stopped: the stand-in closed")
            elif code == 0:
                self._set_stage(job, "COMPLETED", None)
            else:
                self._set_stage(job, "ERROR", _exit_message(code))

    def _read_lines(self, job: JobRecord, stream: Iterable[str]) -> None:
        for line in stream:
            with self.changed:
                job.events.append({"data": line.rstrip("\r\n"), "timestamp": now_iso()})
                self.changed.notify_all()

    # -- shared --------------------------------------------------------------------------------------------------------

    def _set_stage(self, job: JobRecord, stage: str, message: str | None) -> None:
        """Call holding `changed`. RUNNING writes the Hub's start banner; a terminal stage stamps finishedAt."""
        if stage == "RUNNING" and job.started_at is None:
            job.started_at = now_iso()
            job.events.append({"data": f"{STARTED_BANNER} at {job.started_at} =====", "timestamp": job.started_at})
        if stage in TERMINAL and job.finished_at is None:
            job.finished_at = now_iso()
        job.stage = stage
        job.message = message
        self.changed.notify_all()

    def close(self) -> None:
        """End every stream and kill every job process (whole groups), then wait for the runners."""
        with self.changed:
            self.closing = True
            processes = [job.process for job in self.jobs.values() if job.process and job.process.returncode is None]
            self.changed.notify_all()
        for process in processes:
            _stop_group(process, 0)
        for thread in self._threads:
            thread.join(timeout=10)


def checked_mode(mode: str) -> str:
    if mode not in JOB_MODES:
        raise ValueError(f"job_mode must be one of {JOB_MODES}, got {mode!r}")
    return mode


def _log_event(event: dict[str, str]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _metric_event(sample: dict[str, Any]) -> bytes:
    return b"event: metric\ndata: " + json.dumps(sample).encode() + b"\n\n"


def _object_id(name: str) -> str:
    """A stable 24-hex id for a user or org, shaped like the Hub's."""
    return (name.encode().hex() + "0" * 24)[:24]


def _exit_message(code: int) -> str:
    if code < 0:
        return f"Job failed: killed by signal {-code}"
    return f"Job failed with exit code: {code}"


def _stop_group(process: subprocess.Popen[str], grace_s: float) -> None:
    """SIGTERM the process's group (SIGKILL when grace_s is 0), SIGKILL it if still alive after grace_s."""
    first = signal.SIGTERM if grace_s > 0 else signal.SIGKILL
    _signal_group(process, first)
    if grace_s > 0:
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)


def _signal_group(process: subprocess.Popen[str], sig: int) -> None:
    # The group start_new_session made: its id is the leader's pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def daemon_env(hub_url: str, *, write: str, job: str, image: str, poll_s: float) -> dict[str, str]:
    """A daemon's settings for Hugging Face Jobs against the stand-in at `hub_url`: the operator's write and job
    tokens, namespace `acme` for writing and reading, one allowed image, and the poll interval."""
    return {
        "HF_TOKEN": write,
        "HF_JOB_TOKEN": job,
        "BASHGYM_HF_ENDPOINT": hub_url,
        "BASHGYM_HF_NAMESPACES": "acme",
        "BASHGYM_HF_READ_NAMESPACES": "acme",
        "BASHGYM_HF_JOB_IMAGES": image,
        "BASHGYM_EXTERNAL_POLL_S": str(poll_s),
    }
