"""/run: training runs, launched, watched and controlled for the person who typed."""

from __future__ import annotations

import asyncio
from typing import Any

import discord
from bashgym.bot.commands.shared import (
    METHODS,
    RUN_STATUSES,
    Interaction,
    call,
    dataset_versions_ac,
    model_versions_ac,
    projects_ac,
    read_json_attachment,
    rows_of,
    runs_ac,
    targets_ac,
)
from bashgym.bot.core import (
    Authority,
    Reply,
    answer,
    confirm_first,
    embed,
    fields_embed,
    show,
    table,
)
from bashgym.client.errors import ApiError
from discord import app_commands

# -- /run ---------------------------------------------------------------------------------------


# How long /run stop keeps its answer open for the run's end: a run still importing torch on a busy machine took
# over a minute to end in CI. Discord lets an interaction's answer be edited for 15 minutes.
STOP_WAIT_S = 300
ENDED = {"completed", "failed", "cancelled"}
RUN_KEYS = ["run_id", "status", "method", "project_id", "model_version_id", "dataset_version_id", "launched_by"]


class RunGroup(app_commands.Group, name="run", description="Training runs"):
    @app_commands.command(name="start", description="Launch a training run in a project (training.launch)")
    @app_commands.describe(
        project="the project the run is recorded under; your authority is judged there",
        method="the training method",
        model="a registered model version of the project (bashgym model register)",
        dataset="a registered dataset version of the project (bashgym dataset register)",
        target="local, ssh:<device>, ssh-group:<group>, slurm:<cluster> or cloud:nemo-customizer",
        experiment="the experiment the run belongs to (default: the project's ad-hoc runs)",
        config="JSON of method fields (never method, model, data, target or tracking_context)",
    )
    @app_commands.autocomplete(
        project=projects_ac, model=model_versions_ac, dataset=dataset_versions_ac, target=targets_ac
    )
    async def start(
        self,
        interaction: Interaction,
        project: str,
        method: METHODS,
        model: str,
        dataset: str,
        target: str = "local",
        experiment: str | None = None,
        config: discord.Attachment | None = None,
    ) -> None:
        async def work() -> Reply:
            body: dict[str, Any] = await read_json_attachment(config, "config") if config else {}
            if not isinstance(body, dict):
                raise ApiError(422, "invalid_input", "The config attachment must hold a JSON object of request fields.")
            body.update(method=method, compute_target=target)
            # The run is recorded under the chosen project: the daemon composes its tracking context from the
            # project's registered model and dataset versions, and judges the launch there.
            params = {"project": project, "model_version": model, "dataset_version": dataset}
            if experiment:
                params["experiment"] = experiment
            started = await call(interaction, "POST", "/v1/training/start", body=body, params=params)
            keys = ["run_id", "project_id", "experiment_id", "status", "context_status", "lane"]
            return Reply(embed=fields_embed("Run queued", started, keys))

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

    @app_commands.command(
        name="register-model", description="Keep a completed run's model as a model version (ledger.write)"
    )
    @app_commands.describe(
        version="the new model version id (a reward model's is what GRPO's grpo_reward_model names)",
        model="the model id the version belongs to",
    )
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def register_model(self, interaction: Interaction, project: str, run: str, version: str, model: str) -> None:
        async def work() -> Reply:
            body = {"model_version_id": version, "model_id": model}
            data = await call(interaction, "POST", f"/v1/projects/{project}/runs/{run}/model-version", body=body)
            record = data["record"]
            title = "Model version replayed" if data["replayed"] else "Model version registered"
            return Reply(embed=fields_embed(title, record, ["model_version_id", "model_id", "kind", "source_uri"]))

        await answer(interaction, work())

    @app_commands.command(name="list", description="Recent runs of a project")
    @app_commands.autocomplete(project=projects_ac)
    async def list_(self, interaction: Interaction, project: str, status: RUN_STATUSES | None = None) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/runs", params={"status": status})
            rows = rows_of(data, "runs")
            return Reply(embed=embed(f"Runs of {project}", description=table(rows, ["run_id", "status", "method"])))

        await answer(interaction, work())

    @app_commands.command(name="log", description="The last lines of a run's training log")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac)
    async def log(
        self, interaction: Interaction, project: str, run: str, lines: app_commands.Range[int, 1, 500] = 20
    ) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", f"/v1/projects/{project}/runs/{run}/log", params={"tail": lines})
            text = "\n".join(data.get("lines", []))[-1800:] or "(empty)"  # rendered as a terminal by the daemon
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
        async def stopped() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/runs/{run}/stop")
            for _ in range(STOP_WAIT_S):  # a run still loading its model takes seconds to end
                if data.get("status") in ENDED:
                    break
                await asyncio.sleep(1.0)
                data = await call(interaction, "GET", f"/v1/projects/{project}/runs/{run}")
            done = data.get("status") in ENDED
            title = f"Run {run} {data.get('status')}" if done else f"Run {run}: still stopping"
            reason = ((data.get("attempts") or [{}])[-1]).get("status_reason")
            return Reply(
                embed=fields_embed(title, {**data, "status_reason": reason}, ["run_id", "status", "status_reason"])
            )

        async def act() -> Reply:
            return Reply(content=f"Stopping run {run}…", then=stopped)

        summary = embed(f"Stop run {run}?", outcome="warning", description=f"Project {project}. It cannot be resumed.")
        await confirm_first(interaction, summary, act, authority=Authority("training.stop", project, run))
