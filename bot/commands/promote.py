"""/promote: the promotion gate's verdict on a run, and the decision that moves an alias (confirmed first)."""

from __future__ import annotations

from typing import Any

import discord
from bashgym.bot.commands.shared import (
    Interaction,
    call,
    projects_ac,
    runs_ac,
)
from bashgym.bot.core import (
    Authority,
    Reply,
    answer,
    confirm_first,
    embed,
    fields_embed,
)
from discord import app_commands


def gate_embed(run: str, verdict: dict[str, Any]) -> discord.Embed:
    if verdict.get("ship"):
        return embed(f"Promotion gate for {run}: ship", outcome="success", description="Every required check holds.")
    lines = [
        f"• **{b['code']}**: {b.get('message', '')} → {b.get('next_action', '')}" for b in verdict.get("blockers", [])
    ]
    return embed(f"Promotion gate for {run}: blocked", outcome="failure", description="\n".join(lines))


class PromoteGroup(app_commands.Group, name="promote", description="The promotion gate and decisions"):
    @app_commands.command(name="gate", description="Would this run ship? The blockers and what to do next")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def gate(self, interaction: Interaction, project: str, run: str) -> None:
        async def work() -> Reply:
            return Reply(
                embed=gate_embed(run, await call(interaction, "GET", f"/v1/projects/{project}/runs/{run}/gate"))
            )

        await answer(interaction, work())

    @app_commands.command(name="decide", description="Promote a run that passes the gate (asks to confirm)")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def decide(
        self,
        interaction: Interaction,
        project: str,
        run: str,
        alias: str = "champion",
        override_reason: str | None = None,
    ) -> None:
        body = {"alias": alias, "override_reason": override_reason}

        async def act() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/runs/{run}/promote", body=body)
            decision = data.get("decision", {})
            return Reply(
                embed=fields_embed(
                    f"Promoted {run} to {alias}", decision, ["decision_id", "outcome", "rationale"], outcome="success"
                )
            )

        note = f"Moves alias **{alias}** of project {project} to this run's model."
        if override_reason:
            note += f" Overrides the gate: {override_reason}"
        summary = embed(f"Promote run {run}?", outcome="warning", description=note)
        needed = [Authority("promotion.decide", project)]
        if override_reason:  # an override needs its own, explicitly granted right: asked before the prompt too
            needed.append(Authority("promotion.override", project))
        await confirm_first(interaction, summary, act, authority=needed)
