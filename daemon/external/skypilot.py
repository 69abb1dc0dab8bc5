"""SkyPilot from its own environment: the operator's `sky` executable, run with argument lists (never a shell).

SkyPilot's pins conflict with ours, so it is not imported here: the operator names its `sky` (settings
`skypilot_bin`) and, optionally, the API server it talks to (`skypilot_api_url`, passed as SkyPilot's own
SKYPILOT_API_SERVER_ENDPOINT). A plan is checked with `sky launch --dryrun` (SkyPilot's validation and optimizer),
launched as a managed job, followed through `sky jobs queue -o json` and `sky jobs logs --no-follow`, and cancelled
with `sky jobs cancel -y`. Secret values travel in the child's environment only (`--secret NAME` reads them there).

Relied on (skypilot 0.14.1, sky/client/cli/command.py, sky/jobs/state.py, sky/schemas/api/responses.py): `sky jobs
launch -n NAME -y -d --env K=V --secret NAME FILE` prints `Managed Job ID: N`; `sky jobs queue -o json` prints a
list of ManagedJobRecord (`job_id`, `job_name`, `status`, `failure_reason`, `job_duration`, ...); the statuses of
ManagedJobStatus below; `sky launch --dryrun` checks a task without running it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bashgym.daemon.external.hf_jobs import UpstreamError
from bashgym.daemon.external.upstreams import Look, StoreOutputs

# ManagedJobStatus in our words. RECOVERING (preempted, relaunching) and CANCELLING still hold compute: running.
STATES = {
    "PENDING": "submitted",
    "SUBMITTED": "submitted",
    "STARTING": "submitted",
    "RUNNING": "running",
    "RECOVERING": "running",
    "WINDING_DOWN": "running",
    "CANCELLING": "running",
    "SUCCEEDED": "completed",
    "CANCELLED": "cancelled",
    "FAILED": "failed",
    "FAILED_SETUP": "failed",
    "FAILED_PRECHECKS": "failed",
    "FAILED_NO_RESOURCE": "failed",
    "FAILED_CONTROLLER": "failed",
}
_JOB_ID = re.compile(r"Managed Job ID: (\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
CALL_TIMEOUT_S = 600.0  # a launch waits for the controller to take the job; a look is far quicker


class SkyCli:
    """The operator's `sky`, asked with argument lists; each failure an UpstreamError naming the command."""

    def __init__(self, executable: str, api_url: str, environ: Mapping[str, str]) -> None:
        self.executable = executable
        # Only what `sky` needs to find itself and its config: never the daemon's own secrets.
        self._env = {key: environ[key] for key in ("PATH", "HOME", "LANG", "TMPDIR") if key in environ}
        if api_url:
            self._env["SKYPILOT_API_SERVER_ENDPOINT"] = api_url

    async def run(self, args: list[str], *, cwd: Path | None = None, secrets: Mapping[str, str] | None = None) -> str:
        argv = [self.executable, *args]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env={**self._env, **(secrets or {})},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
        except OSError as exc:
            raise UpstreamError(f"SkyPilot's `sky` ({self.executable}) could not be started: {exc}", 503) from exc
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                out, _ = await proc.communicate()
        except TimeoutError:
            proc.kill()  # a hung `sky` must not hold the follower for good; the next look asks again
            await proc.wait()
            raise UpstreamError(f"`{' '.join(argv)}` did not answer in {CALL_TIMEOUT_S:g} s") from None
        text = _ANSI.sub("", out.decode(errors="replace"))
        if proc.returncode != 0:
            tail = " | ".join(text.strip().splitlines()[-5:])[:1000]
            raise UpstreamError(f"`{' '.join(argv)}` exited {proc.returncode}: {tail}")
        return text

    async def validate(self, plan_path: Path, name: str, secrets: Mapping[str, str]) -> dict[str, Any]:
        """SkyPilot's own check of the plan: `sky launch --dryrun` (nothing is provisioned)."""
        args = ["launch", "--dryrun", "-y", "-c", name, *_secret_args(secrets), plan_path.name]
        try:
            await self.run(args, cwd=plan_path.parent, secrets=secrets)
        except UpstreamError as exc:
            return {"checked": True, "valid": False, "library": f"sky ({self.executable})", "reason": exc.message}
        return {"checked": True, "valid": True, "library": f"sky ({self.executable})", "reason": "sky launch --dryrun"}

    async def launch(self, plan_path: Path, name: str, env: Mapping[str, str], secrets: Mapping[str, str]) -> str:
        """Submit the plan as a managed job; its id."""
        envs = [part for key, value in env.items() for part in ("--env", f"{key}={value}")]
        args = ["jobs", "launch", "-n", name, "-y", "-d", *envs, *_secret_args(secrets), plan_path.name]
        text = await self.run(args, cwd=plan_path.parent, secrets=secrets)
        found = _JOB_ID.findall(text)
        if not found:
            raise UpstreamError(f"`sky jobs launch` answered without a managed job id: {text.strip()[-300:]}", 502)
        return str(found[-1])

    async def queue(self) -> list[dict[str, Any]]:
        text = await self.run(["jobs", "queue", "--all", "-o", "json"])
        try:
            records = json.loads(text[text.index("[") :])
        except ValueError as exc:
            raise UpstreamError(f"`sky jobs queue -o json` did not answer JSON: {text.strip()[:300]}") from exc
        return [record for record in records if isinstance(record, dict)]

    async def record(self, job_id: str) -> dict[str, Any]:
        for record in await self.queue():
            if str(record.get("job_id")) == job_id:
                return record
        raise UpstreamError(f"SkyPilot's managed job queue has no job {job_id}", 404)

    async def logs(self, job_id: str) -> list[str]:
        return (await self.run(["jobs", "logs", "--no-follow", job_id])).splitlines()

    async def cancel(self, job_id: str) -> None:
        await self.run(["jobs", "cancel", "-y", job_id])


def _secret_args(secrets: Mapping[str, str]) -> list[str]:
    """`--secret NAME`: SkyPilot reads the value from the environment, so it is never in an argument."""
    return [part for name in secrets for part in ("--secret", name)]


class SkyUpstream:
    """A launched SkyPilot plan, a managed job: its status, its log lines, its metrics from the checkpoint store."""

    def __init__(self, cli: SkyCli, outputs: StoreOutputs) -> None:
        self.cli = cli
        self.outputs = outputs

    async def find(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """The managed job launched under this plan's name for this job, if the launch reached SkyPilot."""
        name = str(job["lineage"].get("engine_name", ""))
        named = [record for record in await self.cli.queue() if record.get("job_name") == name]
        return {"id": str(named[-1]["job_id"]), "name": name} if named else None

    async def look(self, job: dict[str, Any], seen: dict[str, Any]) -> Look:
        record = await self.cli.record(job["upstream_job_id"])
        status = str(record.get("status") or "")
        lines = await self.cli.logs(job["upstream_job_id"]) if status not in {"PENDING", "STARTING"} else []
        through = int(seen.get("logs_through", 0))
        metrics = await self.outputs.new_metrics(job, seen) if STATES.get(status) in {"running", "completed"} else []
        return Look(
            STATES.get(status, "unknown"),
            status,
            str(record.get("failure_reason") or ""),
            new_logs=lines[through:],
            logs_through=max(through, len(lines)),
            metrics=metrics,
            all_logs=lines,
            result={"job_duration_s": record.get("job_duration"), "recovery_count": record.get("recovery_count")},
        )

    async def cancel(self, job: dict[str, Any]) -> None:
        await self.cli.cancel(job["upstream_job_id"])
