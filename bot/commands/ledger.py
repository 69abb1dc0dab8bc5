"""/ledger and /budget: the experiment ledger and its budgets."""

from __future__ import annotations

from bashgym.bot.commands.shared import Interaction, call, campaigns_ac, projects_ac, rows_of
from bashgym.bot.core import (
    Authority,
    Reply,
    answer,
    confirm_first,
    embed,
    fields_embed,
    table,
)
from discord import app_commands

# -- /ledger, /budget, /device, /auth -----------------------------------------------------------


class LedgerGroup(app_commands.Group, name="ledger", description="The experiment ledger"):
    @app_commands.command(name="events", description="A project's latest events")
    @app_commands.autocomplete(project=projects_ac)
    async def events(
        self,
        interaction: Interaction,
        project: str,
        after_cursor: app_commands.Range[int, 0] = 0,
        limit: app_commands.Range[int, 1, 200] = 15,
    ) -> None:
        async def work() -> Reply:
            params = {"after_cursor": after_cursor, "limit": min(limit, 100)}
            data = await call(interaction, "GET", f"/v1/projects/{project}/events", params=params)
            rows = rows_of(data, "events")
            return Reply(
                embed=embed(
                    f"Events of {project}", description=table(rows, ["cursor", "event_type", "actor"], limit=limit)
                )
            )

        await answer(interaction, work())

    @app_commands.command(name="trend", description="Each run's latest value of a metric in a project")
    @app_commands.autocomplete(project=projects_ac)
    async def trend(self, interaction: Interaction, project: str, metric: str = "train.loss") -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/trend", params={"metric": metric})
            rows = data.get("runs") or data.get("points") or []
            return Reply(
                embed=embed(
                    f"{metric} across {project}", description=table(rows, list(rows[0]) if rows else ["run_id"])
                )
            )

        await answer(interaction, work())

    @app_commands.command(name="health", description="Is the ledger healthy?")
    async def health(self, interaction: Interaction) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", "/v1/ledger/health")
            outcome = "success" if data.get("status") == "ok" else "failure"
            keys = ["status", "journal_mode", "synchronous", "last_cursor", "size_bytes"]
            return Reply(embed=fields_embed("Ledger health", data, keys, outcome=outcome))

        await answer(interaction, work())


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
