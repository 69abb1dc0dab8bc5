"""The flags of an official run, shared by every command that launches one (`training start|plan`, `jobs hf
submit`, `jobs provider submit`, `compute plan`): name the project and its registered versions, and the daemon
composes the run's tracking context from its records (daemon/launch/resolve.py)."""

from __future__ import annotations

import argparse
from typing import Any

from bashgym.cli.usage import UsageError


def official_run_args(parser: argparse.ArgumentParser, *, model_help: str, model_version_help: str) -> None:
    """--model or --model-version (one of them), --project and --experiment."""
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", dest="base_model", help=model_help)
    model.add_argument("--model-version", help=model_version_help)
    parser.add_argument(
        "--project",
        help="the project the run is recorded under, as an official run: the daemon composes its tracking context "
        "from --model-version, --dataset-version and --experiment (its records)",
    )
    parser.add_argument("--experiment", help="experiment of --project (default: the project's default experiment)")


def official_params(a: argparse.Namespace) -> dict[str, Any]:
    """The query that names the run's project and versions, as the launch routes take it."""
    return {
        "project": a.project,
        "model_version": a.model_version,
        "dataset_version": a.dataset_version,
        "experiment": a.experiment,
    }


def check_official(a: argparse.Namespace, default: str | None, *, command: str) -> None:
    """--project names an official run by its registered versions; the flags that compose it come together. A
    launch naming a model version is in the default project (`bashgym project use`) when it names none."""
    if a.project is None and a.model_version and default:
        a.project = default
    if a.project is None:
        lonely = [
            flag for flag, value in (("--model-version", a.model_version), ("--experiment", a.experiment)) if value
        ]
        if lonely:
            raise UsageError(
                f"{' and '.join(lonely)} name records of a project: give --project too.",
                hint=f"{command} --project P --model-version MV --dataset-version DV --method ...",
            )
        return
    if a.tracking_context:
        raise UsageError(
            "Give --project or --tracking-context, not both: with --project the daemon composes the context.",
            hint="Drop --tracking-context to launch by the project's registered versions.",
        )
    if a.model_version is None or a.dataset_version is None:
        raise UsageError(
            "An official run in --project names its registered versions: --model-version and --dataset-version.",
            hint=f"Register them first (bashgym model register --project {a.project} --model ID --version MV --dir "
            f"DIR; bashgym dataset register --project {a.project} --dataset ID --version DV --file FILE), then name "
            "them; bashgym ledger context --project P lists what is registered.",
        )
