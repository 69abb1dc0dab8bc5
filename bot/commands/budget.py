"""/budget: a project's (or a campaign's) GPU-hour and run budget, and amending it (confirmed first)."""

from __future__ import annotations

from bashgym.bot.commands.shared import Interaction, call, campaigns_ac, projects_ac
from bashgym.bot.core import (
    Authority,
    Reply,
    answer,
    confirm_first,
    embed,
    fields_embed,
)
from discord import app_commands


def _scope(campaign: str | None) -> str:
    return f"campaign-{campaign}" if campaign else "project"


class BudgetGroup(app_commands.Group, name="budget", description="GPU-hour and run budgets"):
    @app_commands.command(name="show", description="A project's (or a campaign's) budget")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def show_(self, interaction: Interaction, project: str, campaign: str | None = None) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/budget", params={"scope": _scope(campaign)})
            keys = ["scope", "limit", "amended", "reserved", "settled", "remaining"]
            return Reply(embed=fields_embed(f"Budget of {project}", data, keys))

        await answer(interaction, work())

    @app_commands.command(name="amend", description="Add (or remove) budget (budget.amend; asks to confirm)")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def amend(
        self,
        interaction: Interaction,
        project: str,
        reason: str,
        runs: app_commands.Range[int, -100_000, 100_000] = 0,
        gpu_hours: app_commands.Range[float, -1_000_000.0, 1_000_000.0] = 0.0,
        campaign: str | None = None,
    ) -> None:
        body = {"runs": runs, "gpu_hours": gpu_hours, "reason": reason, "scope": _scope(campaign)}

        async def act() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/budget/amend", body=body)
            keys = ["scope", "limit", "amended", "reserved", "settled", "remaining"]
            return Reply(embed=fields_embed("Budget amended", data, keys))

        summary = embed(
            f"Amend the budget of {_scope(campaign)}?",
            outcome="warning",
            description=f"{runs:+d} runs, {gpu_hours:+.2f} GPU-hours in project {project}: {reason}",
        )
        await confirm_first(interaction, summary, act, authority=Authority("budget.amend", project))
