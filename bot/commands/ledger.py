"""/ledger: a project's latest events, a metric's trend across runs, and the ledger's health."""

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

# -- /ledger, /budget, /device, /auth -----------------------------------------------------------


class LedgerGroup(app_commands.Group, name="ledger", description="The experiment ledger"):
    @app_commands.command(name="events", description="A project's latest events")
    @app_commands.autocomplete(project=projects_ac)
    async def events(
        self,
        interaction: Interaction,
        project: str,
        after_cursor: app_commands.Range[int, 0, 2**53 - 1] = 0,
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
