"""`bashgym import mlflow`: an MLflow experiment's runs into the ledger, read by this process (docs/imports.md).

This process, not the daemon, talks to MLflow: with the user's network and credentials, so no token holder can make
the daemon fetch a URL. The runs go to the daemon in bounded batches; importing again adds only what is new.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bashgym.cli.output import note, progress_bar
from bashgym.cli.registry import Ctx, command, command_group, done

if TYPE_CHECKING:
    from bashgym.client.imports import ImportedRun
    from bashgym.client.mlflow import MlflowReader

# A run sent in several parts is new if any part made it, else updated if any part changed it.
_RANK = {"unchanged": 0, "updated": 1, "new": 2}


@dataclass
class Tally:
    """What an import did so far: each MLflow run's outcome, the points read, added and left out."""

    outcomes: dict[str, str] = field(default_factory=dict)
    projects: set[str] = field(default_factory=set)
    points_read: int = 0
    points_added: int = 0
    points_left_out: int = 0

    def count(self, answer: dict[str, Any]) -> None:
        for run in answer["runs"]:
            known = self.outcomes.get(run["source_run_id"], "unchanged")
            self.outcomes[run["source_run_id"]] = max(known, run["outcome"], key=_RANK.__getitem__)
            self.points_added += int(run["points_inserted"])
            self.projects.add(run["project_id"])


command_group("import", help="bring another tracker's runs into the ledger, as imported records: mlflow")


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", required=True, help="the MLflow tracking server, http(s)://HOST:PORT")
    parser.add_argument("--experiment", required=True, help="the MLflow experiment's name")
    parser.add_argument("--project", required=True, help="the BashGym project the runs are imported for")
    parser.add_argument("--model-version", help="a registered model version the runs trained (with --dataset-version)")
    parser.add_argument("--dataset-version", help="a registered dataset version they trained on")


@command(
    "import",
    "mlflow",
    help="an MLflow experiment's runs (params, tags, metric histories, artifact listings) as imported runs; "
    "credentials from MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD",
)(_args)
async def import_mlflow(ctx: Ctx) -> int:
    from bashgym.client.mlflow import MlflowReader, batches

    a = ctx.args
    tally = Tally()
    async with MlflowReader(a.tracking_uri, ctx.environ) as reader:
        experiment = await reader.fetch_experiment(a.experiment)
        runs = await reader.fetch_runs(str(experiment["experiment_id"]))
        pending: list[ImportedRun] = []
        with progress_bar(len(runs), "MLflow runs", shown=not ctx.as_json) as advance:
            for raw in runs:
                pending += await _parts(reader, raw, tally)
                ready = list(batches(pending))
                for batch in ready[:-1]:
                    await _send(ctx, reader, experiment, batch, tally)
                pending = ready[-1] if ready else []
                advance()
            for batch in batches(pending):
                await _send(ctx, reader, experiment, batch, tally)
    return done(ctx, _summary(reader.uri, experiment, len(runs), tally), title=f"Imported from MLflow into {a.project}")


async def _parts(reader: MlflowReader, raw: dict[str, Any], tally: Tally) -> list[ImportedRun]:
    """One MLflow run read whole (its metric histories and artifact listing), as the parts its batches carry."""
    from bashgym.client.imports import ImportedRun
    from bashgym.client.mlflow import cut_values, history_points, metric_names, pieces

    info, data = raw["info"], raw.get("data") or {}
    run_id = str(info.get("run_id") or info["run_uuid"])
    params, cut_params = cut_values(data.get("params") or [], "params")
    tags, cut_tags = cut_values(data.get("tags") or [], "tags")
    names = metric_names(sorted({str(m["key"]) for m in data.get("metrics") or []}))
    points = []
    for key, name in names.items():
        kept, left_out = history_points(name, await reader.fetch_history(run_id, key))
        points += kept
        tally.points_left_out += left_out
    artifacts, complete = await reader.fetch_artifacts(run_id)
    tally.points_read += len(points)
    run = ImportedRun(
        source_run_id=run_id,
        name=str(info.get("run_name") or "")[:500],
        status=info["status"],
        start_time_ms=info.get("start_time"),
        end_time_ms=info.get("end_time"),
        params=params,
        tags=tags,
        truncated=cut_params + cut_tags,
        metric_names={name: key for key, name in names.items() if name != key},
        artifacts=artifacts,
        artifacts_complete=complete,
    )
    return list(pieces(run, points))


async def _send(
    ctx: Ctx, reader: MlflowReader, experiment: dict[str, Any], batch: list[ImportedRun], tally: Tally
) -> None:
    from bashgym.client.imports import MlflowImport

    a = ctx.args
    body = MlflowImport(
        tracking_uri=reader.uri,
        experiment_id=str(experiment["experiment_id"]),
        experiment_name=str(experiment["name"])[:500],
        runs=batch,
    )
    params = {"workspace": ctx.workspace, "model_version": a.model_version, "dataset_version": a.dataset_version}
    answer = await ctx.client.request(
        "POST", f"/v1/projects/{a.project}/imports/mlflow", body=body.model_dump(mode="json"), params=params
    )
    tally.count(answer)


def _summary(uri: str, experiment: dict[str, Any], count: int, tally: Tally) -> dict[str, Any]:
    outcomes = list(tally.outcomes.values())
    projects = sorted(tally.projects)
    summary = {
        "tracking_uri": uri,
        "experiment": experiment["name"],
        "runs": count,
        "new": outcomes.count("new"),
        "updated": outcomes.count("updated"),
        "unchanged": outcomes.count("unchanged"),
        "points_read": tally.points_read,
        "points_added": tally.points_added,
        "points_left_out": tally.points_left_out,
        "recorded_in": projects,
    }
    if "unassigned" in projects:
        note(
            "The runs are kept under `unassigned`: they name no registered model and dataset version. Import again "
            "with --model-version and --dataset-version to record them in the project."
        )
    return summary
