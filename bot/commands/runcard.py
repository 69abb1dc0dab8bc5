"""/runcard: a run's newest RunCard, freezing a run's evidence into one, and what a card lacks."""

from __future__ import annotations

from typing import Literal

from bashgym.bot.commands.shared import (
    Interaction,
    call,
    projects_ac,
    rows_of,
    runs_ac,
    written,
)
from bashgym.bot.core import (
    Reply,
    answer,
    embed,
    fields_embed,
    table,
)
from discord import app_commands


class RunCardGroup(app_commands.Group, name="runcard", description="RunCards: a run's evidence, frozen"):
    @app_commands.command(name="show", description="A run's newest RunCard")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def show_(self, interaction: Interaction, project: str, run: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/runs/{run}/runcards")
            cards = rows_of(data, "runcards")
            if not cards:
                return Reply(content=f"Run {run} has no RunCard yet; create one with /runcard create.", ephemeral=True)
            card = cards[0]
            return Reply(
                embed=fields_embed(f"RunCard of {run}", card, ["card_id", "claim_tier", "decision", "created_by"])
            )

        await answer(interaction, work())

    @app_commands.command(name="create", description="Freeze a run's evidence into a RunCard (runcard.write)")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def create(
        self,
        interaction: Interaction,
        project: str,
        run: str,
        claim_tier: Literal["local_smoke", "narrow", "broad"] | None = None,
        decision: Literal["pending", "hold", "promote", "reject"] = "pending",
    ) -> None:
        body: dict[str, str] = {"decision": decision}
        if claim_tier:  # left out, the daemon gives the tier the evidence supports
            body["claim_tier"] = claim_tier

        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/runs/{run}/runcards", body=body)
            return Reply(embed=fields_embed("RunCard created", written(data), ["card_id", "run_id", "claim_tier"]))

        await answer(interaction, work())

    @app_commands.command(name="validate", description="What a run's RunCard lacks")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def validate(self, interaction: Interaction, project: str, run: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/runs/{run}/runcards/validate")
            rows = data.get("findings", [])
            outcome = "success" if data.get("ok") else "failure"
            return Reply(
                embed=embed(
                    f"RunCard check of {run}", outcome=outcome, description=table(rows, ["code", "severity", "message"])
                )
            )

        await answer(interaction, work())
