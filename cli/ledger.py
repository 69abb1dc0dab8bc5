"""`bashgym ledger ...`: read the record one project at a time; verify, back up and restore it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bashgym.cli import views
from bashgym.cli.output import note
from bashgym.cli.registry import Ctx, command, command_group, done, no_args
from bashgym.cli.tags import add_tag_filter
from bashgym.cli.usage import input_file
from bashgym.cli.views import tag_summary
from bashgym.client.errors import EXIT_OK, EXIT_RULE

command_group("ledger", help="read the ledger (context, runs, metrics, evaluations, events); verify, back up, restore")


def _project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id (there is no implicit project)")


async def _get(ctx: Ctx, path: str, **params: object) -> Any:
    return await ctx.client.request("GET", path, params={"workspace": ctx.workspace, **params})


@command("ledger", "projects", help="list projects")(no_args)
async def ledger_projects(ctx: Ctx) -> int:
    rows = await _get(ctx, "/v1/projects")
    return done(ctx, rows, columns=["project_id", "name", "created_at"], title="Projects")


@command("ledger", "context", help="health signals, inventory, lineage and recent activity of a project")(_project)
async def ledger_context(ctx: Ctx) -> int:
    project = ctx.args.project
    data = await _get(ctx, f"/v1/projects/{project}/context")
    if ctx.as_json:
        return done(ctx, data)
    campaigns = await _get(ctx, f"/v1/projects/{project}/campaigns")
    views.context(project, data, campaigns["campaigns"] if isinstance(campaigns, dict) else campaigns)
    return EXIT_OK


def _runs_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--status", help="queued, running, completed, failed, ...")
    parser.add_argument("--method", help="sft, dpo, grpo, rlvr, distillation, session_distillation")
    parser.add_argument("--experiment", help="experiment id")
    add_tag_filter(parser)
    parser.add_argument("--limit", type=int, default=50, help="at most this many (1..1000; 1..200 a page)")
    parser.add_argument(
        "--filter",
        help="the search grammar: \"metrics.pass@1 > 0.5 and params.learning_rate < 1e-4 and tags.team = 'x'\"",
    )
    parser.add_argument("--sort", help="a column, asc or desc: 'metrics.train.loss:best asc' (default created_at desc)")
    parser.add_argument("--columns", help="columns to add: 'metrics.train.loss, eval.pass@1, params.learning_rate'")
    parser.add_argument("--after", help="the run id the previous page named as next")


@command("ledger", "runs", help="a project's runs, newest first, with filters")(_runs_args)
async def ledger_runs(ctx: Ctx) -> int:
    a = ctx.args
    if a.filter is not None or a.sort is not None or a.columns is not None or a.after is not None:
        return await _runs_table(ctx)
    rows = await _get(
        ctx,
        f"/v1/projects/{a.project}/runs",
        status=a.status,
        method=a.method,
        experiment=a.experiment,
        limit=a.limit,
        tag=a.tag,
    )
    if not ctx.as_json:
        rows = [{**row, "tags": tag_summary(row.get("tags") or {})} for row in rows]
    return done(
        ctx,
        rows,
        columns=["run_id", "experiment_id", "method", "status", "context_status", "tags", "created_at"],
        title=f"Runs of {a.project}",
    )


async def _runs_table(ctx: Ctx) -> int:
    """A page of the runs table: the filter, sort and columns as the web view's search box takes them."""
    a = ctx.args
    page = await _get(
        ctx, f"/v1/projects/{a.project}/runs", status=a.status, method=a.method, experiment=a.experiment,
        limit=a.limit, filter=a.filter, sort=a.sort, columns=a.columns, after=a.after,
    )  # fmt: skip
    if ctx.as_json:
        return done(ctx, page)
    rows = [{**{k: v for k, v in r.items() if k != "values"}, **r["values"]} for r in page["runs"]]
    order = "descending" if page["descending"] else "ascending"
    done(ctx, rows, columns=["run_id", "method", "status", "duration_s", "created_at", *page["columns"]],
         title=f"Runs of {a.project}, by {page['sort']} {order}")  # fmt: skip
    if page["next"]:
        note(f"More runs: add --after {page['next']}")
    return EXIT_OK


def _run_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("run", help="run id")


@command("ledger", "run", help="one run: attempts, evaluations, artifacts, metric summary")(_run_args)
async def ledger_run(ctx: Ctx) -> int:
    record = await _get(ctx, f"/v1/projects/{ctx.args.project}/runs/{ctx.args.run}")
    if ctx.as_json:
        return done(ctx, record)
    views.run(record)
    return EXIT_OK


def _trend_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--metric", required=True, help="e.g. train.loss")
    parser.add_argument("--run", help="one run's points; without it, each run's latest value")


@command("ledger", "trend", help="a metric's points and summary (count, first, latest, min, max, delta, slope)")(
    _trend_args
)
async def ledger_trend(ctx: Ctx) -> int:
    a = ctx.args
    result = await _get(ctx, f"/v1/projects/{a.project}/trend", metric=a.metric, run=a.run)
    if ctx.as_json:
        return done(ctx, result)
    return done(
        ctx,
        {"metric": a.metric, "run": a.run or "(all runs)", **result["summary"]},
        title="Trend",
    )


@command("ledger", "evaluations", help="a project's evaluation suites, results and comparisons")(_project)
async def ledger_evaluations(ctx: Ctx) -> int:
    listing = await _get(ctx, f"/v1/projects/{ctx.args.project}/evaluations")
    if ctx.as_json:
        return done(ctx, listing)
    views.evaluations(listing)
    return EXIT_OK


def _compare_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--run", action="append", required=True, dest="runs", help="a run id (2..20 times)")
    parser.add_argument("--suite", help="the exact evaluation suite id to compare on")


@command("ledger", "compare", help="compare 2..20 runs on the exact same evaluation suite")(_compare_args)
async def ledger_compare(ctx: Ctx) -> int:
    a = ctx.args
    result = await _get(ctx, f"/v1/projects/{a.project}/compare", run=a.runs, suite=a.suite)
    done(ctx, result)
    if not ctx.as_json:
        print(result["environments"]["note"])
    return EXIT_OK


def _events_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--after-cursor", type=int, default=0, help="return events after this cursor")
    parser.add_argument("--limit", type=int, default=100, help="page size (1..1000)")
    parser.add_argument("--wait", type=float, default=0, help="long-poll up to this many seconds (max 30)")


@command("ledger", "events", help="a page of a project's events after a cursor")(_events_args)
async def ledger_events(ctx: Ctx) -> int:
    a = ctx.args
    page = await ctx.client.events(
        a.project, after_cursor=a.after_cursor, limit=a.limit, wait_s=a.wait, workspace=ctx.workspace
    )
    if ctx.as_json:
        return done(ctx, page.model_dump())
    rows = [
        {"cursor": e.cursor, "type": e.event_type, "run": e.run_id, "actor": e.actor, "at": e.created_at}
        for e in page.events
    ]
    done(ctx, rows, title=f"Events after {page.after_cursor}")
    print(f"next_cursor={page.next_cursor} has_more={str(page.has_more).lower()}")
    return EXIT_OK


@command("ledger", "health", help="quick_check, journal mode, migrations, sizes, last cursor, row counts")(no_args)
async def ledger_health(ctx: Ctx) -> int:
    result = await ctx.client.ledger_health()
    done(ctx, result, title="Ledger health")
    return EXIT_OK if result["status"] == "ok" else EXIT_RULE


@command("ledger", "verify", help="recompute the event hash chain; exit 7 naming the first broken cursor")(no_args)
async def ledger_verify(ctx: Ctx) -> int:
    result = await _get(ctx, "/v1/ledger/verify")
    done(ctx, result, title="Hash chain verified" if result["ok"] else "Hash chain BROKEN")
    return EXIT_OK if result["ok"] else EXIT_RULE


def _backup_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--to", required=True, help="new backup file: a name in the daemon's backup directory ($BASHGYM_BACKUP_DIR)"
    )


@command("ledger", "backup", help="copy the live ledger into the backup directory (ledger.backup, admins)")(
    _backup_args
)
async def ledger_backup(ctx: Ctx) -> int:
    # Sent as given: a name is a file in the daemon's backup directory, and an absolute path must lie inside it.
    result = await ctx.client.request("POST", "/v1/ledger/backup", params={"to": ctx.args.to})
    return done(ctx, result, title="Backup written")


def _restore_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", required=True, type=input_file, dest="source", help="backup file to restore")


@command("ledger", "restore", help="verify a backup and make it the ledger (daemon must be stopped)")(_restore_args)
async def ledger_restore(ctx: Ctx) -> int:
    from bashgym.daemon.lockfile import HomeLock
    from bashgym.ledger.restore import restore_ledger

    lock = HomeLock(ctx.settings.lock_path)
    lock.acquire()  # refuses while a daemon runs on this home
    try:
        result = restore_ledger(Path(ctx.args.source).expanduser(), ctx.settings.ledger_path)
    finally:
        lock.release()
    return done(ctx, result, title="Ledger restored")
