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
from bashgym.client.render import key_metric_text, project_glance
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


def context_embed(project: str, data: dict[str, Any], campaigns: list[dict[str, Any]]) -> discord.Embed:
    """`/project context`: the glance `bashgym ledger context` prints too, one embed field per part."""
    glance = project_glance(project, data, campaigns)
    made = embed(
        f"Project {glance.name} ({glance.project_id})",
        outcome="success" if glance.healthy else "warning",
        description=glance.description,
    )
    health = [f"! {s.label} ({s.count}): {', '.join(s.ids[:3])}" for s in glance.signals]
    made.add_field(name="Health", value="\n".join(health) or "✔ nothing needs attention", inline=False)
    made.add_field(name="Inventory", value=glance.inventory, inline=False)
    runs = [{**run, "key metric": key_metric_text(run)} for run in glance.runs]
    made.add_field(
        name="Latest runs", value=table(runs, ["run_id", "method", "status", "key metric"], limit=5), inline=False
    )
    shown = [f"{alias} → {version}" for alias, version in glance.aliases]
    made.add_field(name="Champion and aliases", value="\n".join(shown) or "no alias yet", inline=True)
    open_campaigns = [f"{c['campaign_id']} ({c['status']})" for c in glance.open_campaigns]
    made.add_field(name="Open campaigns", value="\n".join(open_campaigns[:8]) or "none", inline=True)
    made.add_field(
        name="Last decisions",
        value="\n".join(
            f"{d['decision_type']}: {d['outcome']} ({d.get('run_id') or '—'})" for d in glance.decisions[:5]
        )
        or "none yet",
        inline=False,
    )
    return made
