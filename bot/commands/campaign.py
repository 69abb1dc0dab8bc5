"""/campaign: create, validate, start, pause, resume, cancel, conclude and report research campaigns."""

from __future__ import annotations

import json
from typing import Any

import discord
from bashgym.bot.commands.shared import (
    Interaction,
    call,
    campaigns_ac,
    projects_ac,
    read_json_attachment,
    rows_of,
    written,
)
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

# -- /campaign and /research --------------------------------------------------------------------


CAMPAIGN_KEYS = ["campaign_id", "status", "version", "incumbent_iteration_id", "status_reason", "created_by"]


def cascade_stages(iterations: list[dict[str, Any]]) -> str:
    """A cascade's stages in order (decision, run, RunCard), then the blockers of a stage the gate blocked."""
    stages = [
        {
            "stage": f"{it['number']}. {it['primary_variable']}",
            "decision": it.get("decision") or it.get("stage"),
            "run": it.get("run_id") or "-",
            "runcard": str(it.get("card_id") or "-")[:16],
        }
        for it in iterations
        if it.get("kind") == "stage"
    ]
    text = table(stages, ["stage", "decision", "run", "runcard"])
    for it in iterations:
        for blocker in it.get("blockers") or []:
            text += f"\nblocker of {it['primary_variable']}: {blocker['code']}: {blocker['message']}"
    return text


async def _campaign_act(interaction: Interaction, project: str, campaign: str, action: str) -> Reply:
    """A lifecycle action at the campaign's current version (read first: the daemon refuses stale ones)."""
    base = f"/v1/projects/{project}/campaigns/{campaign}"
    current = await call(interaction, "GET", base)
    body = {"expected_version": current["version"]}
    data = await call(interaction, "POST", f"{base}/{action}", body=body)
    record = data.get("campaign", data) if action == "validate" else written(data)
    reply = Reply(embed=fields_embed(f"Campaign {campaign}: {action}", record, CAMPAIGN_KEYS))
    if action == "validate" and not data.get("ok", True):
        reply.embed = embed(
            f"Campaign {campaign} is not ready",
            outcome="failure",
            description=table(data.get("findings", []), ["code", "message", "next_action"]),
        )
    return reply


def _campaign_action(action: str, help_text: str, *, confirm: bool = False) -> Any:
    """One lifecycle subcommand; the consequential ones show a summary with Confirm and Cancel first."""

    async def command(self: CampaignGroup, interaction: Interaction, project: str, campaign: str) -> None:
        if not confirm:
            await answer(interaction, _campaign_act(interaction, project, campaign, action))
            return
        summary = embed(
            f"{action.capitalize()} campaign {campaign}?",
            outcome="warning",
            description=f"Project {project}. This ends the campaign for good.",
        )
        await confirm_first(
            interaction,
            summary,
            lambda: _campaign_act(interaction, project, campaign, action),
            authority=Authority("campaign.conclude" if action == "conclude" else "campaign.control", project),
        )

    # discord.py passes the group as `self` only to callbacks whose qualname says they sit in a class.
    command.__qualname__ = f"CampaignGroup.{action}"
    made = app_commands.command(name=action, description=help_text)(command)
    return app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)(made)


class CampaignGroup(app_commands.Group, name="campaign", description="Research campaigns"):
    @app_commands.command(name="list", description="A project's campaigns")
    @app_commands.autocomplete(project=projects_ac)
    async def list_(self, interaction: Interaction, project: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/campaigns")
            text = table(rows_of(data, "campaigns"), ["campaign_id", "status", "title"])
            return Reply(embed=embed(f"Campaigns of {project}", description=text))

        await answer(interaction, work())

    @app_commands.command(name="show", description="A campaign's state")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def show_(self, interaction: Interaction, project: str, campaign: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/campaigns/{campaign}")
            description = str(data.get("title", ""))
            if (data.get("spec") or {}).get("kind") == "cascade":
                listing = await call(interaction, "GET", f"/v1/projects/{project}/campaigns/{campaign}/iterations")
                description += "\n" + cascade_stages(rows_of(listing, "iterations"))
            return Reply(embed=fields_embed(f"Campaign {campaign}", data, CAMPAIGN_KEYS, description=description))

        await answer(interaction, work())

    @app_commands.command(name="create", description="Create a campaign from a spec file (campaign.create)")
    @app_commands.autocomplete(project=projects_ac)
    async def create(self, interaction: Interaction, project: str, spec: discord.Attachment) -> None:
        async def work() -> Reply:
            body = await read_json_attachment(spec, "spec")
            data = await call(interaction, "POST", f"/v1/projects/{project}/campaigns", body=body)
            return Reply(embed=fields_embed("Campaign created", written(data), CAMPAIGN_KEYS))

        await answer(interaction, work())

    validate = _campaign_action("validate", "Check a draft campaign's pins; ready when it passes (campaign.control)")
    start = _campaign_action("start", "Start a ready campaign (campaign.control)")
    pause = _campaign_action("pause", "Pause an active campaign (campaign.control)")
    resume = _campaign_action("resume", "Resume a paused or waiting campaign (campaign.control)")
    cancel = _campaign_action("cancel", "Cancel a campaign (asks to confirm)", confirm=True)
    conclude = _campaign_action("conclude", "Conclude a campaign as completed (asks to confirm)", confirm=True)

    @app_commands.command(name="propose", description="Queue one candidate: one change to the recipe, and why")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def propose(
        self, interaction: Interaction, project: str, campaign: str, variable: str, value: str, rationale: str
    ) -> None:
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        body = {"primary_variable": variable, "value": parsed, "rationale": rationale}

        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/campaigns/{campaign}/propose", body=body)
            added = data.get("iterations", [data])
            return Reply(content=f"Queued {', '.join(str(i.get('iteration_id', '')) for i in added)} in {campaign}.")

        await answer(interaction, work())

    @app_commands.command(name="report", description="Draw the campaign report now, with its charts")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def report(self, interaction: Interaction, project: str, campaign: str) -> None:
        async def work() -> Reply:
            path = f"/v1/projects/{project}/campaigns/{campaign}/reports"
            manifest = await call(interaction, "POST", path, body={"formats": ["md", "json", "png"]})
            names = [f["name"] for f in manifest.get("files", [])]
            return Reply(
                embed=embed(f"Report {manifest.get('report_id')}", description="Files: " + ", ".join(names)),
            )

        await answer(interaction, work())

    @app_commands.command(name="doctor", description="Is everything this campaign needs ready?")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def doctor(self, interaction: Interaction, project: str, campaign: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/campaigns/{campaign}/doctor")
            checks = data.get("checks", [])
            outcome = "success" if data.get("ok") else "failure"
            text = table(checks, ["check", "ok", "code", "next_action"])
            return Reply(embed=embed(f"Doctor: {campaign}", outcome=outcome, description=text))

        await answer(interaction, work())

    @app_commands.command(name="schedule", description="Post the campaign report here on a cron schedule")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def schedule(
        self, interaction: Interaction, project: str, campaign: str, cron: str, timezone: str = "UTC"
    ) -> None:
        body = {"cron": cron, "timezone": timezone, "channel": str(interaction.channel_id)}

        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/campaigns/{campaign}/schedule", body=body)
            return Reply(
                embed=fields_embed(f"Report schedule of {campaign}", written(data), ["cron", "timezone", "channel"])
            )

        await answer(interaction, work())
