"""/auth: your authority in BashGym."""

from __future__ import annotations

from bashgym.bot.commands.shared import Interaction, call
from bashgym.bot.core import (
    Reply,
    answer,
    fields_embed,
)
from discord import app_commands


class AuthGroup(app_commands.Group, name="auth", description="Your authority in BashGym"):
    @app_commands.command(name="whoami", description="Who BashGym thinks you are, and what you may do")
    async def whoami(self, interaction: Interaction) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", "/v1/auth/whoami")
            made = fields_embed("You", data, ["actor_id", "credential_kind", "workspace_id"])
            made.add_field(name="capabilities", value=", ".join(data.get("capabilities", [])) or "none", inline=False)
            return Reply(embed=made, ephemeral=True)

        await answer(interaction, work(), ephemeral=True)
