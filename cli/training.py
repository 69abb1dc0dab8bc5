"""`bashgym training validate`: check a dataset against its method's contract, locally, before a launch."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from bashgym.cli import views
from bashgym.cli.official import check_official, official_params, official_run_args
from bashgym.cli.registry import Ctx, command, command_group, done, read_json_file, upload_for
from bashgym.cli.usage import UsageError, input_file
from bashgym.client.errors import EXIT_OK, EXIT_RULE, InvalidInput, RuleRejected
from bashgym.client.specs import run_project
from bashgym.trainers.contracts.datasets import format_report, leaked_pairs, validate_dataset, validate_request_data
from bashgym.trainers.contracts.fields import request_from_recipe
from bashgym.trainers.contracts.request import METHODS, InvalidRequest, TrainingRequest, merge_config_file

command_group("training", help="launch and follow training runs: validate data, plan, start, status, log, metrics")


def _validate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method", "--strategy", dest="method", required=True, choices=METHODS,
        help="the training method (--strategy, its former name, is accepted too)",
    )  # fmt: skip
    parser.add_argument("--dataset", required=True, type=input_file, help="the JSONL dataset file")
    parser.add_argument(
        "--config", type=input_file,
        help="the --config file of training plan/start: the rows are read as that request reads them",
    )  # fmt: skip
    parser.add_argument("--teacher-model", help="distillation: the pinned teacher, when rows lack teacher_response")
    parser.add_argument(
        "--reward-source", choices=("verifier", "reward_model"),
        help="grpo: rows rewarded by a reward model need a prompt only (default: --config's, else verifier)",
    )  # fmt: skip
    parser.add_argument("--max-errors", type=int, default=1000, help="list at most this many errors (all are counted)")


@command("training", "validate", help="check a JSONL dataset against a method's contract (no daemon needed)")(
    _validate_args
)
async def training_validate(ctx: Ctx) -> int:
    a = ctx.args
    dataset = Path(a.dataset).expanduser()
    # The request's fields that decide how its rows are read: the ones plan and start read from --config.
    try:
        config = merge_config_file(read_json_file(a.config, what="config")) if a.config else {}
    except InvalidRequest as exc:
        raise InvalidInput(str(exc)) from exc
    teacher_model = _one_value("teacher_model", a.teacher_model, config)
    reward_source = _one_value("grpo_reward_source", a.reward_source, config) or "verifier"
    try:
        report = validate_dataset(
            a.method, dataset, teacher_model=teacher_model, reward_source=reward_source, max_errors=a.max_errors
        )
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


def _one_value(field: str, flag: str | None, config: dict[str, Any]) -> str | None:
    """A field given by its flag or by --config, refused where the two disagree."""
    if flag is not None and field in config and config[field] != flag:
        raise InvalidInput(
            f"{field} is {flag!r} on the command line and {config[field]!r} in --config; the rows are read as one "
            "request reads them.",
            hint="Drop the flag, or make the two agree.",
        )
    value = flag if flag is not None else config.get(field)
    return None if value is None else str(value)


def _request_args(parser: argparse.ArgumentParser) -> None:
    """The launch flags of ../shared/RECIPES.md: provenance on the command line, method fields in --config."""
    parser.add_argument(
        "--method", "--strategy", dest="method", required=True, choices=METHODS,
        help="the training method (--strategy, its former name, is accepted too)",
    )  # fmt: skip
    official_run_args(
        parser,
        model_help="base model: hub id or local path",
        model_version_help="a registered model version of --project: the run trains from its files",
    )
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument(
        "--dataset-path", type=input_file, help="training data (JSONL) on this machine; uploaded for the run's project"
    )
    data.add_argument("--dataset-version", help="a registered dataset version whose content the daemon holds")
    parser.add_argument(
        "--dataset-project", help="project of --dataset-version (default: --project, or the tracking context's)"
    )
    parser.add_argument(
        "--compute-target",
        help="local (the default), ssh:<device_id>, ssh-group:<group_id>, slurm:<cluster_id> or "
        'cloud:nemo-customizer; left out, --config may name the target ({"use_remote_ssh": true, "device_id": ...})',
    )
    parser.add_argument(
        "--config", type=input_file, help="JSON file of method fields (never method, model, data, target)"
    )
    parser.add_argument(
        "--tracking-context", type=input_file, help="JSON file with the run's complete tracking context"
    )
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
    if a.compute_target:  # sent only when given: the operator form names its target in --config
        body["compute_target"] = a.compute_target
    on_this_host = body.get("compute_target", "local") == "local" and not body.get("use_remote_ssh")
    body["method"] = a.method
    if a.base_model is not None:  # else the daemon loads --model-version's files
        model = Path(a.base_model).expanduser()
        local = on_this_host and model.exists()  # on other lanes the path is the device's (or a hub id)
        body["base_model"] = str(model.resolve()) if local else a.base_model
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
    body = await _request_body(ctx)
    result = await ctx.client.request("POST", "/v1/training/plan", body=body, params=_params(ctx))
    ready = bool(result.get("ready")) if isinstance(result, dict) else False
    if ctx.as_json:
        done(ctx, result)
    else:
        views.plan(result)
    return EXIT_OK if ready else EXIT_RULE  # a script can gate its launch on the plan


async def _request_body(ctx: Ctx) -> dict[str, object]:
    """The request, with --dataset-path uploaded for the project the run will be recorded under (the daemon reads
    no path of this machine's; an upload the daemon already holds is stored once)."""
    check_official(ctx.args, ctx.settings.project, command="bashgym training start")
    try:
        body = build_request(ctx.args)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    if ctx.args.dataset_path:
        dataset = Path(ctx.args.dataset_path).expanduser()
        # Nothing is uploaded for a request the daemon would refuse: its fields, then the data's contract.
        try:
            parsed = request_from_recipe({**body, "dataset_path": str(dataset)})
        except InvalidRequest as exc:
            raise InvalidInput(str(exc)) from exc
        _check_locally(parsed, dataset)
        context = body.get("tracking_context")
        workspace = ctx.workspace or ctx.settings.default_workspace
        project = run_project(context if isinstance(context, dict) else None, workspace)
        held_out = _local_file(body.get("eval_dataset_path"))
        if held_out is not None:  # --config's held-out rows, a file here: checked, then uploaded like the data
            _check_locally(parsed, held_out)
            _check_leakage(parsed, dataset, held_out)
            body["eval_dataset_path"] = await upload_for(ctx, held_out, project)
        body["dataset_path"] = await upload_for(ctx, dataset, project)
    return body


def _local_file(value: object) -> Path | None:
    """A path naming a file on this machine (a blob reference or a path only the daemon's host has is sent as
    it is, for the daemon to confine)."""
    if not isinstance(value, str) or value.startswith("bashgym://"):
        return None
    path = Path(value).expanduser()
    return path if path.is_file() else None


def _check_leakage(request: TrainingRequest, dataset: Path, held_out: Path) -> None:
    """A reward model's held-out pairs may not be training pairs: said here, by line, before anything is sent."""
    if request.method != "reward_model":
        return
    leaks = leaked_pairs(dataset, held_out)
    if not leaks.ok:
        raise RuleRejected(
            "The held-out pairs leak from the training pairs; nothing was uploaded or launched.\n"
            + format_report(leaks),
            hint="Drop the leaked pairs from one of the files.",
        )


def _check_locally(request: TrainingRequest, dataset: Path) -> None:
    """The dataset contract, checked here before the upload: errors name your file and line, not a digest."""
    method = request.method
    try:
        report = validate_request_data(request, dataset)
    except FileNotFoundError as exc:  # the command line names a file that is not there: a usage error
        raise UsageError(str(exc), hint="--dataset-path names a file on this machine.") from exc
    if not report.ok:
        raise RuleRejected(
            f"The dataset breaks the {method} contract; nothing was uploaded or launched.\n{format_report(report)}",
            hint="Fix it; bashgym training validate checks it.",
            details={"summary": report.summary},
        )


def _params(ctx: Ctx) -> dict[str, Any]:
    a = ctx.args
    return {"workspace": ctx.workspace, "dataset_project": a.dataset_project, **official_params(a)}


def _start_args(parser: argparse.ArgumentParser) -> None:
    _request_args(parser)
    parser.add_argument("--wait", action="store_true", help="wait until the run ends, printing its progress")


# Where --wait stops: an end, a pause, or `unknown` (the trainer is gone; only a person's resume or stop moves it on).
TERMINAL = {"completed", "failed", "cancelled", "paused", "unknown"}


@command("training", "start", help="launch a training run (training.launch); answers with its ids at once")(_start_args)
async def training_start(ctx: Ctx) -> int:
    body = await _request_body(ctx)
    started = await ctx.client.request(
        "POST",
        "/v1/training/start",
        body=body,
        params=_params(ctx),
        correlation_id=ctx.args.correlation_id,
    )
    if not ctx.args.wait:
        done(ctx, started, title="Run queued")
        if not ctx.as_json:
            where = f"{started['run_id']} --project {started['project_id']}"
            print(f"\nFollow it: bashgym training log {where} --follow; see it: bashgym training status {where}")
        return EXIT_OK
    final = await _wait(ctx, started["project_id"], started["run_id"], started.get("cursor") or 0)
    if ctx.as_json:
        done(ctx, {**started, "status": final["status"], "run": final})
    else:
        views.run(final)
    return EXIT_OK if final["status"] == "completed" else EXIT_RULE


async def _wait(ctx: Ctx, project: str, run_id: str, cursor: int) -> dict[str, Any]:
    """Follow the run's events from its launch (`cursor`), not the project's first, until it stops moving."""
    while True:
        cursor, _ = await _show_events(ctx, project, run_id, cursor, wait_s=10)
        run = await ctx.client.request(
            "GET", f"/v1/projects/{project}/runs/{run_id}", params={"workspace": ctx.workspace}
        )
        if run["status"] in TERMINAL:
            # Its end was recorded after the page above was read: show the rest, the end among it.
            more = True
            while more:
                cursor, more = await _show_events(ctx, project, run_id, cursor, wait_s=0)
            return dict(run)


async def _show_events(ctx: Ctx, project: str, run_id: str, cursor: int, *, wait_s: float) -> tuple[int, bool]:
    """Print the run's events in one page past `cursor`; return the next cursor and whether more pages follow."""
    page = await ctx.client.request(
        "GET",
        f"/v1/projects/{project}/events",
        params={"after_cursor": cursor, "wait_s": wait_s, "workspace": ctx.workspace},
    )
    for event in page["events"]:
        if event["run_id"] == run_id and not ctx.as_json:
            print(f"  {event['event_type']}: {_brief(event['payload'])}", file=sys.stderr)
    return int(page["next_cursor"]), bool(page["has_more"])


def _brief(payload: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in payload.items() if v not in (None, "", []))[:160]


def _run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run id")
    parser.add_argument("--project", required=True, help="project id (unassigned for runs without context)")


def _log_args(parser: argparse.ArgumentParser) -> None:
    _run_args(parser)
    parser.add_argument("--tail", type=int, default=50, help="the last N lines")
    parser.add_argument("--follow", action="store_true", help="keep printing new lines until the run ends")


@command("training", "log", help="the run's training.log (redacted)")(_log_args)
async def training_log(ctx: Ctx) -> int:
    a = ctx.args
    path, params = f"/v1/projects/{a.project}/runs/{a.run}", {"workspace": ctx.workspace}
    printed: list[str] = []
    while True:
        lines = (await ctx.client.request("GET", f"{path}/log", params={**params, "tail": a.tail}))["lines"]
        new = lines[_overlap(printed, lines) :]
        if ctx.as_json and not a.follow:
            return done(ctx, {"run_id": a.run, "lines": lines})
        for line in new:
            print(line)
        printed = lines
        run = await ctx.client.request("GET", path, params=params)
        if not a.follow or run["status"] in TERMINAL:
            return EXIT_OK
        await asyncio.sleep(2)


def _overlap(previous: list[str], current: list[str]) -> int:
    """How many leading lines of `current` were already printed as the tail of `previous`."""
    for size in range(min(len(previous), len(current)), 0, -1):
        if previous[-size:] == current[:size]:
            return size
    return 0


def _metrics_args(parser: argparse.ArgumentParser) -> None:
    _run_args(parser)
    parser.add_argument("--metric", default="train.loss", help="metric name (default train.loss)")


@command("training", "metrics", help="a metric of a run with its summary")(_metrics_args)
async def training_metrics(ctx: Ctx) -> int:
    a = ctx.args
    trend = await ctx.client.request(
        "GET", f"/v1/projects/{a.project}/trend", params={"metric": a.metric, "run": a.run, "workspace": ctx.workspace}
    )
    if ctx.as_json:
        return done(ctx, trend)
    return done(ctx, {"metric": a.metric, **trend["summary"]}, title=f"{a.metric} of {a.run}")


def _control(verb: str) -> Any:
    async def handler(ctx: Ctx) -> int:
        a = ctx.args
        if verb == "stop" and not getattr(a, "yes", False) and sys.stdin.isatty():
            answer = await asyncio.to_thread(input, f"Stop run {a.run}? It ends as cancelled. [y/N] ")
            if answer.strip().lower() not in {"y", "yes"}:
                print("Not stopped.")
                return EXIT_OK
        result = await ctx.client.request(
            "POST", f"/v1/projects/{a.project}/runs/{a.run}/{verb}", params={"workspace": ctx.workspace}
        )
        return done(ctx, result, title=f"Run {a.run}: {verb}")

    handler.__name__ = f"training_{verb}"
    return handler


def _stop_args(parser: argparse.ArgumentParser) -> None:
    _run_args(parser)
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


command("training", "pause", help="pause a running run at its next step (checkpoint, GPU freed)")(_run_args)(
    _control("pause")
)
command("training", "resume", help="resume a paused run from its checkpoint")(_run_args)(_control("resume"))
command("training", "stop", help="stop a run (status cancelled); asks in a terminal unless --yes")(_stop_args)(
    _control("stop")
)
