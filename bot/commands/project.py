"""/project: projects and where their notices go."""

from __future__ import annotations

from bashgym.bot.commands.shared import Interaction, call, projects_ac, rows_of
from bashgym.bot.core import (
    Reply,
    answer,
    embed,
    fields_embed,
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

    @app_commands.command(name="context", description="A project's models, data, experiments and recent runs")
    @app_commands.autocomplete(project=projects_ac)
    async def context(self, interaction: Interaction, project: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/context")
            keys = [k for k, v in data.items() if not isinstance(v, dict | list)]
            made = fields_embed(f"Project {project}", data, keys)
            for key, value in data.items():
                if isinstance(value, list):
                    made.add_field(name=key, value=f"{len(value)} entries", inline=True)
            return Reply(embed=made)

        await answer(interaction, work())

    @app_commands.command(name="channel-set", description="Post this project's notices in this channel")
    @app_commands.autocomplete(project=projects_ac)
    async def channel_set(self, interaction: Interaction, project: str) -> None:
        body = {"channel_id": str(interaction.channel_id), "guild_id": str(interaction.guild_id or "")}

        async def work() -> Reply:
            await call(interaction, "PUT", f"/v1/projects/{project}/channel", body=body)
            return Reply(content=f"Notices of project **{project}** will be posted in <#{interaction.channel_id}>.")

        await answer(interaction, work())
