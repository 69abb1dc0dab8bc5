"""`bashgym training validate`: check a dataset against its strategy's contract, locally, before a launch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bashgym.daemon.cli import Ctx, command, done, read_json_file
from bashgym.daemon.wire_errors import EXIT_OK, EXIT_RULE
from bashgym.ledger.errors import InvalidInput
from bashgym.trainers.contracts import format_report, validate_dataset
from bashgym.trainers.specs import STRATEGIES, merge_config_file


def _validate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strategy", required=True, choices=STRATEGIES, help="the training strategy")
    parser.add_argument("--dataset", required=True, type=Path, help="the JSONL dataset file")
    parser.add_argument("--teacher-model", help="distillation: the pinned teacher, when rows lack teacher_response")
    parser.add_argument("--max-errors", type=int, default=1000, help="list at most this many errors (all are counted)")


@command("training", "validate", help="check a JSONL dataset against a strategy's contract (no daemon needed)")(
    _validate_args
)
async def training_validate(ctx: Ctx) -> int:
    a = ctx.args
    dataset = Path(a.dataset).expanduser()
    try:
        report = validate_dataset(a.strategy, dataset, teacher_model=a.teacher_model, max_errors=a.max_errors)
    except FileNotFoundError as exc:
        raise InvalidInput(str(exc), hint="Pass the JSONL file with --dataset.") from exc
    except OSError as exc:
        raise InvalidInput(f"Cannot read dataset {dataset}: {exc.strerror}.", hint="Check its permissions.") from exc
    if ctx.as_json:
        done(ctx, report.model_dump(mode="json"))
    elif report.ok:
        print(format_report(report))
    else:
        sys.stderr.write(format_report(report) + "\n")
    return EXIT_OK if report.ok else EXIT_RULE


def _request_args(parser: argparse.ArgumentParser) -> None:
    """The launch flags of ../shared/RECIPES.md: provenance on the command line, method fields in --config."""
    parser.add_argument("--strategy", required=True, choices=STRATEGIES, help="the training strategy")
    parser.add_argument("--model", required=True, dest="base_model", help="base model: hub id or local path")
    parser.add_argument("--dataset-path", required=True, help="training data (JSONL)")
    parser.add_argument("--compute-target", default="local", help="local, ssh:<device_id> or cloud:nemo-customizer")
    parser.add_argument("--config", type=Path, help="JSON file of method fields (never strategy, model, data, target)")
    parser.add_argument("--tracking-context", type=Path, help="JSON file with the run's complete tracking context")
    parser.add_argument("--checkpoint-limit", type=int, help="checkpoints kept during the run (1..20)")
    parser.add_argument(
        "--artifact-retention",
        choices=["adapter_only", "adapter_checkpoint", "deployable", "full_run"],
        help="what a finished run keeps",
    )
    parser.add_argument(
        "--auto-push-hf",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="upload the artifact to the Hugging Face Hub after success",
    )
    parser.add_argument("--hf-repo-name", help="the Hub repository (never invented)")
    parser.add_argument(
        "--hf-private",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="private repository (default); --no-hf-private needs artifact.publish_public",
    )
    parser.add_argument("--hf-upload-artifact", choices=["auto", "adapter", "merged"], help="which artifact")
    parser.add_argument("--correlation-id", help="correlation id recorded with every event of the run")


def build_request(a: argparse.Namespace) -> dict[str, object]:
    """The request body from flags and files; the daemon validates it."""
    body: dict[str, object] = merge_config_file(read_json_file(a.config, what="config")) if a.config else {}
    body.update(
        strategy=a.strategy,
        base_model=a.base_model,
        dataset_path=str(Path(a.dataset_path).expanduser()),
        compute_target=a.compute_target,
    )
    if a.tracking_context:
        body["tracking_context"] = read_json_file(a.tracking_context, what="tracking context")
    flags = {
        "checkpoint_limit": a.checkpoint_limit,
        "artifact_retention": a.artifact_retention,
        "auto_push_hf": a.auto_push_hf,
        "hf_repo_name": a.hf_repo_name,
        "hf_private": a.hf_private,
        "hf_upload_artifact": a.hf_upload_artifact,
        "correlation_id": a.correlation_id,
    }
    body.update({k: v for k, v in flags.items() if v is not None})
    return body


@command("training", "plan", help="validate a training request with its defaults and lane; launches nothing")(
    _request_args
)
async def training_plan(ctx: Ctx) -> int:
    try:
        body = build_request(ctx.args)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    result = await ctx.client.request("POST", "/v1/training/plan", body=body, params={"workspace": ctx.workspace})
    return done(ctx, result, title="Training plan (nothing launched)")
