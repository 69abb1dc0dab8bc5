"""`bashgym campaign ...`: create a campaign from a spec file, validate it, and move it through its states."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bashgym.cli import views
from bashgym.cli.registry import Ctx, command, command_group, done, read_json_file
from bashgym.cli.tags import add_tag_filter
from bashgym.cli.usage import input_file
from bashgym.cli.views import tag_summary
from bashgym.client.errors import EXIT_OK, EXIT_RULE
from bashgym.client.render import campaign_state

command_group("campaign", help="campaigns: a spec, candidates one changed variable at a time, decisions, reports")
command_group("research", help="where a campaign stands, and waiting for it to change (for agents)")


def _project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")


def _campaign(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("campaign", help="campaign id")
    _project(parser)


def _where(ctx: Ctx, suffix: str = "") -> str:
    return f"/v1/projects/{ctx.args.project}/campaigns{suffix}"


def _create_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--spec", required=True, type=input_file, help="campaign spec (JSON)")


@command("campaign", "create", help="create a draft campaign from a spec file (campaign.create)")(_create_args)
async def campaign_create(ctx: Ctx) -> int:
    spec = read_json_file(ctx.args.spec, what="campaign spec")
    result = await ctx.client.request("POST", _where(ctx), body=spec, params={"workspace": ctx.workspace})
    return done(ctx, result["record"], title=f"Campaign {result['record']['campaign_id']} (draft)")


def _list_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    add_tag_filter(parser)


@command("campaign", "list", help="the project's campaigns and their states")(_list_args)
async def campaign_list(ctx: Ctx) -> int:
    listing = await ctx.client.request("GET", _where(ctx), params={"workspace": ctx.workspace, "tag": ctx.args.tag})
    if ctx.as_json:
        return done(ctx, listing)
    rows = [
        {
            "campaign": c["campaign_id"],
            "status": campaign_state(c["status"], c.get("status_reason")),
            "version": c["version"],
            "title": c["title"],
            "tags": tag_summary(c.get("tags") or {}),
        }
        for c in listing["campaigns"]
    ]
    return done(ctx, rows, title="Campaigns")


@command("campaign", "show", help="a campaign's state, version and pinned spec")(_campaign)
async def campaign_show(ctx: Ctx) -> int:
    campaign = await _current(ctx)
    if ctx.as_json:
        return done(ctx, campaign)
    listing = await ctx.client.request(
        "GET", _where(ctx, f"/{ctx.args.campaign}/iterations"), params={"workspace": ctx.workspace}
    )
    views.campaign(campaign, listing["iterations"])
    return EXIT_OK


async def _current(ctx: Ctx) -> dict[str, Any]:
    return dict(
        await ctx.client.request("GET", _where(ctx, f"/{ctx.args.campaign}"), params={"workspace": ctx.workspace})
    )


def _action_args(parser: argparse.ArgumentParser) -> None:
    _campaign(parser)
    parser.add_argument("--expected-version", type=int, help="fail (409) unless the campaign is at this version")
    parser.add_argument("--reason", default="", help="recorded with the transition")


async def _act(ctx: Ctx, action: str) -> int:
    a = ctx.args
    version = a.expected_version or (await _current(ctx))["version"]
    body = {"expected_version": version, "reason": a.reason}
    result = await ctx.client.request(
        "POST", _where(ctx, f"/{a.campaign}/{action}"), body=body, params={"workspace": ctx.workspace}
    )
    if action == "validate":
        done(
            ctx, result if ctx.as_json else result["findings"] or [{"ok": "ready"}], title=f"Validation of {a.campaign}"
        )
        return EXIT_OK if result["ok"] else EXIT_RULE
    return done(ctx, result["record"], title=f"Campaign {a.campaign}: {result['record']['status']}")


def _register(action: str, help_text: str) -> None:
    async def handler(ctx: Ctx) -> int:
        return await _act(ctx, action)

    handler.__name__ = f"campaign_{action}"
    command("campaign", action, help=help_text)(_action_args)(handler)


_register("validate", "check the campaign's pins; a passing draft becomes ready (exit 7 on findings)")
_register("start", "start a ready campaign (campaign.control)")
_register("pause", "pause an active campaign (campaign.control)")
_register("resume", "resume a paused campaign, or one awaiting authority once satisfied (campaign.control)")
_register("cancel", "cancel a campaign; terminal (campaign.control)")
_register("conclude", "conclude an active or paused campaign as completed (campaign.conclude)")


def _propose_args(parser: argparse.ArgumentParser) -> None:
    _campaign(parser)
    parser.add_argument(
        "--recipe-change", required=True, type=input_file, help='JSON: {"primary_variable", "value", "rationale"}'
    )


@command("campaign", "propose", help="add one candidate: one changed variable and its rationale (campaign.control)")(
    _propose_args
)
async def campaign_propose(ctx: Ctx) -> int:
    body = read_json_file(ctx.args.recipe_change, what="recipe change")
    result = await ctx.client.request(
        "POST", _where(ctx, f"/{ctx.args.campaign}/propose"), body=body, params={"workspace": ctx.workspace}
    )
    return done(ctx, result["record"]["iterations"], title=f"Iterations of {ctx.args.campaign}")


def _queue_args(parser: argparse.ArgumentParser) -> None:
    _campaign(parser)
    parser.add_argument(
        "--hypotheses", required=True, type=input_file, help="JSON list of recipe changes, run in order"
    )


@command("campaign", "queue", help="add a list of candidates, run one at a time in order (campaign.control)")(
    _queue_args
)
async def campaign_queue(ctx: Ctx) -> int:
    body = {"hypotheses": read_json_file(ctx.args.hypotheses, what="hypotheses")}
    result = await ctx.client.request(
        "POST", _where(ctx, f"/{ctx.args.campaign}/queue"), body=body, params={"workspace": ctx.workspace}
    )
    return done(ctx, result["record"]["iterations"], title=f"Iterations of {ctx.args.campaign}")


def _report_args(parser: argparse.ArgumentParser) -> None:
    _campaign(parser)
    parser.add_argument("--format", default="md,json,png", help="comma-separated: md, json, png")
    parser.add_argument("--out", type=Path, help="directory to save the files in (default ./reports/<report_id>)")


@command("campaign", "report", help="render the campaign report (Markdown, PNG charts, JSON, manifest) and save it")(
    _report_args
)
async def campaign_report(ctx: Ctx) -> int:
    a = ctx.args
    formats = [f.strip() for f in a.format.split(",") if f.strip()]
    params = {"workspace": ctx.workspace}
    manifest = await ctx.client.request(
        "POST", _where(ctx, f"/{a.campaign}/reports"), body={"formats": formats}, params=params
    )
    out = a.out or Path("reports") / manifest["report_id"]
    out.mkdir(parents=True, exist_ok=True)
    for entry in [*manifest["files"], {"name": "manifest.json"}]:
        where = f"/v1/projects/{a.project}/reports/{manifest['report_id']}/{entry['name']}"
        data = await ctx.client.raw("GET", where, params=params)
        (out / entry["name"]).write_bytes(data)
    return done(ctx, {**manifest, "saved_to": str(out)}, title=f"Report {manifest['report_id']}")


def _research_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--campaign", required=True, help="campaign id")
    _project(parser)


@command("research", "state", help="where a campaign stands: phase, incumbent, latest decision, budget, next action")(
    _research_args
)
async def research_state(ctx: Ctx) -> int:
    a = ctx.args
    result = await ctx.client.request(
        "GET", f"/v1/projects/{a.project}/campaigns/{a.campaign}/state", params={"workspace": ctx.workspace}
    )
    return done(ctx, result, title=f"Research state of {a.campaign}")


def _wait_args(parser: argparse.ArgumentParser) -> None:
    _research_args(parser)
    parser.add_argument("--after-cursor", type=int, default=0, help="the next_cursor of the previous wait")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (at most 600)")


@command("research", "wait", help="wait for the campaign to change: terminal, action_required, changed or timeout")(
    _wait_args
)
async def research_wait(ctx: Ctx) -> int:
    a = ctx.args
    result = await ctx.client.request(
        "GET",
        f"/v1/projects/{a.project}/campaigns/{a.campaign}/wait",
        params={"workspace": ctx.workspace, "after_cursor": a.after_cursor, "timeout": a.timeout},
        timeout_s=a.timeout + 30,
    )
    return done(ctx, result, title=f"{a.campaign}: {result['outcome']}")


@command(
    "campaign", "doctor", help="check the campaign's pins, authority, scheduler, budget and state; exit 7 unless ok"
)(_campaign)
async def campaign_doctor(ctx: Ctx) -> int:
    result = await ctx.client.request(
        "GET", _where(ctx, f"/{ctx.args.campaign}/doctor"), params={"workspace": ctx.workspace}
    )
    done(ctx, result if ctx.as_json else result["checks"], title=f"Doctor of {ctx.args.campaign}")
    return EXIT_OK if result["ok"] else EXIT_RULE


def _schedule_set_args(parser: argparse.ArgumentParser) -> None:
    _campaign(parser)
    parser.add_argument("--cron", required=True, help="five fields, e.g. '0 9 * * 1'")
    parser.add_argument("--timezone", default="UTC", help="IANA time zone, e.g. Europe/Paris")
    parser.add_argument("--channel", default="", help="where the report is posted (Discord channel)")


@command("campaign", "schedule", "set", help="set the campaign's report schedule (campaign.control)")(
    _schedule_set_args
)
async def campaign_schedule_set(ctx: Ctx) -> int:
    a = ctx.args
    body = {"cron": a.cron, "timezone": a.timezone, "channel": a.channel}
    result = await ctx.client.request(
        "POST", _where(ctx, f"/{a.campaign}/schedule"), body=body, params={"workspace": ctx.workspace}
    )
    return done(ctx, result["record"], title=f"Report schedule of {a.campaign}")


@command("campaign", "schedule", "show", help="the campaign's report schedule and its next firing")(_campaign)
async def campaign_schedule_show(ctx: Ctx) -> int:
    result = await ctx.client.request(
        "GET", _where(ctx, f"/{ctx.args.campaign}/schedule"), params={"workspace": ctx.workspace}
    )
    return done(ctx, result if ctx.as_json else result["schedules"], title=f"Schedules of {ctx.args.campaign}")
