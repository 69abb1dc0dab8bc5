"""/project: projects and where their notices go."""

from __future__ import annotations

from typing import Any

import discord
from bashgym.bot.commands.shared import Interaction, call, projects_ac, rows_of
from bashgym.bot.core import (
    Reply,
    answer,
    embed,
    table,
)
from discord import app_commands

# -- /project -----------------------------------------------------------------------------------


class ProjectGroup(app_commands.Group, name="project", description="Projects and where their notices go"):
    @app_commands.command(name="list", description="Projects you can see")
    async def list_(self, interaction: Interaction) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", "/v1/projects")
            rows = rows_of(data, "projects")
            return Reply(embed=embed("Projects", description=table(rows, ["project_id", "name", "created_by"])))

        await answer(interaction, work())

    @app_commands.command(name="context", description="A project at a glance: health, inventory, runs, campaigns")
    @app_commands.describe(project="the project to look at")
    @app_commands.autocomplete(project=projects_ac)
    async def context(self, interaction: Interaction, project: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/context")
            campaigns = rows_of(await call(interaction, "GET", f"/v1/projects/{project}/campaigns"), "campaigns")
            return Reply(embed=context_embed(project, data, campaigns))

        await answer(interaction, work())

    @app_commands.command(name="channel-set", description="Post this project's notices in this channel")
    @app_commands.autocomplete(project=projects_ac)
    async def channel_set(self, interaction: Interaction, project: str) -> None:
        body = {"channel_id": str(interaction.channel_id), "guild_id": str(interaction.guild_id or "")}

        async def work() -> Reply:
            await call(interaction, "PUT", f"/v1/projects/{project}/channel", body=body)
            return Reply(content=f"Notices of project **{project}** will be posted in <#{interaction.channel_id}>.")

        await answer(interaction, work())


# -- what a lead wants at a glance ----------------------------------------------------------------

SIGNALS = {
    "stale_active_runs": "active runs with no news for an hour",
    "failed_runs": "failed runs",
    "completed_without_evaluation": "completed runs never evaluated",
    "terminal_without_artifact": "completed runs without an artifact",
    "incomplete_lineage": "runs not fully identified",
}
CAMPAIGN_ENDS = {"exhausted", "completed", "failed", "cancelled"}


def context_embed(project: str, data: dict[str, Any], campaigns: list[dict[str, Any]]) -> discord.Embed:
    """`/project context`: health signals, inventory counts, the latest runs, aliases, open campaigns and the last
    decisions, each a field of its own."""
    record = data.get("project") or {}
    signals = data.get("signals") or {}
    flagged = [(label, signals[key]) for key, label in SIGNALS.items() if (signals.get(key) or {}).get("ids")]
    made = embed(
        f"Project {record.get('name') or project} ({project})",
        outcome="warning" if flagged else "success",
        description=str(record.get("description") or ""),
    )
    health = [
        f"! {len(s['ids'])}{'+' if s.get('truncated') else ''} {label}: {', '.join(s['ids'][:3])}"
        for label, s in flagged
    ]
    made.add_field(name="Health", value="\n".join(health) or "✔ nothing needs attention", inline=False)
    inventory = data.get("inventory") or {}
    by_status = inventory.get("runs_by_status") or {}
    runs = f"{inventory.get('runs', 0)} runs" + (
        f" ({', '.join(f'{n} {status}' for status, n in sorted(by_status.items()))})" if by_status else ""
    )
    others = [
        f"{n} {name.replace('_', ' ')}"
        for name, n in sorted(inventory.items())
        if isinstance(n, int) and name != "runs"
    ]
    made.add_field(name="Inventory", value=" · ".join([runs, *others]), inline=False)
    recent = (data.get("recent") or {}).get("runs") or []
    made.add_field(name="Latest runs", value=table(recent, ["run_id", "method", "status"], limit=5), inline=False)
    aliases = (data.get("lineage") or {}).get("aliases") or []
    shown = [f"{a['alias']} → {a['model_version_id']}" for a in aliases]
    made.add_field(name="Champion and aliases", value="\n".join(shown) or "no alias yet", inline=True)
    open_campaigns = [f"{c['campaign_id']} ({c['status']})" for c in campaigns if c.get("status") not in CAMPAIGN_ENDS]
    made.add_field(name="Open campaigns", value="\n".join(open_campaigns[:8]) or "none", inline=True)
    decisions = (data.get("recent") or {}).get("decisions") or []
    made.add_field(
        name="Last decisions",
        value="\n".join(f"{d['decision_type']}: {d['outcome']} ({d.get('run_id') or '—'})" for d in decisions[:5])
        or "none yet",
        inline=False,
    )
    return made
