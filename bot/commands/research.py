"""/research: where a campaign stands, in one call (phase, incumbent, latest decision, budget, next action)."""

from __future__ import annotations

from bashgym.bot.commands.shared import (
    Interaction,
    call,
    campaigns_ac,
    projects_ac,
)
from bashgym.bot.core import (
    Reply,
    answer,
    fields_embed,
)
from discord import app_commands


class ResearchGroup(app_commands.Group, name="research", description="Where a campaign stands"):
    @app_commands.command(name="state", description="Phase, incumbent, latest decision, budget, next action")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def state(self, interaction: Interaction, project: str, campaign: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/campaigns/{campaign}/state")
            keys = [k for k, v in data.items() if not isinstance(v, list)]
            return Reply(embed=fields_embed(f"Research state: {campaign}", data, keys))

        await answer(interaction, work())
