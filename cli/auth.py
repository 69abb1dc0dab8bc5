"""`bashgym auth ...` and `bashgym authority ...`: tokens, Discord grants, whoami, audit."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

from bashgym.cli.registry import Ctx, command, command_group, done, no_args
from bashgym.client.errors import EXIT_OK, InvalidInput

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


command_group("auth", help="API tokens: issue, list, revoke, whoami, and the audit of who changed what")
command_group("authority", help="Discord grants: which users and roles hold which capabilities")


def parse_duration_s(text: str) -> int:
    """'90m', '12h', '30d' -> seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise InvalidInput(f"{text!r} is not a duration.", hint="Use a number and a unit: 30m, 12h, 30d, 2w.")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def _grant_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="", help="viewer, researcher, lead or admin")
    parser.add_argument(
        "--capability",
        action="append",
        default=[],
        dest="capabilities",
        help="a capability to grant (repeatable), e.g. promotion.override",
    )
    parser.add_argument("--project", help="limit the grant to one project")


def _issue_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--actor", required=True, help="who the token acts as, e.g. alice or ci-bot")
    _grant_args(parser)
    parser.add_argument("--expires-in", help="lifetime such as 12h or 30d (default: no expiry)")


@command("auth", "issue", help="issue an API token (shown once) with a profile or capabilities")(_issue_args)
async def auth_issue(ctx: Ctx) -> int:
    a = ctx.args
    body = {
        "actor_id": a.actor,
        "profile": a.profile,
        "capabilities": a.capabilities,
        "project_id": a.project,
        "workspace_id": ctx.workspace,
        "expires_in_s": parse_duration_s(a.expires_in) if a.expires_in else None,
    }
    issued = await ctx.client.request("POST", "/v1/auth/tokens", body=body)
    if not ctx.as_json:
        print("Store this token now; it is not shown again.")
    return done(ctx, issued, title="Token issued")


@command("auth", "list", help="list API tokens (never their values)")(no_args)
async def auth_list(ctx: Ctx) -> int:
    rows = await ctx.client.request("GET", "/v1/auth/tokens")
    columns = ["token_id", "actor_id", "profile", "capabilities", "project_id", "expires_at", "revoked_at"]
    return done(ctx, rows, columns=columns, title="API tokens")


def _token_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token_id", help="the token's id (from bashgym auth list), not its value")


@command("auth", "revoke", help="revoke an API token; it is refused from the next request on")(_token_id)
async def auth_revoke(ctx: Ctx) -> int:
    result = await ctx.client.request("POST", f"/v1/auth/tokens/{ctx.args.token_id}/revoke")
    return done(ctx, result, title="Token revoked")


@command("auth", "whoami", help="who the current token acts as, and its capabilities")(no_args)
async def auth_whoami(ctx: Ctx) -> int:
    return done(ctx, (await ctx.client.whoami()).model_dump(), title="Current principal")


def _audit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", default="7d", help="an ISO time or a duration back from now (default 7d)")
    parser.add_argument("--actor", help="only this actor (e.g. alice, discord:1234)")
    parser.add_argument("--limit", type=int, default=1000, help="at most this many (newest)")


@command("auth", "audit", help="list mutations with actor, credential, capability and correlation id")(_audit_args)
async def auth_audit(ctx: Ctx) -> int:
    a = ctx.args
    since = a.since
    if _DURATION.match(since):
        since = (datetime.now(UTC) - timedelta(seconds=parse_duration_s(since))).isoformat().replace("+00:00", "Z")
    rows = await ctx.client.request(
        "GET", "/v1/auth/audit", params={"since": since, "actor": a.actor, "limit": a.limit}
    )
    columns = [
        "cursor",
        "created_at",
        "actor",
        "credential_kind",
        "capability",
        "event_type",
        "project_id",
        "correlation_id",
    ]
    return done(ctx, rows, columns=columns, title=f"Mutations since {since}")


def _authority_grant_args(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--discord-user", help="a Discord user id")
    who.add_argument("--discord-role", help="a Discord role id")
    _grant_args(parser)


@command("authority", "grant", help="grant a Discord user or role a profile or capabilities")(_authority_grant_args)
async def authority_grant(ctx: Ctx) -> int:
    a = ctx.args
    kind, subject = ("user", a.discord_user) if a.discord_user else ("role", a.discord_role)
    body = {
        "subject_kind": kind,
        "subject_id": subject,
        "profile": a.profile,
        "capabilities": a.capabilities,
        "project_id": a.project,
    }
    record = await ctx.client.request("POST", "/v1/authority/grants", body=body, params={"workspace": ctx.workspace})
    return done(ctx, record, title="Granted")


def _grant_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("grant_id", help="the grant's id (from bashgym authority list)")


@command("authority", "revoke", help="revoke a Discord grant; it stops applying at the next request")(_grant_id)
async def authority_revoke(ctx: Ctx) -> int:
    result = await ctx.client.request(
        "POST", f"/v1/authority/grants/{ctx.args.grant_id}/revoke", params={"workspace": ctx.workspace}
    )
    return done(ctx, result, title="Grant revoked")


@command("authority", "list", help="list the workspace's Discord grants")(no_args)
async def authority_list(ctx: Ctx) -> int:
    rows = await ctx.client.request("GET", "/v1/authority/grants", params={"workspace": ctx.workspace})
    columns = ["grant_id", "subject_kind", "subject_id", "profile", "capabilities", "project_id", "revoked_at"]
    done(ctx, rows, columns=columns, title="Discord grants")
    return EXIT_OK
