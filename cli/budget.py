"""`bashgym budget ...`: a project's GPU-hour and run budget, as launches see it."""

from __future__ import annotations

import argparse

from bashgym.cli.registry import Ctx, command, command_group, done

command_group("budget", help="a project's or campaign's run and GPU-hour budget: show, set, amend")


def _project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")
    parser.add_argument("--campaign", help="a campaign's own budget instead of the project's")


def _scope(ctx: Ctx) -> str:
    return f"campaign-{ctx.args.campaign}" if ctx.args.campaign else "project"


@command("budget", "show", help="limits, amendments, reservations, settled use and what remains")(_project)
async def budget_show(ctx: Ctx) -> int:
    result = await ctx.client.request(
        "GET", f"/v1/projects/{ctx.args.project}/budget", params={"workspace": ctx.workspace, "scope": _scope(ctx)}
    )
    return done(ctx, result, title=f"Budget of {ctx.args.project}")


def _change_args(parser: argparse.ArgumentParser) -> None:
    _project(parser)
    parser.add_argument("--gpu-hours", type=float, default=0.0, help="GPU-hours to add (may be negative)")
    parser.add_argument("--runs", type=int, default=0, help="runs to add (may be negative)")
    parser.add_argument("--reason", required=True, help="why; it is recorded with the entry")


async def _change(ctx: Ctx, kind: str) -> int:
    a = ctx.args
    result = await ctx.client.request(
        "POST",
        f"/v1/projects/{a.project}/budget/{kind}",
        body={"gpu_hours": a.gpu_hours, "runs": a.runs, "reason": a.reason, "scope": _scope(ctx)},
        params={"workspace": ctx.workspace},
    )
    return done(ctx, result, title=f"Budget of {a.project}")


@command("budget", "set", help="add a budget limit (budget.amend); limits add up")(_change_args)
async def budget_set(ctx: Ctx) -> int:
    return await _change(ctx, "limit")


@command("budget", "amend", help="amend the budget up or down (budget.amend)")(_change_args)
async def budget_amend(ctx: Ctx) -> int:
    return await _change(ctx, "amend")
