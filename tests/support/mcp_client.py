"""Driving `bashgym mcp` from tests and benchmarks as an agent does: the server as a subprocess on stdio,
the MCP SDK's own client, and a project seeded through the API (a registered run, its metrics, two results on one
suite, a token of each profile)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.factories import suite, tracking_context
from tests.support.helpers import BASHGYM, RunningDaemon, running_daemon

PROJECT = "agents"
# The tools each profile is offered (daemon/authority.py: PROFILES), as `tools/list` must show them.
READ_ONLY = {
    "list_experiment_projects", "get_experiment_context", "get_experiment_run", "validate_training_data",
    "list_runs", "get_run_log", "get_metric_trend", "list_events", "list_evaluations", "show_runcards",
    "promotion_gate", "list_campaigns", "get_campaign", "campaign_doctor", "research_state", "research_wait",
    "budget_show", "list_devices", "doctor", "whoami", "list_external_jobs", "show_external_job",
}  # fmt: skip
RESEARCHER_MORE = {
    "start_training", "plan_training", "pause_run", "resume_run", "run_evaluation", "compare_results",
    "create_runcard", "create_campaign", "campaign_action", "cancel_campaign", "propose_candidate",
    "create_campaign_report", "register_run_model", "create_project", "create_experiment",
    "register_dataset_version", "register_model_version", "tag_entity",
}  # fmt: skip
ADMIN_MORE = {
    "stop_run", "promote_decide", "conclude_campaign", "amend_budget", "preflight_device", "cancel_external_job",
}  # fmt: skip


@contextlib.contextmanager
def seeded_daemon(home: Path) -> Iterator[tuple[RunningDaemon, dict[str, Any]]]:
    """A daemon with a project holding one completed run (registered, not trained), its metrics, two results on
    one suite and a comparison; and a token of each profile."""
    with running_daemon(home) as daemon, daemon.client() as client:
        made: dict[str, Any] = {"tokens": {}}
        context = tracking_context(project_id=PROJECT, project_display_name="Agents")
        run = client.post("/v1/runs", json={"method": "sft", "tracking_context": context}).json()["record"]["run_id"]
        for status in ("running", "completed"):
            client.post(f"/v1/projects/{PROJECT}/runs/{run}/transitions", json={"status": status})
        points = [{"metric": "train.loss", "step": s, "value": 1.0 / (s + 1)} for s in range(0, 40, 10)]
        client.post(
            f"/v1/projects/{PROJECT}/metrics", json={"run_id": run, "attempt_id": f"{run}.a1", "points": points}
        )
        client.post(f"/v1/projects/{PROJECT}/eval-suites", json=suite("agents-suite"))
        results = []
        for run_id, passes in ((None, lambda i: i % 2 == 0), (run, lambda i: i % 4 != 3)):
            per_task = {f"t{i}": {"family": f"f{i % 3}", "pass@1": float(passes(i))} for i in range(12)}
            body = {
                "suite_id": "agents-suite",
                "run_id": run_id,
                "metrics": {"pass@1": 0.5},
                "details": {"per_task": per_task},
            }
            results.append(client.post(f"/v1/projects/{PROJECT}/eval-results", json=body).json()["record"]["result_id"])
        made.update(run=run, results=results)
        for profile in ("viewer", "researcher", "admin"):
            issued = client.post("/v1/auth/tokens", json={"actor_id": f"{profile}-agent", "profile": profile})
            assert issued.status_code == 201, issued.text
            made["tokens"][profile] = issued.json()["token"]
        yield daemon, made


@contextlib.asynccontextmanager
async def session(
    daemon: RunningDaemon, token: str, *, options: tuple[str, ...] = (), **client: Any
) -> AsyncIterator[ClientSession]:
    """`bashgym mcp [options]` started as a coding agent starts it: a subprocess speaking MCP on stdin and stdout."""
    env = {**os.environ, "BASHGYM_HOME": str(daemon.home), "BASHGYM_API": daemon.url, "BASHGYM_TOKEN": token}
    params = StdioServerParameters(command=BASHGYM[0], args=[*BASHGYM[1:], "mcp", *options], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write, **client) as opened:
        await opened.initialize()
        yield opened


async def call(opened: ClientSession, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    """(is_error, the structured answer or the error text)."""
    result = await opened.call_tool(tool, arguments)
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    return result.is_error, (text if result.is_error else result.structured_content)
