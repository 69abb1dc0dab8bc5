"""`bashgym doctor` and `bashgym curate`: is everything ready before anyone mutates anything, and a
curated, privacy-safe trail of what happened for the team's knowledge base."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bashgym.cli import curation
from bashgym.cli.registry import Ctx, command, command_group, done, no_args, read_json_file
from bashgym.cli.usage import input_file
from bashgym.client.errors import EXIT_OK, EXIT_RULE, EXIT_UNAVAILABLE, ApiError, InvalidInput
from bashgym.daemon.failpoints import reach
from bashgym.daemon.version import bashgym_version

# -- doctor -------------------------------------------------------------------------------------


command_group("sink", help="forward ledger events to HTTP endpoints, signed")


def _doctor_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--skills-dir", type=Path, help="the installed skills bundle to verify (default: BashGym's own)"
    )


def _row(name: str, ready: bool, detail: str, *, required: bool = True, **facts: Any) -> dict[str, Any]:
    return {"check": name, "ready": ready, "required": required, "detail": detail, "facts": facts}


async def _doctor_checks(ctx: Ctx) -> list[dict[str, Any]]:
    from bashgym.cli.skill_bundle import verify

    local_version = bashgym_version()
    try:
        health = await ctx.client.health()
    except ApiError as exc:
        return [
            _row(
                "daemon", False, f"{exc.message} Start it with `bashgym up` (or `bashgym daemon`).", api=ctx.client.api
            )
        ]
    same = health.version == local_version
    detail = f"reachable at {ctx.client.api}, version {health.version}"
    if not same:
        detail += f"; this CLI is {local_version}: upgrade one of them so they match"
    rows = [_row("daemon", same, detail, version=health.version, uptime_s=health.uptime_s)]
    try:
        who = await ctx.client.request("GET", "/v1/auth/whoami")
        capabilities = who.get("capabilities", [])
        rows.append(
            _row(
                "authority",
                True,
                f"{who['actor_id']} holds {len(capabilities)} capabilities",
                capabilities=capabilities,
            )
        )
        server = await ctx.client.request("GET", "/v1/doctor")
        rows += server["checks"]
    except ApiError as exc:
        rows.append(_row("authority", False, f"{exc.message} {exc.hint}".strip()))
    check = verify(ctx.args.skills_dir)
    detail = (
        "verified against skills.lock.json"
        if check.verified
        else f"{'; '.join(check.describe())}. Agents must stop mutating until `bashgym skills check` passes"
    )
    rows.append(_row("skills", check.verified, detail, verified=check.verified))
    return rows


@command("doctor", help="is everything ready: daemon, ledger, authority, lanes, Discord, scheduler, skills")(
    _doctor_args
)
async def doctor(ctx: Ctx) -> int:
    rows = await _doctor_checks(ctx)
    ready = all(r["ready"] for r in rows if r["required"])
    if ctx.as_json:
        done(ctx, {"ready": ready, "checks": rows})
    else:
        for r in rows:
            mark = "ok " if r["ready"] else ("FAIL" if r["required"] else "warn")
            print(f"  [{mark:4}] {r['check']:<28} {r['detail']}")
            for failure in r.get("facts", {}).get("failures", []):  # notices Discord refused: each, and what to do
                print(f"{'':9}- {failure['summary']}\n{'':11}{failure['advice']}")
        print("Ready." if ready else "Not ready: fix the FAIL lines first.")
    if not ready:
        return EXIT_UNAVAILABLE if rows[0]["check"] == "daemon" and not rows[0]["ready"] else EXIT_RULE
    return EXIT_OK


# -- curate -------------------------------------------------------------------------------------


def _curate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, help="the knowledge base's directory for receipts (required)")
    parser.add_argument(
        "--project", help="only this project's activity (its own cursor: curator.<project>, curator:<ws>.<project>)"
    )
    parser.add_argument("--follow", action="store_true", help="keep curating as events arrive (Ctrl-C stops)")


Fetch = Callable[[str, dict[str, Any] | None], Awaitable[Any]]


async def _receipt_for(fetch: Fetch, ws: str, project: str, kind: str, entity: str) -> curation.Receipt | None:
    base = f"/v1/projects/{project}"
    try:
        if kind == "run":
            return curation.run_receipt(await fetch(f"{base}/runs/{entity}", None))
        if kind == "evaluation":
            return curation.evaluation_receipt(ws, await fetch(f"{base}/entities/eval_result/{entity}", None))
        if kind == "decision":
            return curation.decision_receipt(ws, await fetch(f"{base}/entities/decision/{entity}", None))
        if kind in {"dataset", "model"}:
            row = await fetch(f"{base}/entities/{kind}_version/{entity}", None)
            return curation.version_receipt(ws, kind, row)
        if kind == "campaign":
            campaign = await fetch(f"{base}/campaigns/{entity}", None)
            iterations = (await fetch(f"{base}/campaigns/{entity}/iterations", None))["iterations"]
            return curation.campaign_receipt(ws, project, campaign, iterations)
    except ApiError as exc:
        if exc.status == 404:  # gone or never visible to this token: nothing to curate
            return None
        raise
    return None


async def curate_once(ctx: Ctx, root: Path, project: str | None, consumer: str) -> dict[str, int]:
    """Curate from the stored cursor to the head; the cursor moves only after a page's files are written."""
    ws = ctx.workspace or ctx.settings.default_workspace
    client = ctx.client

    async def fetch(path: str, params: dict[str, Any] | None) -> Any:
        return await client.request("GET", path, params={"workspace": ws, **(params or {})})

    stored = await fetch(f"/v1/consumers/{consumer}/cursor", None)
    cursor = int(stored["cursor"])
    counts = {"events": 0, "written": 0, "unchanged": 0}
    events_path = f"/v1/projects/{project}/events" if project else "/v1/events"
    while True:
        page = await fetch(events_path, {"after_cursor": cursor, "limit": 200})
        events = page["events"]
        if not events:
            return counts
        touched: dict[tuple[str, str, str], list[str]] = {}
        for event in events:
            entity = curation.entity_of(event)
            if entity is not None:
                touched.setdefault((event["project_id"], *entity), []).append(event["event_id"])
        for (event_project, kind, entity_id), sources in touched.items():
            receipt = await _receipt_for(fetch, ws, event_project, kind, entity_id)
            if receipt is None:
                continue
            path = receipt.path(root)
            receipt.source_event_ids = sorted({*curation.previous_sources(path), *sources})
            written = await asyncio.to_thread(curation.write_if_changed, path, curation.render(receipt))
            counts["written" if written else "unchanged"] += 1
        counts["events"] += len(events)
        cursor = int(page["next_cursor"])
        reach(ctx.settings.failpoint, "curator.receipts_written")
        await client.request("PUT", f"/v1/consumers/{consumer}/cursor", body={"cursor": cursor})


def curator_consumer(ws: str, project: str | None, *, default_workspace: str) -> str:
    """The curator's durable cursor for `ws` (and `project`): `curator[.P]` in the default workspace, as it always
    was, and `curator:WS[.P]` in another, so each workspace's curator keeps its own place (cursor names are
    daemon-wide; daemon/authority.consumer_scope reads the workspace back from the name)."""
    base = "curator" if ws == default_workspace else f"curator:{ws}"
    return f"{base}.{project}" if project else base


@command("curate", help="write activity receipts for the knowledge base from the ledger, by durable cursor")(
    _curate_args
)
async def curate(ctx: Ctx) -> int:
    a = ctx.args
    if a.root is None:
        raise InvalidInput("curate needs --root DIR, the knowledge base's directory for receipts.")
    ws = ctx.workspace or ctx.settings.default_workspace
    consumer = curator_consumer(ws, a.project, default_workspace=ctx.settings.default_workspace)
    total = {"events": 0, "written": 0, "unchanged": 0}
    while True:
        counts = await curate_once(ctx, a.root, a.project, consumer)
        total = {k: total[k] + counts[k] for k in total}
        if not a.follow:
            break
        if counts["events"] and not ctx.as_json:
            print(f"curated {counts['events']} events: {counts['written']} receipts written", file=sys.stderr)
        await asyncio.sleep(2.0)
    return done(ctx, {**total, "root": str(a.root), "cursor": consumer}, title="Curated")


def _receipt_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=input_file, help="a hand-written receipt: JSON with the receipt's fields")
    parser.add_argument("--root", type=Path, help="write it under this knowledge-base directory (default: print)")


@command("curate", "receipt", help="render a hand-written receipt (JSON) the way curated ones are")(_receipt_args)
async def curate_receipt(ctx: Ctx) -> int:
    data = read_json_file(ctx.args.file, what="receipt")
    if not isinstance(data, dict):
        raise InvalidInput(f"Receipt {ctx.args.file} must hold a JSON object of receipt fields.")
    try:
        receipt = curation.receipt_from_dict(data)
        text = curation.render(receipt)
        path = receipt.path(ctx.args.root) if ctx.args.root else None
    except ValueError as exc:
        raise InvalidInput(f"Receipt {ctx.args.file}: {exc}.") from exc
    if path is None:
        sys.stdout.write(text)
        return EXIT_OK
    written = curation.write_if_changed(path, text)
    return done(ctx, {"path": str(path), "written": written}, title="Receipt")


# -- sinks --------------------------------------------------------------------------------------


def _sink_add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the sink's name (its cursor is sink.<name>)")
    parser.add_argument("--url", required=True, help="the HTTP(S) endpoint that receives signed event batches")
    parser.add_argument(
        "--secret-env", required=True, help="name of the daemon's environment variable holding the HMAC secret"
    )
    parser.add_argument("--project", help="only this project's events")
    parser.add_argument("--types", nargs="+", default=[], metavar="TYPE", help="only these event types")


@command("sink", "add", help="forward ledger events to an HTTP endpoint, signed, by durable cursor")(_sink_add_args)
async def sink_add(ctx: Ctx) -> int:
    a = ctx.args
    body = {"name": a.name, "url": a.url, "secret_env": a.secret_env, "project_id": a.project, "types": a.types}
    result = await ctx.client.request("POST", "/v1/sinks", body=body, params={"workspace": ctx.workspace})
    if not result.get("secret_present") and not ctx.as_json:
        print(f"warning: {a.secret_env} is not set in the daemon's environment; nothing is sent until it is.")
    return done(ctx, result, title="Sink added")


@command("sink", "list", help="the event sinks, with what each delivered and its last error")(no_args)
async def sink_list(ctx: Ctx) -> int:
    result = await ctx.client.request("GET", "/v1/sinks", params={"workspace": ctx.workspace})
    rows = [
        {**s, "delivered": s["status"].get("delivered", 0), "last_error": s["status"].get("last_error", "")}
        for s in result["sinks"]
    ]
    if ctx.as_json:
        return done(ctx, result)
    return done(ctx, rows, columns=["name", "url", "project_id", "delivered", "last_error"], title="Event sinks")


def _sink_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the sink's name")


@command("sink", "remove", help="stop forwarding to a sink")(_sink_name)
async def sink_remove(ctx: Ctx) -> int:
    result = await ctx.client.request("DELETE", f"/v1/sinks/{ctx.args.name}", params={"workspace": ctx.workspace})
    return done(ctx, result, title="Sink removed")
