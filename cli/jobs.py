"""`bashgym jobs ...` and `bashgym compute plan`: training on someone else's compute, kept with its upstream id.

`jobs hf submit` runs a request as a Hugging Face Job (data and base model from the Hub, the model pushed to a
private repo, then imported); `jobs provider submit` fine-tunes on a managed provider; `jobs list|show|follow|cancel`
work on both. `compute plan` renders a SkyPilot or dstack task and, with --launch, submits it where the engine is
configured where the daemon runs.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path
from typing import Any

from bashgym.cli.official import check_official, official_params, official_run_args
from bashgym.cli.output import console
from bashgym.cli.registry import Ctx, command, command_group, done, no_args, read_json_file, upload_for
from bashgym.cli.usage import UsageError, input_file
from bashgym.client.errors import EXIT_OK, EXIT_RULE
from bashgym.client.specs import run_project
from bashgym.trainers.contracts.request import METHODS, merge_config_file

command_group("jobs", help="external jobs: Hugging Face Jobs and managed provider fine-tunes")
command_group("jobs", "hf", help="Hugging Face Jobs: submit, flavors")
command_group("jobs", "provider", help="managed fine-tuning providers (OpenAI-compatible API): submit")
command_group("compute", help="SkyPilot and dstack plans of a training request")
ENDED = {"completed", "failed", "cancelled"}
_DURATION = re.compile(r"^(?P<n>[0-9]+(\.[0-9]+)?)(?P<unit>[smhd]?)$")


def duration_s(text: str) -> int:
    """'7200', '90m', '2h', '1d' as seconds."""
    found = _DURATION.match(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: write 7200, 90m, 2h or 1d")
    return int(float(found["n"]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[found["unit"]])


def _request_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", required=True, choices=METHODS, help="the training method")
    official_run_args(
        parser,
        model_help="base model: a Hub id or provider model",
        model_version_help="a registered model version of --project, a Hub repo (hf://): the job downloads it",
    )
    parser.add_argument("--config", type=input_file, help="JSON file of method fields")
    parser.add_argument("--tracking-context", type=input_file, help="JSON file with the run's tracking context")


def _data_args(parser: argparse.ArgumentParser) -> None:
    """The data the daemon reads and uploads: a file here, or a registered dataset version's stored content."""
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--dataset-path", type=input_file, help="training data (JSONL); uploaded")
    data.add_argument("--dataset-version", help="a registered dataset version of --project: its stored content")


def _request(ctx: Ctx, command: str) -> dict[str, Any]:
    a = ctx.args
    check_official(a, ctx.settings.project, command=command)
    body: dict[str, Any] = merge_config_file(read_json_file(a.config, what="config")) if a.config else {}
    body["method"] = a.method
    if a.base_model is not None:  # else the daemon names --model-version's Hub repo
        body["base_model"] = a.base_model
    if a.tracking_context:
        body["tracking_context"] = read_json_file(a.tracking_context, what="tracking context")
    return body


def _params(ctx: Ctx) -> dict[str, Any]:
    return {"workspace": ctx.workspace, **official_params(ctx.args)}


def _hf_args(parser: argparse.ArgumentParser) -> None:
    _request_args(parser)
    parser.add_argument(
        "--dataset-version",
        help="the registered dataset version of --project that --dataset-repo's file is (its digest is checked)",
    )
    parser.add_argument("--dataset-repo", required=True, help="Hub dataset repo the job downloads (owner/name)")
    parser.add_argument("--dataset-file", default="train.jsonl", help="file in it (default train.jsonl)")
    parser.add_argument("--dataset-revision", default="main", help="branch or commit (default main)")
    parser.add_argument("--eval-file", help="held-out file in the same dataset repo")
    parser.add_argument("--output-repo", required=True, help="private Hub repo the job pushes its model to")
    parser.add_argument("--flavor", default="a10g-small", help="job hardware (bashgym jobs hf flavors)")
    parser.add_argument(
        "--timeout", type=duration_s, default=7200, help="longest the job may run: 2h, 90m (default 2h)"
    )
    parser.add_argument("--cost-ceiling", type=float, help="most the job may cost, USD (shortens the timeout to fit)")
    parser.add_argument(
        "--image", help="one of the operator's allowed images, NAME@sha256:... (default: its first; jobs surfaces)"
    )
    parser.add_argument("--follow", action="store_true", help="follow the job until it ends")


@command("jobs", "hf", "submit", help="run a training request as a Hugging Face Job (training.launch)")(_hf_args)
async def jobs_hf_submit(ctx: Ctx) -> int:
    a = ctx.args
    dataset = {"repo": a.dataset_repo, "file": a.dataset_file, "revision": a.dataset_revision}
    if a.eval_file:
        dataset["eval_file"] = a.eval_file
    body: dict[str, Any] = {
        "request": _request(ctx, "bashgym jobs hf submit"),
        "dataset": dataset,
        "output_repo": a.output_repo,
        "flavor": a.flavor,
        "timeout_s": a.timeout,
    }
    if a.cost_ceiling is not None:
        body["cost_ceiling_usd"] = a.cost_ceiling
    if a.image:
        body["image"] = a.image
    job = await ctx.client.request("POST", "/v1/jobs/hf", body=body, params=_params(ctx))
    return await _submitted(ctx, job)


@command("jobs", "hf", "flavors", help="the Hub's job hardware with GPUs and price per hour")(no_args)
async def jobs_hf_flavors(ctx: Ctx) -> int:
    result = await ctx.client.request("GET", "/v1/jobs/hf/flavors", params={"workspace": ctx.workspace})
    return done(ctx, result if ctx.as_json else result["flavors"], title="Hugging Face Jobs hardware")


def _provider_args(parser: argparse.ArgumentParser) -> None:
    _request_args(parser)
    parser.add_argument("--provider", required=True, help="a provider the operator configured (bashgym jobs surfaces)")
    _data_args(parser)
    parser.add_argument("--epochs", type=int, help="the provider's n_epochs")
    parser.add_argument("--batch-size", type=int, help="the provider's batch_size")
    parser.add_argument("--lr-multiplier", type=float, help="the provider's learning_rate_multiplier")
    parser.add_argument("--suffix", help="suffix of the provider's model name")
    parser.add_argument("--cost-ceiling", type=float, required=True, help="most the fine-tune may cost, USD")
    parser.add_argument("--follow", action="store_true", help="follow the job until it ends")


@command("jobs", "provider", "submit", help="fine-tune on a managed provider (training.launch)")(_provider_args)
async def jobs_provider_submit(ctx: Ctx) -> int:
    a = ctx.args
    request = await _with_upload(ctx, _request(ctx, "bashgym jobs provider submit"))
    hyper = {"n_epochs": a.epochs, "batch_size": a.batch_size, "learning_rate_multiplier": a.lr_multiplier}
    body: dict[str, Any] = {
        "request": request,
        "hyperparameters": {k: v for k, v in hyper.items() if v is not None},
        "cost_ceiling_usd": a.cost_ceiling,
    }
    if a.suffix:
        body["suffix"] = a.suffix
    path = f"/v1/jobs/providers/{a.provider}"
    job = await ctx.client.request("POST", path, body=body, params=_params(ctx))
    return await _submitted(ctx, job)


async def _with_upload(ctx: Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """The request with --dataset-path uploaded for the project it will be recorded under (no host path is sent);
    a --dataset-version's content the daemon holds already."""
    if not ctx.args.dataset_path:
        return request
    context = request.get("tracking_context")
    project = run_project(
        context if isinstance(context, dict) else None, ctx.workspace or ctx.settings.default_workspace
    )
    return {**request, "dataset_path": await upload_for(ctx, Path(ctx.args.dataset_path).expanduser(), project)}


async def _submitted(ctx: Ctx, job: dict[str, Any]) -> int:
    if ctx.args.follow:
        return await _follow(ctx, job)
    if ctx.as_json:
        return done(ctx, job)
    out = console()
    where = job.get("upstream_job_id") or "no upstream id yet"
    out.print(f"External job {job['job_id']} ({job['surface']}, {where}): {job['state']}", markup=False)
    out.print(f"  run {job['run_id']} in project {job['project_id']}", markup=False)
    if job.get("reason"):
        out.print(f"  {job['reason']}", markup=False)
    out.print(f"  follow it: bashgym jobs follow {job['job_id']}", markup=False)
    return EXIT_OK if job["state"] not in {"failed", "cancelled"} else EXIT_RULE


def _list_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", help="only this project")
    parser.add_argument("--surface", choices=["hf-jobs", "managed", "skypilot", "dstack"], help="only this surface")
    parser.add_argument("--state", help="only jobs in this state")
    parser.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")


@command("jobs", "list", help="external jobs of the projects you may read, newest first")(_list_args)
async def jobs_list(ctx: Ctx) -> int:
    a = ctx.args
    params = {"workspace": ctx.workspace, "project": a.project, "surface": a.surface, "state": a.state}
    result = await ctx.client.request(
        "GET", "/v1/jobs", params={**{k: v for k, v in params.items() if v}, "limit": a.limit}
    )
    if ctx.as_json:
        return done(ctx, result)
    columns = ["job_id", "project_id", "surface", "upstream_job_id", "state", "flavor", "run_id", "created_at"]
    return done(ctx, result["jobs"], columns=columns, title="External jobs")


def _job_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="external job id (ext-...)")
    parser.add_argument("--project", help="its project (found from the job id when left out)")


async def _project_of(ctx: Ctx) -> str:
    if ctx.args.project:
        return str(ctx.args.project)
    listing = await ctx.client.request("GET", "/v1/jobs", params={"workspace": ctx.workspace, "limit": 500})
    for job in listing["jobs"]:
        if job["job_id"] == ctx.args.job:
            return str(job["project_id"])
    raise UsageError(f"No external job {ctx.args.job} among the jobs you may read.", hint="bashgym jobs list")


@command("jobs", "show", help="one external job: upstream id, receipt, state, lineage, result")(_job_args)
async def jobs_show(ctx: Ctx) -> int:
    project = await _project_of(ctx)
    job = await ctx.client.request(
        "GET", f"/v1/projects/{project}/jobs/{ctx.args.job}", params={"workspace": ctx.workspace}
    )
    return done(ctx, job, title=f"External job {ctx.args.job}")


@command("jobs", "follow", help="print a job's observations as they come, until it ends")(_job_args)
async def jobs_follow(ctx: Ctx) -> int:
    project = await _project_of(ctx)
    job = await ctx.client.request(
        "GET", f"/v1/projects/{project}/jobs/{ctx.args.job}", params={"workspace": ctx.workspace}
    )
    return await _follow(ctx, job)


async def _follow(ctx: Ctx, job: dict[str, Any], poll_s: float = 2.0) -> int:
    """Observations in order (states, log lines, metrics, events) until the job ends; its end as the exit code."""
    out = console()
    base = f"/v1/projects/{job['project_id']}/jobs/{job['job_id']}"
    after = 0
    while True:
        page = await ctx.client.request(
            "GET", f"{base}/observations", params={"workspace": ctx.workspace, "after": after}
        )
        for item in page["observations"]:
            if ctx.as_json:
                done(ctx, item)
                continue
            lines = (item.get("data") or {}).get("lines") if item["kind"] == "log" else None
            for line in lines or [item["message"]]:
                out.print(f"[{item['kind']}] {line}", markup=False, highlight=False)
        after = page["next_after"]
        job = await ctx.client.request("GET", base, params={"workspace": ctx.workspace})
        if job["state"] in ENDED and not page["observations"]:
            if not ctx.as_json:
                out.print(f"External job {job['job_id']} {job['state']}: {job.get('reason') or ''}", markup=False)
            return EXIT_OK if job["state"] == "completed" else EXIT_RULE
        await asyncio.sleep(poll_s)


@command("jobs", "cancel", help="cancel an external job upstream (training.stop, or your own with training.control)")(
    _job_args
)
async def jobs_cancel(ctx: Ctx) -> int:
    project = await _project_of(ctx)
    job = await ctx.client.request(
        "POST", f"/v1/projects/{project}/jobs/{ctx.args.job}/cancel", params={"workspace": ctx.workspace}
    )
    return done(ctx, job, title=f"Cancellation of {ctx.args.job} asked")


@command("jobs", "surfaces", help="which external surfaces the daemon can use: keys present, verified identity")(
    no_args
)
async def jobs_surfaces(ctx: Ctx) -> int:
    result = await ctx.client.request("GET", "/v1/jobs/surfaces", params={"workspace": ctx.workspace})
    return done(ctx, result, title="External surfaces")


def _plan_args(parser: argparse.ArgumentParser) -> None:
    _request_args(parser)
    parser.add_argument("--engine", required=True, choices=["skypilot", "dstack"], help="the engine to plan for")
    _data_args(parser)
    parser.add_argument("--accelerators", default="H100:1", help="NAME[:COUNT] (default H100:1)")
    parser.add_argument("--cpus", help="vCPUs: 8 (exactly) or 8+ (at least)")
    parser.add_argument("--memory", help="memory in GB: 32 or 32+")
    parser.add_argument("--disk-size-gb", type=int, help="disk, GB")
    parser.add_argument("--use-spot", action="store_true", help="spot instances")
    parser.add_argument("--cloud", help="cloud (SkyPilot infra, dstack backend)")
    parser.add_argument("--region", help="region in that cloud")
    parser.add_argument(
        "--checkpoint-store",
        help="bucket URI (SkyPilot) or volume name (dstack) for outputs; a launch needs one the daemon reads",
    )
    parser.add_argument("--max-price-per-hour", type=float, help="most an hour of the machine may cost, USD")
    parser.add_argument("--timeout-minutes", type=int, help="longest the task may run (a launch needs it)")
    parser.add_argument("--launch", action="store_true", help="submit through the engine's client where configured")
    parser.add_argument("--out", type=Path, help="write the plan file here too")


@command("compute", "plan", help="render a SkyPilot or dstack task from a training request (a plan runs nothing)")(
    _plan_args
)
async def compute_plan(ctx: Ctx) -> int:
    a = ctx.args
    request = await _with_upload(ctx, _request(ctx, "bashgym compute plan"))
    fields = ("accelerators", "cpus", "memory", "disk_size_gb", "cloud", "region", "checkpoint_store")
    options: dict[str, Any] = {name: getattr(a, name) for name in fields if getattr(a, name) is not None}
    options.update(use_spot=a.use_spot)
    if a.max_price_per_hour is not None:
        options["max_price_per_hour"] = a.max_price_per_hour
    if a.timeout_minutes is not None:
        options["timeout_minutes"] = a.timeout_minutes
    body = {"engine": a.engine, "request": request, "options": options, "launch": a.launch}
    plan = await ctx.client.request("POST", "/v1/compute/plans", body=body, params=_params(ctx))
    if a.out:
        a.out.write_text(plan["text"])
    if ctx.as_json:
        return done(ctx, plan)
    out = console()
    out.print(plan["text"], markup=False, highlight=False)
    checked = plan["validation"]
    out.print(f"plan {plan['plan_id']} (sha256 {plan['plan_digest'][:12]}): {checked['reason']}", markup=False)
    for warning in plan.get("warnings") or []:
        out.print(f"warning: {warning}", markup=False)
    if plan["launched"]:
        out.print(f"launched as external job {plan['job']['job_id']} ({plan['job']['upstream_job_id']})", markup=False)
    else:
        out.print(f"nothing ran: {plan['reason']}", markup=False)
        out.print(f"run it by hand: {plan['command']}", markup=False)
    return EXIT_OK if checked.get("valid") is not False else EXIT_RULE
