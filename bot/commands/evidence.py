"""/eval, /runcard and /promote: evaluations, frozen evidence and the promotion gate."""

from __future__ import annotations

from typing import Any, Literal

import discord
from bashgym.bot.commands.shared import (
    Interaction,
    call,
    model_versions_ac,
    projects_ac,
    results_ac,
    rows_of,
    runs_ac,
    suites_ac,
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

# -- /eval --------------------------------------------------------------------------------------


class EvalGroup(app_commands.Group, name="eval", description="Evaluations and comparisons"):
    @app_commands.command(name="run", description="Evaluate a run, a model version or the gold solutions (eval.run)")
    @app_commands.autocomplete(project=projects_ac, run=runs_ac, model_version=model_versions_ac, suite=suites_ac)
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
    @app_commands.autocomplete(project=projects_ac, baseline=results_ac, candidate=results_ac)
    async def compare(self, interaction: Interaction, project: str, baseline: str, candidate: str) -> None:
        body = {"baseline_result_id": baseline, "candidate_result_id": candidate}

        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/projects/{project}/evaluations/compare", body=body)
            record = written(data)
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
        await confirm_first(interaction, summary, act, authority=Authority("promotion.decide", project))
