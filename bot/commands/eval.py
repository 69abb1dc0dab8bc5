"""/eval: run an evaluation, list a project's results, compare two on one suite."""

from __future__ import annotations

from typing import Any

from bashgym.bot.commands.shared import (
    Interaction,
    call,
    dataset_versions_ac,
    model_versions_ac,
    projects_ac,
    results_ac,
    rows_of,
    runs_ac,
    suites_ac,
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

# Each kind of suite's headline figure: pass@1 of the task suite, a reward model's pair accuracy, a retriever's
# nDCG@10, a policy's held-out preference accuracy or exact match.
PRIMARY_SCORES = ("pass@1", "pair_accuracy", "ndcg@10", "preference_accuracy", "exact_match", "target_likelihood")


def primary_score(metrics: dict[str, Any]) -> str:
    name = next((m for m in PRIMARY_SCORES if m in metrics), None)
    return f"{name} {metrics[name]:.3f}" if name else ""


class EvalGroup(app_commands.Group, name="eval", description="Evaluations and comparisons"):
    @app_commands.command(name="run", description="Evaluate a run, a model version or the gold solutions (eval.run)")
    @app_commands.autocomplete(
        project=projects_ac, run=runs_ac, model_version=model_versions_ac, suite=suites_ac, held_out=dataset_versions_ac
    )
    @app_commands.describe(held_out="held-out rows (a registered dataset version): a reward model's pairs, for one")
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
        held_out: str | None = None,
    ) -> None:
        body = {
            "suite_id": suite,
            "run_id": run,
            "model_version_id": model_version,
            "gold": gold,
            "limit_tasks": limit_tasks,
            "samples": samples,
            # Held-out rows registered as a dataset version of the project: a reward model's pairs, a policy's rows,
            # or a retriever's own queries (a retriever without them is judged on the shipped split).
            "dataset_version_id": held_out,
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
                    "score": primary_score(r.get("metrics") or {}),
                    "subject": r.get("run_id") or r.get("model_version_id"),
                }
                for r in rows_of(data, "results")
            ]
            text = table(rows, ["result_id", "suite_id", "subject", "score"])
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
