"""`bashgym daemon|up|bot|status`: the processes of a workspace, started in the foreground or asked how they are."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bashgym.cli.registry import Ctx, command, done, no_args
from bashgym.client.errors import EXIT_OK, EXIT_UNAVAILABLE, ApiError

if TYPE_CHECKING:
    from bashgym.daemon.settings import Settings

# -- the daemon itself --------------------------------------------------------------------------


def _daemon_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="TCP port (default 8321; 0 picks a free one and prints it)")
    parser.add_argument("--uds", type=Path, help="listen on this Unix socket instead of TCP")


def _daemon_settings(ctx: Ctx) -> Any:
    from bashgym.daemon.settings import load_settings

    overrides = {name: getattr(ctx.args, name) for name in ("host", "port", "uds")}
    return load_settings(ctx.environ, **overrides)


@command("daemon", help="run the daemon in the foreground (API, ledger, scheduler)")(_daemon_args)
async def daemon(ctx: Ctx) -> int:
    from bashgym.daemon.server import configure_logging, main

    settings = _daemon_settings(ctx)
    configure_logging(settings)
    return await main(settings, ctx.environ)


@command("up", help="run the daemon, plus the Discord bot when a bot token is configured")(_daemon_args)
async def up(ctx: Ctx) -> int:
    from bashgym.client.http import announced_by
    from bashgym.daemon.server import configure_logging, main

    settings = _daemon_settings(ctx)
    configure_logging(settings)
    if not ctx.environ.get(settings.discord_token_env):
        print(
            f"Discord is not configured: set {settings.discord_token_env} to the bot token to add the bot "
            "(see README, 'Connecting Discord'). Running the daemon alone; notices print here.",
            flush=True,
        )
        return await main(settings, ctx.environ)
    daemon = asyncio.create_task(main(settings, ctx.environ))
    bot: asyncio.subprocess.Process | None = None
    try:
        # The bot starts once this daemon (this process) has announced itself, not on a record a killed one left.
        while not daemon.done() and announced_by(settings.endpoint_path, os.getpid()) is None:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        if not daemon.done():
            bot = await asyncio.create_subprocess_exec(sys.executable, "-m", "bashgym.bot", env=_bot_env(ctx, settings))
            print(f"Discord bot started (pid {bot.pid}).", flush=True)
        return await daemon
    finally:
        if bot is not None and bot.returncode is None:
            await _stop_bot(bot, grace_s=settings.grace_s)


def _bot_env(ctx: Ctx, settings: Settings) -> dict[str, str]:
    """The bot's environment under `up`: it ends with this process (BASHGYM_BOT_PARENT_PID), even one killed
    outright, and holds its notice cursor's lease under this home's name. One `up` runs per home (the daemon's
    lock), so the bot of the next `up` takes that lease over at once instead of waiting out its TTL."""
    return {
        **ctx.environ,
        "BASHGYM_HOME": str(settings.home),
        "BASHGYM_DISCORD_TOKEN_ENV": ctx.environ.get("BASHGYM_DISCORD_TOKEN_ENV", settings.discord_token_env),
        "BASHGYM_BOT_PARENT_PID": str(os.getpid()),
        "BASHGYM_BOT_LEASE_HOLDER": f"bashgym up {settings.home}",
    }


async def _stop_bot(bot: asyncio.subprocess.Process, *, grace_s: float) -> None:
    bot.terminate()  # SIGTERM: the bot closes its Discord connection, then releases its lease if it can
    try:
        async with asyncio.timeout(grace_s):
            await bot.wait()
    except TimeoutError:
        bot.kill()  # a stuck bot must not hang the shutdown of `up`
        await bot.wait()


@command("bot", help="run the Discord bot against the running daemon (token, application and guild ids set)")(no_args)
async def bot(ctx: Ctx) -> int:
    # The bot replaces this process (exec, same pid): a supervisor's SIGTERM or SIGKILL to this pid reaches the
    # bot itself, and no child is left behind. Exec rather than import: the daemon package never imports the bot.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "bashgym.bot"], ctx.environ)


@command("status", help="is the daemon reachable, which version, is the ledger healthy")(no_args)
async def status(ctx: Ctx) -> int:
    try:
        health = await ctx.client.health()
    except ApiError as exc:
        if exc.status != 0:
            raise
        raise ApiError(
            0,
            exc.code,
            exc.message,
            "Start one with `bashgym daemon` (foreground) or `bashgym up`, then run bashgym status.",
        ) from exc
    result: dict[str, Any] = {"daemon": "reachable", "api": ctx.client.api, **health.model_dump()}
    try:
        ledger = await ctx.client.ledger_health()
        result["ledger_detail"] = {k: ledger[k] for k in ("status", "journal_mode", "synchronous", "last_cursor")}
    except ApiError as exc:
        result["ledger_detail"] = {"unavailable": exc.message}
    done(ctx, result, title="BashGym daemon")
    return EXIT_OK if health.status == "ok" else EXIT_UNAVAILABLE


# -- projects and experiments -------------------------------------------------------------------
