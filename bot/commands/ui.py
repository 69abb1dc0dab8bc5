"""/ui: a private, one-time link that signs the person who asks in to the web view, as themselves."""

from __future__ import annotations

from bashgym.bot.commands.shared import Interaction, call
from bashgym.bot.core import Reply, answer, embed
from discord import app_commands


@app_commands.command(name="ui", description="A private one-time link to the web view, signed in as you")
async def ui(interaction: Interaction) -> None:
    async def work() -> Reply:
        link = await call(interaction, "POST", "/v1/ui/links")
        seconds = int(link["expires_in_s"])
        text = (
            f"{link['url']}\n\nGood once, for {seconds} s: it signs your browser in with your own grants. "
            "Do not share it."
        )
        return Reply(embed=embed("Web view", description=text), ephemeral=True)

    await answer(interaction, work(), ephemeral=True)
