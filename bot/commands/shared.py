"""What every slash group shares: the daemon call made for the person who typed, attachments, and the
autocompletes whose choices come from the daemon, filtered to what the user may see."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

import discord
from bashgym.bot.core import (
    Daemon,
)
from bashgym.client.errors import ApiError
from bashgym.client.models import TrainingMethod
from bashgym.client.specs import RunStatus
from discord import app_commands

Interaction = discord.Interaction[Any]
# The choices of the method and status options are the wire contract's own lists, never a copy.
METHODS = TrainingMethod
RUN_STATUSES = RunStatus
MAX_ATTACHMENT_BYTES = 1024 * 1024


def daemon_of(interaction: Interaction) -> Daemon:
    return interaction.client.daemon  # type: ignore[no-any-return]


def call(interaction: Interaction, method: str, path: str, **kw: Any) -> Awaitable[Any]:
    return daemon_of(interaction).call(interaction, method, path, **kw)


def no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; write a finite number")


async def read_json_attachment(attachment: discord.Attachment, what: str) -> Any:
    if attachment.size > MAX_ATTACHMENT_BYTES:
        raise ApiError(413, "too_large", f"The {what} attachment is {attachment.size} bytes; the limit is 1 MiB.")
    raw = await attachment.read()
    try:
        return json.loads(raw, parse_constant=no_constant)
    except ValueError as exc:
        raise ApiError(
            422, "invalid_input", f"The {what} attachment is not valid JSON: {exc}.", "Attach a .json file."
        ) from exc


# -- autocomplete: choices come from the daemon, filtered to what the user may see ----------------


def choices_of(values: list[str], current: str) -> list[app_commands.Choice[str]]:
    matches = [v for v in values if current.lower() in v.lower()]
    return [app_commands.Choice(name=v[:100], value=v[:100]) for v in matches[:25]]


async def listed(interaction: Interaction, path: str, key: str, id_field: str, current: str) -> list[Any]:
    try:
        data = await call(interaction, "GET", path)
    except ApiError:
        return []
    return choices_of([str(r[id_field]) for r in rows_of(data, key) if id_field in r], current)


async def projects_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await listed(interaction, "/v1/projects", "projects", "project_id", current)


def project_of(interaction: Interaction) -> str:
    return str(getattr(interaction.namespace, "project", "") or "unassigned")


async def runs_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await listed(interaction, f"/v1/projects/{project_of(interaction)}/runs", "runs", "run_id", current)


async def campaigns_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    path = f"/v1/projects/{project_of(interaction)}/campaigns"
    return await listed(interaction, path, "campaigns", "campaign_id", current)


async def suites_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    path = f"/v1/projects/{project_of(interaction)}/evaluations"
    return await listed(interaction, path, "suites", "suite_id", current)


async def _lineage(interaction: Interaction, kind: str, id_field: str, current: str) -> list[Any]:
    try:
        data = await call(interaction, "GET", f"/v1/projects/{project_of(interaction)}/context")
    except ApiError:
        return []
    rows = rows_of((data.get("lineage") or {}) if isinstance(data, dict) else {}, kind)
    return choices_of([str(r[id_field]) for r in rows if id_field in r], current)


async def model_versions_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await _lineage(interaction, "model_versions", "model_version_id", current)


async def dataset_versions_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await _lineage(interaction, "dataset_versions", "dataset_version_id", current)


async def results_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    path = f"/v1/projects/{project_of(interaction)}/evaluations"
    return await listed(interaction, path, "results", "result_id", current)


async def devices_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await listed(interaction, "/v1/devices", "devices", "device_id", current)


async def targets_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    devices = [c.value for c in await devices_ac(interaction, "")]
    groups = [c.value for c in await listed(interaction, "/v1/device-groups", "groups", "group_id", "")]
    clusters = [c.value for c in await listed(interaction, "/v1/clusters", "clusters", "cluster_id", "")]
    targets = [
        "local",
        *(f"ssh:{d}" for d in devices),
        *(f"ssh-group:{g}" for g in groups),
        *(f"slurm:{c}" for c in clusters),
        "cloud:nemo-customizer",
    ]
    return choices_of(targets, current)


def rows_of(data: Any, key: str) -> list[dict[str, Any]]:
    """A listing's rows, whether the daemon answers a bare list or an object holding one under `key`."""
    rows = data if isinstance(data, list) else data.get(key, []) if isinstance(data, dict) else []
    return [r for r in rows if isinstance(r, dict)]


def written(data: Any) -> dict[str, Any]:
    record = data.get("record", data) if isinstance(data, dict) else {}
    return dict(record) if isinstance(record, dict) else {}


# -- option descriptions ---------------------------------------------------------------------------

PLACEHOLDER = "…"  # discord.py's description of an option nobody described
# One line per option name, shared by every command that takes it; a command's own wording goes first.
OPTION_HELP: dict[str, str] = {
    "project": "the project (choices: the projects you can see)",
    "run": "a run of the project (choices: its recent runs)",
    "campaign": "a campaign of the project (choices: its campaigns)",
    "suite": "an evaluation suite of the project (default: the shipped bash-tasks-v1)",
    "status": "only runs in this state",
    "lines": "how many of the log's last lines to show (1-500)",
    "metric": "a metric name, e.g. train.loss or pass@1",
    "model_version": "a registered model version of the project",
    "gold": "evaluate the suite's own gold solutions (a sanity check of the suite)",
    "limit_tasks": "a quick look at N tasks (a partial suite, never the suite's evidence)",
    "samples": "samples per task: n of pass@k (1-64)",
    "baseline": "the baseline's evaluation result id (choices: the project's results)",
    "candidate": "the candidate's evaluation result id (choices: the project's results)",
    "claim_tier": "how far the evidence reaches (default: what it supports)",
    "decision": "the decision the card records",
    "alias": "the model alias to move (default: champion)",
    "override_reason": "why to promote past the gate's blockers (needs promotion.override)",
    "spec": "the campaign spec as a JSON attachment",
    "variable": "the recipe field the next iteration changes",
    "value": "its new value (JSON)",
    "rationale": "why this change is worth a run",
    "cron": "five cron fields: minute hour day-of-month month day-of-week, e.g. 0 9 * * 1",
    "timezone": "the schedule's time zone (default UTC)",
    "after_cursor": "show events after this cursor (0: the newest)",
    "limit": "how many events to show (1-200)",
    "reason": "why (recorded with the amendment)",
    "runs": "runs to add (negative: to take away)",
    "gpu_hours": "GPU-hours to add (negative: to take away)",
    "device": "a registered SSH device (choices: the devices you can see)",
}


def describe_options(group: app_commands.Group) -> app_commands.Group:
    """Give every option still carrying discord.py's placeholder its line from OPTION_HELP."""
    for command in group.walk_commands():
        if isinstance(command, app_commands.Command):
            for name, parameter in command._params.items():  # discord.py keeps the options it syncs here
                if str(parameter.description) == PLACEHOLDER and name in OPTION_HELP:
                    parameter.description = OPTION_HELP[name]
    return group
