"""`bashgym eval|runcard|promote ...`: evaluations, comparisons, RunCards and the promotion gate."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from bashgym.cli import views
from bashgym.cli.registry import Ctx, command, command_group, done, upload_for
from bashgym.client.errors import EXIT_OK, EXIT_RULE
from bashgym.trainers.contracts.placement import describe

command_group("eval", help="evaluate runs and models, compare results, run the reward-hacking canaries")
command_group("runcard", help="RunCards: an immutable record of a run's evidence")
command_group("promote", help="the promotion gate's verdict, and moving an alias when it ships")
command_group("model", help="model versions: register, export as a verified bundle, import")


def _project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")


def _run(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--run", required=True, help="run id")


def _eval_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--suite", default="bash-tasks-v1", help="suite id (default: the shipped bash-tasks-v1)")
    subject = parser.add_mutually_exclusive_group(required=True)
    subject.add_argument("--run", help="evaluate this completed run's model")
    subject.add_argument("--model-version", help="evaluate a registered model version")
    subject.add_argument("--gold", action="store_true", help="run the suite's gold solutions (its own pass rate)")
    parser.add_argument("--samples", type=int, default=1, help="samples per task (n of pass@k)")
    parser.add_argument("--split", choices=["all", "holdout"], default="all", help="which tasks")
    parser.add_argument(
        "--limit-tasks",
        type=int,
        help="N tasks, taken round-robin across families: a partial suite with its own id, a quick look no gate "
        "takes as evidence",
    )
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="tokens a model may generate per answer")
    parser.add_argument("--seed", type=int, default=0, help="the sampling seed")
    parser.add_argument("--min-holdout-pass-at-1", type=float, default=0.0, help="the holdout gate's pass@1 bar")
    parser.add_argument("--compute-target", default="local", help="local or ssh:<device_id>")
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where the model runs on that host: auto takes a CUDA GPU with room for it (bfloat16), else the CPU",
    )
    parser.add_argument(
        "--dataset-path",
        help="held-out rows of the method's data: generation match and loss, preference accuracy, a reward model's "
        "pairs (accuracy, calibration, length bias), or a retriever's queries",
    )
    parser.add_argument(
        "--corpus-path",
        help="a retriever's documents, with --dataset-path; neither evaluates on the shipped split",
    )


@command("eval", "run", help="evaluate a run, a model version or the gold solutions (eval.run); waits")(_eval_args)
async def eval_run(ctx: Ctx) -> int:
    a = ctx.args
    body: dict[str, Any] = {
        "suite_id": a.suite,
        "run_id": a.run,
        "model_version_id": a.model_version,
        "gold": a.gold,
        "samples": a.samples,
        "split": a.split,
        "limit_tasks": a.limit_tasks,
        "temperature": a.temperature,
        "max_new_tokens": a.max_new_tokens,
        "seed": a.seed,
        "min_holdout_pass_at_1": a.min_holdout_pass_at_1,
        "dataset_path": await upload_for(ctx, Path(a.dataset_path).expanduser(), a.project) if a.dataset_path else None,
        "corpus_path": await upload_for(ctx, Path(a.corpus_path).expanduser(), a.project) if a.corpus_path else None,
        "compute_target": a.compute_target,
        "device": a.device,
    }
    params = {"workspace": ctx.workspace}
    job = await ctx.client.request("POST", f"/v1/projects/{a.project}/evaluations", body=body, params=params)
    shown = -1
    while job["status"] in {"queued", "running"}:
        await asyncio.sleep(0.5)
        job = await ctx.client.request(
            "GET", f"/v1/projects/{a.project}/evaluations/{job['evaluation_id']}", params=params
        )
        if job["done"] != shown and job["total"]:
            shown = job["done"]
            print(f"  {job['done']}/{job['total']} tasks", file=sys.stderr, flush=True)
    if job["status"] != "completed":
        done(ctx, job, title=f"Evaluation {job['evaluation_id']} failed")
        return EXIT_RULE
    listing = await ctx.client.request(
        "GET", f"/v1/projects/{a.project}/evaluations", params={**params, "suite": job["suite_id"]}
    )
    result = next(r for r in listing["results"] if r["result_id"] == job["result_id"])
    if ctx.as_json:
        return done(ctx, result)
    views.evaluation(result, ran_on=describe((result.get("details") or {}).get("placement")))
    return EXIT_OK


def _compare_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--baseline", required=True, help="the pinned baseline's result id")
    parser.add_argument("--candidate", required=True, help="the candidate's result id (same suite)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")


@command("eval", "compare", help="paired bootstrap 95% CI of the candidate's pass@1 delta (same suite only)")(
    _compare_args
)
async def eval_compare(ctx: Ctx) -> int:
    a = ctx.args
    body = {"baseline_result_id": a.baseline, "candidate_result_id": a.candidate, "resamples": a.resamples}
    result = await ctx.client.request(
        "POST", f"/v1/projects/{a.project}/evaluations/compare", body=body, params={"workspace": ctx.workspace}
    )
    if ctx.as_json:
        return done(ctx, result)
    views.comparison(result.get("record", result))
    return EXIT_OK


def _results_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--suite", help="only this suite")


@command("eval", "results", help="evaluation results and comparisons of a project")(_results_args)
async def eval_results(ctx: Ctx) -> int:
    a = ctx.args
    listing = await ctx.client.request(
        "GET", f"/v1/projects/{a.project}/evaluations", params={"workspace": ctx.workspace, "suite": a.suite}
    )
    if ctx.as_json:
        return done(ctx, listing)
    views.evaluations(listing)
    return EXIT_OK


def _canary_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", help="task id to aim the canaries at (default: the suite's first)")


@command("eval", "canaries", help="run the reward-hacking canaries here; exit 7 unless every one is caught")(
    _canary_args
)
async def eval_canaries(ctx: Ctx) -> int:
    from bashgym.trainers.environments.canaries import run_canaries
    from bashgym.trainers.environments.terminal_tasks import default_suite

    tasks = default_suite().tasks
    task = next((t for t in tasks if t.task_id == ctx.args.task), None) if ctx.args.task else tasks[0]
    if task is None:
        print(f"error: no task {ctx.args.task!r} in the shipped suite.", file=sys.stderr)
        return EXIT_RULE
    report = await asyncio.to_thread(run_canaries, task)
    if ctx.as_json:
        done(ctx, report)
    else:
        rows = [
            {"canary": name, **{k: v for k, v in r.items() if k != "reasons"}}
            for name, r in report["categories"].items()
        ]
        done(ctx, rows, title=f"Canaries on {task.task_id} (isolation: {report['isolation']})")
        print(f"guard rate: {report['guard_rate']:.2f}")
    return EXIT_OK if report["guard_rate"] == 1.0 else EXIT_RULE


def _card_args(parser: argparse.ArgumentParser) -> None:
    _run(parser)
    parser.add_argument(
        "--claim-tier",
        choices=["local_smoke", "narrow", "broad"],
        help="left out: local_smoke below the method's minimum steps or on partial suites only, else narrow",
    )
    parser.add_argument("--decision", choices=["pending", "hold", "promote", "reject"], default="pending")
    parser.add_argument("--limitation", action="append", default=[], help="a known limitation (repeatable)")


@command("runcard", "create", help="record an immutable RunCard of a run's evidence (runcard.write)")(_card_args)
async def runcard_create(ctx: Ctx) -> int:
    a = ctx.args
    body = {"decision": a.decision, "known_limitations": a.limitation}
    if a.claim_tier:
        body["claim_tier"] = a.claim_tier
    result = await ctx.client.request(
        "POST", f"/v1/projects/{a.project}/runs/{a.run}/runcards", body=body, params={"workspace": ctx.workspace}
    )
    if ctx.as_json:
        return done(ctx, result["record"])
    record = result["record"]
    again = " (it was already)" if result.get("replayed") else ""
    views.say(f"RunCard recorded{again}; its id is the card line below.\n")
    views.runcard(record["card_id"], record["card"], None)
    return EXIT_OK


@command("runcard", "show", help="the run's RunCards, newest first")(_run)
async def runcard_show(ctx: Ctx) -> int:
    a = ctx.args
    listing = await ctx.client.request(
        "GET", f"/v1/projects/{a.project}/runs/{a.run}/runcards", params={"workspace": ctx.workspace}
    )
    if ctx.as_json:
        return done(ctx, listing)
    if not listing["runcards"]:
        views.say(f"Run {a.run} has no RunCard yet: bashgym runcard create --project {a.project} --run {a.run}")
        return EXIT_OK
    newest = listing["runcards"][0]
    views.runcard(newest["card_id"], newest["card"], listing.get("since"))
    if len(listing["runcards"]) > 1:
        views.say(f"\n{len(listing['runcards']) - 1} older RunCards of this run: --json lists them.")
    return EXIT_OK


def _validate_args(parser: argparse.ArgumentParser) -> None:
    _run(parser)
    parser.add_argument("--promotion", action="store_true", help="also apply the promotion gate's checks")


@command("runcard", "validate", help="findings on the run's newest RunCard; exit 7 on any failing one")(_validate_args)
async def runcard_validate(ctx: Ctx) -> int:
    a = ctx.args
    result = await ctx.client.request(
        "GET",
        f"/v1/projects/{a.project}/runs/{a.run}/runcards/validate",
        params={"workspace": ctx.workspace, "promotion": str(a.promotion).lower()},
    )
    done(ctx, result if ctx.as_json else result["findings"], title=f"Findings on {a.run}")
    return EXIT_OK if result["ok"] else EXIT_RULE


@command("promote", "gate", help="does the run ship? blockers with codes and next actions; exit 7 unless it ships")(
    _run
)
async def promote_gate(ctx: Ctx) -> int:
    a = ctx.args
    verdict = await ctx.client.request(
        "GET", f"/v1/projects/{a.project}/runs/{a.run}/gate", params={"workspace": ctx.workspace}
    )
    if ctx.as_json:
        done(ctx, verdict)
    else:
        views.gate(a.project, a.run, verdict)
    return EXIT_OK if verdict["ship"] else EXIT_RULE


def _decide_args(parser: argparse.ArgumentParser) -> None:
    _run(parser)
    parser.add_argument("--alias", default="champion", help="the model-version alias to move")
    parser.add_argument("--model-version", help="the version to point it at (default: the run's own model)")
    parser.add_argument("--override-reason", help="promote despite blockers (needs promotion.override)")


@command("promote", "decide", help="move an alias to the run's model when the gate ships (promotion.decide)")(
    _decide_args
)
async def promote_decide(ctx: Ctx) -> int:
    a = ctx.args
    body = {"alias": a.alias, "model_version_id": a.model_version, "override_reason": a.override_reason}
    result = await ctx.client.request(
        "POST", f"/v1/projects/{a.project}/runs/{a.run}/promote", body=body, params={"workspace": ctx.workspace}
    )
    return done(ctx, result if ctx.as_json else result["alias"], title=f"{a.alias} moved")


def _export_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--version", required=True, help="model version id")
    parser.add_argument(
        "--to",
        required=True,
        help="new directory for the bundle on the daemon's host: a name (it goes in the workspace's folder,"
        " $BASHGYM_HOME/exports/WORKSPACE), or an absolute path inside an export root (BASHGYM_EXPORT_ROOTS)",
    )
    parser.add_argument("--license", default="unspecified", help="license recorded in the manifest")


@command("model", "export", help="write a model version as a bundle with a sha256 manifest and its RunCard")(
    _export_args
)
async def model_export(ctx: Ctx) -> int:
    a = ctx.args
    body = {"to": a.to, "license": a.license}  # the daemon confines it to its export roots
    result = await ctx.client.request(
        "POST",
        f"/v1/projects/{a.project}/model-versions/{a.version}/export",
        body=body,
        params={"workspace": ctx.workspace},
    )
    return done(ctx, result if ctx.as_json else {"bundle": result["bundle"], "files": len(result["manifest"]["files"])})


def _import_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "bundle",
        help="a bundle written by bashgym model export: its name (this workspace's exports), or its directory "
        "inside a data root",
    )
    _project(parser)
    parser.add_argument("--version", help="register under this id (default: the manifest's)")


@command("model", "import", help="verify a bundle's manifest and register the model version (ledger.write)")(
    _import_args
)
async def model_import(ctx: Ctx) -> int:
    a = ctx.args
    # A bare name is a bundle this workspace exported, found by the daemon; a path is made absolute here.
    named = a.bundle if "/" not in a.bundle else str(Path(a.bundle).expanduser().resolve())
    body = {"from_dir": named, "model_version_id": a.version}
    result = await ctx.client.request(
        "POST", f"/v1/projects/{a.project}/model-versions/import", body=body, params={"workspace": ctx.workspace}
    )
    return done(ctx, result["record"], title="Imported model version")
