"""A launched dstack plan followed and stopped through the dstack server's REST API, as the project the launch used.

The launch goes through dstack's own client (engines.py) with the project `~/.dstack/config.yml` names as default;
the job records that project's name and the run's name, and the follower asks the same server, with the same
token, read from the same file at each start (a token is never stored in the ledger).

Relied on (dstack 0.22.5, dstack/_internal/server/routers/runs.py and logs.py, schemas/runs.py and logs.py,
core/models/runs.py and logs.py): `POST /api/project/{project}/runs/get` {run_name} -> Run {status,
status_message, termination_reason, latest_job_submission {id}, error}; `POST .../runs/stop` {runs_names, abort};
`POST /api/project/{project}/logs/poll` {run_name, job_submission_id, start_time?, next_token?, limit<=1000} ->
{logs: [{timestamp, log_source, message (base64)}], next_token}; `Authorization: Bearer TOKEN`.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bashgym.daemon.external.hf_jobs import UpstreamError
from bashgym.daemon.external.upstreams import Look, StoreOutputs
from bashgym.daemon.lanes import on_first_use

if TYPE_CHECKING:
    import httpx
else:
    httpx = on_first_use("httpx")  # ~0.15 s: loaded when the first dstack run is asked about, not at start-up

# RunStatus in our words. TERMINATED is a stop (stopped or aborted by a user: cancelled); TERMINATING still holds
# compute. DONE: every job ended well.
STATES = {
    "pending": "submitted",
    "submitted": "submitted",
    "provisioning": "submitted",
    "running": "running",
    "terminating": "running",
    "terminated": "cancelled",
    "failed": "failed",
    "done": "completed",
}
_LOG_PAGE = 1000


def dstack_project(home: Path, name: str | None = None) -> dict[str, str] | None:
    """The project `name` (or the default one) of `<home>/.dstack/config.yml`: {name, url, token}, or None."""
    import yaml

    try:
        projects = (yaml.safe_load((home / ".dstack" / "config.yml").read_text()) or {}).get("projects") or []
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    valid = [p for p in projects if isinstance(p, dict) and {"name", "url", "token"} <= p.keys()]
    if name is not None:
        valid = [p for p in valid if p["name"] == name]
    chosen = next((p for p in valid if p.get("default")), valid[0] if valid else None)
    return {key: str(chosen[key]) for key in ("name", "url", "token")} if chosen else None


class DstackRuns:
    """One dstack project's runs, asked over its REST API."""

    def __init__(self, project: dict[str, str]) -> None:
        self.project = project["name"]
        self.base = project["url"].rstrip("/")
        self._headers = {"Authorization": f"Bearer {project['token']}"}

    async def _post(self, route: str, body: dict[str, Any]) -> Any:
        url = f"{self.base}/api/project/{self.project}/{route}"
        try:
            async with httpx.AsyncClient(timeout=30.0) as client:
                response = await client.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"dstack server {self.base} could not be asked {route}: {exc}") from exc
        if response.status_code >= 400:
            status = response.status_code
            detail = response.text[:300]
            raise UpstreamError(f"dstack server {self.base} answered {status} to {route}: {detail}", status)
        return response.json() if response.content else None

    async def get(self, run_name: str) -> dict[str, Any]:
        return dict(await self._post("runs/get", {"run_name": run_name}))

    async def stop(self, run_name: str) -> None:
        await self._post("runs/stop", {"runs_names": [run_name], "abort": False})

    async def new_logs(self, run_name: str, submission_id: str, seen: dict[str, Any]) -> list[str]:
        """Log lines after the last one read (its timestamp kept in `seen`; dstack's start_time is exclusive and
        its runner gives each line its own timestamp), oldest first, every page of them."""
        lines: list[str] = []
        token = None
        while True:
            body: dict[str, Any] = {"run_name": run_name, "job_submission_id": submission_id, "limit": _LOG_PAGE}
            if seen.get("dstack_after"):
                body["start_time"] = seen["dstack_after"]
            if token:
                body["next_token"] = token
            page = await self._post("logs/poll", body)
            for event in page.get("logs") or []:
                lines.extend(_decoded(str(event.get("message", ""))).splitlines())
                seen["dstack_after"] = event.get("timestamp")
            token = page.get("next_token")
            if not token:
                return lines


def _decoded(message: str) -> str:
    try:
        return base64.b64decode(message, validate=True).decode(errors="replace")
    except (binascii.Error, ValueError):
        return message


class DstackUpstream:
    """A launched dstack plan: the run's status, its log lines, its metrics from the checkpoint volume's mount."""

    def __init__(self, home: Path, outputs: StoreOutputs) -> None:
        self.home = home
        self.outputs = outputs

    def runs(self, job: dict[str, Any]) -> DstackRuns:
        project_name = str(job["lineage"].get("engine_project", ""))
        project = dstack_project(self.home, project_name)
        if project is None:
            raise UpstreamError(
                f"dstack project {project_name!r} is no longer in {self.home / '.dstack' / 'config.yml'}; add it "
                "again (dstack project add) so its run can be followed",
                403,
            )
        return DstackRuns(project)

    async def find(self, job: dict[str, Any]) -> dict[str, Any] | None:
        name = str(job["lineage"].get("engine_name", ""))
        try:
            run = await self.runs(job).get(name)
        except UpstreamError as exc:
            if exc.status in {400, 404}:
                return None
            raise
        return {"id": name, "run_id": str(run.get("id", ""))}

    async def look(self, job: dict[str, Any], seen: dict[str, Any]) -> Look:
        runs = self.runs(job)
        run = await runs.get(job["upstream_job_id"])
        status = str(run.get("status") or "")
        state = STATES.get(status, "unknown")
        if status == "terminated" and run.get("termination_reason") not in {"stopped_by_user", "aborted_by_user"}:
            state = "failed"  # terminated by the server, not by a stop
        submission = (run.get("latest_job_submission") or {}).get("id")
        new = await runs.new_logs(job["upstream_job_id"], str(submission), seen) if submission else []
        if not seen.get("dstack_reading"):  # a follower after a restart reads from the start: skip what is on record
            seen["dstack_reading"] = True
            new = new[int(seen.get("logs_through", 0)) :]
        through = int(seen.get("logs_through", 0)) + len(new)
        metrics = await self.outputs.new_metrics(job, seen) if state in {"running", "completed"} else []
        message = str(run.get("error") or run.get("status_message") or run.get("termination_reason") or "")
        return Look(
            state,
            status,
            message,
            new_logs=new,
            logs_through=through,
            metrics=metrics,
            result={"cost_usd": run.get("cost"), "termination_reason": run.get("termination_reason")},
        )

    async def cancel(self, job: dict[str, Any]) -> None:
        await self.runs(job).stop(job["upstream_job_id"])
