"""/jobs: external jobs (Hugging Face Jobs, managed provider fine-tunes), listed, shown, followed and cancelled for
the person who typed. A job's request (its tracking context) is never shown: ids, states, flavor, upstream id,
destination, result and reason are."""

from __future__ import annotations

import asyncio
from typing import Any

from bashgym.bot.commands.shared import Interaction, call, listed, projects_ac, rows_of
from bashgym.bot.core import (
    Authority,
    Reply,
    answer,
    confirm_first,
    embed,
    error_reply,
    fields_embed,
    send,
    show,
    table,
)
from bashgym.client.errors import ApiError
from bashgym.client.external import ENDED_STATES, ExternalState
from discord import app_commands

# The state option's choices are the wire contract's own list, never a copy.
JOB_STATES = ExternalState
# How long /jobs cancel keeps its answer open for the job's end: the daemon learns it at its next poll upstream.
CANCEL_WAIT_S = 120
LISTED = 25
LOG_LINES = 15
LOG_CHARS = 1500
LATEST_SHOWN = 5
MAX_PAGES = 40  # observation pages of 500 read to reach the newest; a job with more shows the newest of these
JOB_KEYS = [
    "job_id", "project_id", "run_id", "surface", "provider", "upstream_job_id", "state", "upstream_state",
    "compute", "flavor", "timeout_s", "cost_ceiling_usd", "destination", "result", "reason", "cancel_requested_by",
    "created_by", "created_at",
]  # fmt: skip
OUTCOMES = {"completed": "success", "failed": "failure", "cancelled": "warning", "unknown": "warning"}


async def jobs_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await listed(interaction, "/v1/jobs", "jobs", "job_id", current)


async def fetch_job(interaction: Interaction, job: str, project: str | None) -> dict[str, Any]:
    """The job as the daemon shows it to this person; without `project`, found among the jobs they may read."""
    if not project:
        listing = await call(interaction, "GET", "/v1/jobs", params={"limit": 500})
        found = next((row for row in rows_of(listing, "jobs") if row.get("job_id") == job), None)
        if found is None:
            raise ApiError(
                404, "not_found", f"No external job {job!r} among the jobs you may read.", "See them with /jobs list."
            )
        project = str(found["project_id"])
    return dict(await call(interaction, "GET", f"/v1/projects/{project}/jobs/{job}"))


def result_text(result: Any) -> str:
    """What a job made: the Hub repo at its commit, or the provider's model."""
    if not isinstance(result, dict):
        return show(result)
    if result.get("repo") and result.get("commit"):
        return f"{result['repo']}@{result['commit']}"
    if result.get("fine_tuned_model"):
        return str(result["fine_tuned_model"])
    return show(result)


def compute_text(job: dict[str, Any]) -> str:
    if job.get("compute_started"):
        return "started (log or metric evidence seen)"
    return "not yet (no log or metric seen)"


def shown(job: dict[str, Any]) -> dict[str, Any]:
    """The job's fields a person reads: never its request, lineage or receipt bodies."""
    return {**job, "compute": compute_text(job), "result": result_text(job["result"]) if job.get("result") else None}


def outcome_of(job: dict[str, Any]) -> str:
    return OUTCOMES.get(str(job.get("state")), "info")


async def fetch_observations(interaction: Interaction, job: dict[str, Any]) -> list[dict[str, Any]]:
    """Every observation of the job, oldest first, up to MAX_PAGES pages (the API pages from the oldest)."""
    path = f"/v1/projects/{job['project_id']}/jobs/{job['job_id']}/observations"
    found: list[dict[str, Any]] = []
    after = 0
    for _ in range(MAX_PAGES):
        page = await call(interaction, "GET", path, params={"after": after, "limit": 500})
        items = rows_of(page, "observations")
        if not items:
            break
        found = (found + items)[-1000:]
        after = int(page["next_after"])
    return found


def log_tail(observations: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for item in observations:
        if item.get("kind") == "log":
            lines += [str(line) for line in (item.get("data") or {}).get("lines") or [item.get("message", "")]]
    # A line holding ``` would end the code block early.
    text = "\n".join(lines[-LOG_LINES:]).replace("```", "'''")[-LOG_CHARS:]
    return f"```\n{text}\n```" if text else "(no log lines yet)"


def latest(observations: list[dict[str, Any]]) -> str:
    others = [item for item in observations if item.get("kind") != "log"][-LATEST_SHOWN:]
    return "\n".join(f"[{item['kind']}] {item.get('message') or item.get('upstream_state') or ''}" for item in others)


class JobsGroup(app_commands.Group, name="jobs", description="External jobs: Hugging Face Jobs, provider fine-tunes"):
    @app_commands.command(name="list", description="External jobs of the projects you may read, newest first")
    @app_commands.describe(project="only this project's jobs", state="only jobs in this state")
    @app_commands.autocomplete(project=projects_ac)
    async def list_(
        self, interaction: Interaction, project: str | None = None, state: JOB_STATES | None = None
    ) -> None:
        async def work() -> Reply:
            params = {"project": project, "state": state, "limit": LISTED}
            rows = rows_of(await call(interaction, "GET", "/v1/jobs", params=params), "jobs")
            columns = ["job_id", "project_id", "surface", "state", "upstream_job_id"]
            return Reply(embed=embed("External jobs", description=table(rows, columns)))

        await answer(interaction, work())

    @app_commands.command(name="show", description="One external job: upstream id, state, result, reason")
    @app_commands.describe(
        job="an external job id, ext-... (choices: the jobs you may read)",
        project="its project (found from the job when left out)",
    )
    @app_commands.autocomplete(job=jobs_ac, project=projects_ac)
    async def show_(self, interaction: Interaction, job: str, project: str | None = None) -> None:
        async def work() -> Reply:
            found = await fetch_job(interaction, job, project)
            title = f"External job {job}: {found['state']}"
            return Reply(embed=fields_embed(title, shown(found), JOB_KEYS, outcome=outcome_of(found)))

        await answer(interaction, work())

    @app_commands.command(name="follow", description="A job's latest observations: state, compute, last log lines")
    @app_commands.describe(
        job="an external job id, ext-... (choices: the jobs you may read)",
        project="its project (found from the job when left out)",
    )
    @app_commands.autocomplete(job=jobs_ac, project=projects_ac)
    async def follow(self, interaction: Interaction, job: str, project: str | None = None) -> None:
        async def work() -> Reply:
            found = await fetch_job(interaction, job, project)
            observations = await fetch_observations(interaction, found)
            keys = ["state", "upstream_state", "compute", "upstream_job_id", "reason", "latest"]
            data = {**shown(found), "latest": latest(observations)}
            title = f"External job {job}: {found['state']}"
            made = fields_embed(title, data, keys, outcome=outcome_of(found), description=log_tail(observations))
            made.set_footer(text="A view of now; ask again for what follows (bashgym jobs follow streams it).")
            return Reply(embed=made)

        await answer(interaction, work())

    @app_commands.command(name="cancel", description="Cancel an external job upstream (asks to confirm)")
    @app_commands.describe(
        job="an external job id, ext-... (choices: the jobs you may read)",
        project="its project (found from the job when left out)",
    )
    @app_commands.autocomplete(job=jobs_ac, project=projects_ac)
    async def cancel(self, interaction: Interaction, job: str, project: str | None = None) -> None:
        try:
            found = await fetch_job(interaction, job, project)
        except ApiError as exc:
            await send(interaction, error_reply(exc))
            return
        path = f"/v1/projects/{found['project_id']}/jobs/{job}"

        async def ended() -> Reply:
            data = found
            for _ in range(CANCEL_WAIT_S):  # the daemon learns the upstream's answer at its next poll
                data = dict(await call(interaction, "GET", path))
                if data.get("state") in ENDED_STATES:
                    break
                await asyncio.sleep(1.0)
            is_ended = data.get("state") in ENDED_STATES
            title = f"External job {job} {data.get('state')}" if is_ended else f"External job {job}: still cancelling"
            keys = ["job_id", "state", "upstream_state", "cancel_requested_by", "reason"]
            return Reply(embed=fields_embed(title, data, keys, outcome=outcome_of(data)))

        async def act() -> Reply:
            await call(interaction, "POST", f"{path}/cancel")
            return Reply(content=f"Cancelling external job {job}…", then=ended)

        upstream = found.get("upstream_job_id") or "no upstream id yet"
        where = found.get("provider") or found.get("surface")
        summary = embed(
            f"Cancel external job {job}?",
            outcome="warning",
            description=f"Project {found['project_id']}, run {found['run_id']}. {where} is asked to cancel "
            f"{upstream}; the run ends cancelled.",
        )
        authority = Authority("training.stop", str(found["project_id"]), str(found["run_id"]))
        await confirm_first(interaction, summary, act, authority=authority)
