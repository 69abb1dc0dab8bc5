"""The slash commands. Each maps to one daemon call made for the person who typed it; the daemon checks
their authority and the bot shows its answer. Consequential ones ask for confirmation first."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import discord
from bashgym.bot.core import (
    Daemon,
    Reply,
    answer,
    confirm_first,
    embed,
    fields_embed,
    show,
    table,
)
from bashgym.daemon.wire_errors import ApiError
from discord import app_commands

Interaction = discord.Interaction[Any]
STRATEGIES = Literal["sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation"]
MAX_ATTACHMENT_BYTES = 1024 * 1024


def daemon_of(interaction: Interaction) -> Daemon:
    return interaction.client.daemon  # type: ignore[no-any-return]


def call(interaction: Interaction, method: str, path: str, **kw: Any) -> Awaitable[Any]:
    return daemon_of(interaction).call(interaction, method, path, **kw)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; write a finite number")


async def read_json_attachment(attachment: discord.Attachment, what: str) -> Any:
    if attachment.size > MAX_ATTACHMENT_BYTES:
        raise ApiError(413, "too_large", f"The {what} attachment is {attachment.size} bytes; the limit is 1 MiB.")
    raw = await attachment.read()
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except ValueError as exc:
        raise ApiError(
            422, "invalid_input", f"The {what} attachment is not valid JSON: {exc}.", "Attach a .json file."
        ) from exc


# -- autocomplete: choices come from the daemon, filtered to what the user may see ----------------


def _choices(values: list[str], current: str) -> list[app_commands.Choice[str]]:
    matches = [v for v in values if current.lower() in v.lower()]
    return [app_commands.Choice(name=v[:100], value=v[:100]) for v in matches[:25]]


async def _listed(interaction: Interaction, path: str, key: str, id_field: str, current: str) -> list[Any]:
    try:
        data = await call(interaction, "GET", path)
    except ApiError:
        return []
    return _choices([str(r[id_field]) for r in rows_of(data, key) if id_field in r], current)


async def projects_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await _listed(interaction, "/v1/projects", "projects", "project_id", current)


def _project(interaction: Interaction) -> str:
    return str(getattr(interaction.namespace, "project", "") or "unassigned")


async def runs_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await _listed(interaction, f"/v1/projects/{_project(interaction)}/runs", "runs", "run_id", current)


async def campaigns_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    path = f"/v1/projects/{_project(interaction)}/campaigns"
    return await _listed(interaction, path, "campaigns", "campaign_id", current)


async def suites_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    path = f"/v1/projects/{_project(interaction)}/evaluations"
    return await _listed(interaction, path, "suites", "suite_id", current)


async def devices_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    return await _listed(interaction, "/v1/devices", "devices", "device_id", current)


async def targets_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    devices = [c.value for c in await devices_ac(interaction, "")]
    groups = [c.value for c in await _listed(interaction, "/v1/device-groups", "groups", "group_id", "")]
    targets = ["local", *(f"ssh:{d}" for d in devices), *(f"ssh-group:{g}" for g in groups), "cloud:nemo-customizer"]
    return _choices(targets, current)


def rows_of(data: Any, key: str) -> list[dict[str, Any]]:
    """A listing's rows, whether the daemon answers a bare list or an object holding one under `key`."""
    rows = data if isinstance(data, list) else data.get(key, []) if isinstance(data, dict) else []
    return [r for r in rows if isinstance(r, dict)]


def _written(data: Any) -> dict[str, Any]:
    record = data.get("record", data) if isinstance(data, dict) else {}
    return dict(record) if isinstance(record, dict) else {}


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


# -- /run ---------------------------------------------------------------------------------------


RUN_KEYS = ["run_id", "status", "method", "project_id", "model_version_id", "dataset_version_id", "launched_by"]


class RunGroup(app_commands.Group, name="run", description="Training runs"):
    @app_commands.command(name="start", description="Launch a training run (training.launch)")
    @app_commands.describe(
        model="base model: a hub id or a path on the daemon's host",
        dataset="a registered dataset version id of the project",
        target="local, ssh:<device>, ssh-group:<group> or cloud:nemo-customizer",
        config="JSON of method fields, optionally with tracking_context (never strategy, model, data, target)",
    )
    @app_commands.autocomplete(project=projects_ac, target=targets_ac)
    async def start(
        self,
        interaction: Interaction,
        project: str,
        strategy: STRATEGIES,
        model: str,
        dataset: str,
        target: str = "local",
        config: discord.Attachment | None = None,
    ) -> None:
        async def work() -> Reply:
            body: dict[str, Any] = await read_json_attachment(config, "config") if config else {}
            if not isinstance(body, dict):
                raise ApiError(422, "invalid_input", "The config attachment must hold a JSON object of request fields.")
            body.update(strategy=strategy, base_model=model, compute_target=target)
            params = {"dataset_version": dataset, "dataset_project": project}
            started = await call(interaction, "POST", "/v1/training/start", body=body, params=params)
            made = fields_embed("Run queued", started, ["run_id", "project_id", "status", "compute_target"])
            return Reply(embed=made)

        await answer(interaction, work())

    @app_commands.command(name="status", description="A run's state, ids and latest metrics")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def status(self, interaction: Interaction, project: str, run: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/runs/{run}")
            made = fields_embed(f"Run {run}", data, RUN_KEYS)
            for metric, summary in sorted((data.get("metric_summary") or {}).items())[:8]:
                made.add_field(name=metric, value=f"{show(summary.get('latest'))} @ {summary.get('last_step')}")
            return Reply(embed=made)

        await answer(interaction, work())

    @app_commands.command(name="list", description="Recent runs of a project")
    @app_commands.autocomplete(project=projects_ac)
    async def list_(self, interaction: Interaction, project: str, status: str | None = None) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/runs", params={"status": status})
            rows = rows_of(data, "runs")
            return Reply(embed=embed(f"Runs of {project}", description=table(rows, ["run_id", "status", "method"])))

        await answer(interaction, work())

    @app_commands.command(name="log", description="The last lines of a run's training log")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def log(self, interaction: Interaction, project: str, run: str, lines: int = 20) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/runs/{run}/log", params={"tail": lines})
            text = "\n".join(data.get("lines", []))[-1800:] or "(empty)"
            return Reply(content=f"```\n{text}\n```")

        await answer(interaction, work())

    @app_commands.command(name="metrics", description="A metric of a run: first, latest, min, max")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def metrics(self, interaction: Interaction, project: str, run: str, metric: str = "train.loss") -> None:
        async def work() -> Reply:
            params = {"metric": metric, "run": run}
            data = await call(interaction, "GET", f"/v1/projects/{project}/trend", params=params)
            summary = data.get("summary") or {}
            return Reply(embed=fields_embed(f"{metric} of {run}", summary, list(summary)))

        await answer(interaction, work())

    async def _control(self, interaction: Interaction, project: str, run: str, action: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/runs/{run}/{action}")
            return Reply(embed=fields_embed(f"Run {run}: {action}", data, ["run_id", "status", "detail"]))

        await answer(interaction, work())

    @app_commands.command(name="pause", description="Pause a run at its next step (training.control)")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def pause(self, interaction: Interaction, project: str, run: str) -> None:
        await self._control(interaction, project, run, "pause")

    @app_commands.command(name="resume", description="Resume a paused run (training.control)")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def resume(self, interaction: Interaction, project: str, run: str) -> None:
        await self._control(interaction, project, run, "resume")

    @app_commands.command(name="stop", description="Stop a run (asks to confirm)")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def stop(self, interaction: Interaction, project: str, run: str) -> None:
        async def act() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/runs/{run}/stop")
            return Reply(embed=fields_embed(f"Run {run}: stop", data, ["run_id", "status", "detail"]))

        summary = embed(f"Stop run {run}?", outcome="warning", description=f"Project {project}. It cannot be resumed.")
        await confirm_first(interaction, summary, act)


# -- /eval --------------------------------------------------------------------------------------


class EvalGroup(app_commands.Group, name="eval", description="Evaluations and comparisons"):
    @app_commands.command(name="run", description="Evaluate a run, a model version or the gold solutions (eval.run)")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac, suite=suites_ac)
    async def run(
        self,
        interaction: Interaction,
        project: str,
        run: str | None = None,
        model_version: str | None = None,
        gold: bool = False,
        suite: str = "bash-tasks-v1",
        limit_tasks: app_commands.Range[int, 1, 1000] | None = None,
        samples: app_commands.Range[int, 1, 64] = 1,
    ) -> None:
        body = {
            "suite_id": suite,
            "run_id": run,
            "model_version_id": model_version,
            "gold": gold,
            "limit_tasks": limit_tasks,
            "samples": samples,
        }

        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/evaluations", body=body)
            made = fields_embed("Evaluation started", data, ["evaluation_id", "status", "suite_id", "subject"])
            made.description = "The result will be posted in the project's channel."
            return Reply(embed=made)

        await answer(interaction, work())

    @app_commands.command(name="results", description="Evaluation results of a project")
    @app_commands.autocomplete(project=projects_ac, suite=suites_ac)
    async def results(self, interaction: Interaction, project: str, suite: str | None = None) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/evaluations", params={"suite": suite})
            rows = [
                {
                    **r,
                    "pass@1": (r.get("metrics") or {}).get("pass@1"),
                    "subject": r.get("run_id") or r.get("model_version_id"),
                }
                for r in rows_of(data, "results")
            ]
            text = table(rows, ["result_id", "suite_id", "subject", "pass@1"])
            return Reply(embed=embed(f"Evaluations of {project}", description=text))

        await answer(interaction, work())

    @app_commands.command(name="compare", description="Paired bootstrap of two results on one suite")
    @app_commands.autocomplete(project=projects_ac)
    async def compare(self, interaction: Interaction, project: str, baseline: str, candidate: str) -> None:
        body = {"baseline_result_id": baseline, "candidate_result_id": candidate}

        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/evaluations/compare", body=body)
            record = _written(data)
            low, high = record.get("ci_low"), record.get("ci_high")
            outcome = "success" if (low or 0) > 0 else "failure" if (high or 0) < 0 else "neutral"
            keys = ["comparison_id", "primary_metric", "delta", "ci_low", "ci_high"]
            return Reply(embed=fields_embed("Comparison", record, keys, outcome=outcome))

        await answer(interaction, work())


# -- /runcard and /promote ----------------------------------------------------------------------


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
            return Reply(embed=fields_embed("RunCard created", _written(data), ["card_id", "run_id", "claim_tier"]))

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
        await confirm_first(interaction, embed(f"Promote run {run}?", outcome="warning", description=note), act)


# -- /campaign and /research --------------------------------------------------------------------


CAMPAIGN_KEYS = ["campaign_id", "status", "version", "incumbent_iteration_id", "status_reason", "created_by"]


async def _campaign_act(interaction: Interaction, project: str, campaign: str, action: str) -> Reply:
    """A lifecycle action at the campaign's current version (read first: the daemon refuses stale ones)."""
    base = f"/v1/projects/{project}/campaigns/{campaign}"
    current = await call(interaction, "GET", base)
    body = {"expected_version": current["version"]}
    data = await call(interaction, "POST", f"{base}/{action}", body=body)
    record = data.get("campaign", data) if action == "validate" else _written(data)
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
        await confirm_first(interaction, summary, lambda: _campaign_act(interaction, project, campaign, action))

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
            return Reply(
                embed=fields_embed(f"Campaign {campaign}", data, CAMPAIGN_KEYS, description=data.get("title", ""))
            )

        await answer(interaction, work())

    @app_commands.command(name="create", description="Create a campaign from a spec file (campaign.create)")
    @app_commands.autocomplete(project=projects_ac)
    async def create(self, interaction: Interaction, project: str, spec: discord.Attachment) -> None:
        async def work() -> Reply:
            body = await read_json_attachment(spec, "spec")
            data = await call(interaction, "POST", f"/v1/projects/{project}/campaigns", body=body)
            return Reply(embed=fields_embed("Campaign created", _written(data), CAMPAIGN_KEYS))

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
                embed=fields_embed(f"Report schedule of {campaign}", _written(data), ["cron", "timezone", "channel"])
            )

        await answer(interaction, work())


class ResearchGroup(app_commands.Group, name="research", description="Where a campaign stands"):
    @app_commands.command(name="state", description="Phase, incumbent, latest decision, budget, next action")
    @app_commands.autocomplete(project=projects_ac, campaign=campaigns_ac)
    async def state(self, interaction: Interaction, project: str, campaign: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/campaigns/{campaign}/state")
            keys = [k for k, v in data.items() if not isinstance(v, list)]
            return Reply(embed=fields_embed(f"Research state: {campaign}", data, keys))

        await answer(interaction, work())


# -- /ledger, /budget, /device, /auth -----------------------------------------------------------


class LedgerGroup(app_commands.Group, name="ledger", description="The experiment ledger"):
    @app_commands.command(name="events", description="A project's latest events")
    @app_commands.autocomplete(project=projects_ac)
    async def events(self, interaction: Interaction, project: str, after_cursor: int = 0, limit: int = 15) -> None:
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
        runs: int = 0,
        gpu_hours: float = 0.0,
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
        await confirm_first(interaction, summary, act)


class DeviceGroup(app_commands.Group, name="device", description="SSH compute devices"):
    @app_commands.command(name="list", description="Registered devices and their last preflight")
    async def list_(self, interaction: Interaction) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", "/v1/devices")
            rows = [{**d, "ready": (d.get("preflight") or {}).get("ready")} for d in rows_of(data, "devices")]
            return Reply(embed=embed("Devices", description=table(rows, ["device_id", "host", "ready"])))

        await answer(interaction, work())

    @app_commands.command(name="preflight", description="Check a device can train now (device.manage)")
    @app_commands.autocomplete(device=devices_ac)
    async def preflight(self, interaction: Interaction, device: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/devices/{device}/preflight")
            verdict = data.get("verdict", data)
            outcome = "success" if verdict.get("ok") else "failure"
            checks = verdict.get("checks", [])
            return Reply(
                embed=embed(
                    f"Preflight of {device}", outcome=outcome, description=table(checks, ["name", "ok", "detail"])
                )
            )

        await answer(interaction, work())


class AuthGroup(app_commands.Group, name="auth", description="Your authority in BashGym"):
    @app_commands.command(name="whoami", description="Who BashGym thinks you are, and what you may do")
    async def whoami(self, interaction: Interaction) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", "/v1/auth/whoami")
            made = fields_embed("You", data, ["actor_id", "credential_kind", "workspace_id"])
            made.add_field(name="capabilities", value=", ".join(data.get("capabilities", [])) or "none", inline=False)
            return Reply(embed=made, ephemeral=True)

        await answer(interaction, work(), ephemeral=True)


GROUPS: tuple[Callable[[], app_commands.Group], ...] = (
    ProjectGroup,
    RunGroup,
    EvalGroup,
    RunCardGroup,
    PromoteGroup,
    CampaignGroup,
    ResearchGroup,
    LedgerGroup,
    BudgetGroup,
    DeviceGroup,
    AuthGroup,
)
