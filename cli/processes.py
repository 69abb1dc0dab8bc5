"""`bashgym daemon|up|bot|status|logs`: the processes of a workspace, started in the foreground, asked how they are,
or read in their log."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from bashgym.cli.registry import Ctx, command, done, no_args
from bashgym.cli.usage import UsageError
from bashgym.client.errors import EXIT_OK, EXIT_UNAVAILABLE, ApiError, NotFound

if TYPE_CHECKING:
    from bashgym.daemon.settings import Settings

# -- the daemon itself --------------------------------------------------------------------------


def _daemon_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="TCP port (default 8321; 0 picks a free one and prints it)")
    parser.add_argument("--uds", type=Path, help="listen on this Unix socket instead of TCP")
    # default None: an absent flag leaves BASHGYM_LOG_CONSOLE and BASHGYM_CONSOLE_NOTICES to decide.
    parser.add_argument(
        "--log-console",
        action="store_true",
        default=None,
        help="also write the log to stderr at its level (default: the home's logs/daemon.log; stderr gets warnings)",
    )
    parser.add_argument(
        "--console-notices",
        action="store_true",
        default=None,
        help="also print notices on stdout when Discord is not configured (the API serves them either way)",
    )


def _daemon_settings(ctx: Ctx) -> Any:
    from bashgym.daemon.settings import load_settings

    names = ("host", "port", "uds", "log_console", "console_notices")
    return load_settings(ctx.environ, **{name: getattr(ctx.args, name) for name in names})


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
        notices = "notices print here" if settings.console_notices else "add --console-notices to print notices here"
        print(
            f"Discord is not configured: set {settings.discord_token_env} to the bot token to add the bot "
            f"(see docs/discord.md). Running the daemon alone; {notices}.",
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
            # The bot's log goes beside the daemon's, not to the terminal `up` was started in.
            bot_log = settings.home / BOT_LOG
            bot_log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with os.fdopen(os.open(bot_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as out:
                bot = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bashgym.bot", env=_bot_env(ctx, settings), stdout=out, stderr=out
                )
            print(f"Discord bot started (pid {bot.pid}); its log: {bot_log} (bashgym logs --bot).", flush=True)
        return await daemon
    finally:
        if bot is not None and bot.returncode is None:
            await _stop_bot(bot, grace_s=settings.grace_s)


def _bot_env(ctx: Ctx, settings: Settings) -> dict[str, str]:
    """The bot's environment under `up`: what any child of the daemon gets (child_environment), the bot's own
    settings (bot/settings.py reads BASHGYM_API, BASHGYM_DISCORD_* and BASHGYM_BOT_*) and its Discord token; none
    of the daemon's other secrets. It ends with this process (BASHGYM_BOT_PARENT_PID), even one killed outright,
    and holds its notice cursor's lease under this home's name. One `up` runs per home (the daemon's lock), so the
    bot of the next `up` takes that lease over at once instead of waiting out its TTL."""
    from bashgym.daemon.settings import child_environment

    token_env = ctx.environ.get("BASHGYM_DISCORD_TOKEN_ENV", settings.discord_token_env)
    own = {
        name: value
        for name, value in ctx.environ.items()
        if name in {token_env, "BASHGYM_API"} or name.startswith(("BASHGYM_DISCORD_", "BASHGYM_BOT_"))
    }
    return {
        **child_environment(settings, ctx.environ),
        **own,
        "BASHGYM_HOME": str(settings.home),
        "BASHGYM_DISCORD_TOKEN_ENV": token_env,
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
    result: dict[str, Any] = {
        "daemon": "reachable",
        "api": ctx.client.api,
        "default_project": ctx.settings.project or "none (bashgym project use PROJECT sets one)",
        **health.model_dump(),
    }
    try:
        ledger = await ctx.client.ledger_health()
        result["ledger_detail"] = {k: ledger[k] for k in ("status", "journal_mode", "synchronous", "last_cursor")}
    except ApiError as exc:
        result["ledger_detail"] = {"unavailable": exc.message}
    done(ctx, result, title="BashGym daemon")
    return EXIT_OK if health.status == "ok" else EXIT_UNAVAILABLE


# -- the daemon's log ---------------------------------------------------------------------------

FOLLOW_POLL_S = 0.25
BOT_LOG = Path("logs", "bot.log")  # under the home: the bot's output when `bashgym up` runs it


class LogFollower:
    """Reads the lines a log file gains, across its rotation: when the file is renamed away and a new one takes
    its name, or it is truncated, the rest of the old one comes first, then the new one from its start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = None
        self._partial = b""  # the last line read, while it has no newline yet

    def open(self) -> bool:
        """Open the file at `path` from its start; False when there is none."""
        self.close()
        try:
            self._file = self.path.open("rb")
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._partial = b""

    def read_new(self) -> list[str]:
        """The complete lines written since the last call (the first call: all of them)."""
        if self._file is None and not self.open():
            return []
        lines = self._read()
        if self._is_replaced():
            lines += self._read() + self.rest()  # the writer has let go of the old file: this is all of it
            if self.open():
                lines += self._read()
        elif self._is_truncated():
            self._seek_start()
            lines += self._read()
        return lines

    def rest(self) -> list[str]:
        """The last line read when it has no newline: a file that ends so, or a writer in the middle of a line."""
        partial, self._partial = self._partial, b""
        return [partial.decode(errors="replace")] if partial else []

    def _read(self) -> list[str]:
        assert self._file is not None
        *complete, self._partial = (self._partial + self._file.read()).split(b"\n")
        return [line.decode(errors="replace") for line in complete]

    def _is_replaced(self) -> bool:
        assert self._file is not None
        try:
            now = self.path.stat()
        except FileNotFoundError:
            return False  # renamed away, its successor not created yet: keep the old one until it is
        held = os.fstat(self._file.fileno())
        return (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino)

    def _is_truncated(self) -> bool:
        assert self._file is not None
        return os.fstat(self._file.fileno()).st_size < self._file.tell()

    def _seek_start(self) -> None:
        assert self._file is not None
        self._file.seek(0)
        self._partial = b""


def _line_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines; use 0 or more")
    return count


def _logs_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lines", type=_line_count, default=50, metavar="N", help="print the last N lines (default 50)"
    )
    parser.add_argument(
        "--follow", action="store_true", help="then keep printing lines as the daemon writes them, until Ctrl-C"
    )
    parser.add_argument("--bot", action="store_true", help="the Discord bot's log under `bashgym up` instead")


@command("logs", help="print the end of the daemon's log ($BASHGYM_HOME/logs/daemon.log), or --follow it")(_logs_args)
async def logs(ctx: Ctx) -> int:
    a = ctx.args
    if a.follow and ctx.as_json:
        raise UsageError(
            "--follow prints lines as they come, which one JSON document cannot hold.",
            hint="Drop --json to follow the log, or --follow for the last lines as JSON.",
        )
    path = ctx.settings.home / BOT_LOG if a.bot else ctx.settings.log_path
    follower = LogFollower(path)
    if not follower.open():
        raise NotFound(
            f"There is no {'bot' if a.bot else 'daemon'} log at {path}.",
            hint="Start the daemon with `bashgym up` (or `bashgym daemon`): it logs there. A daemon of another home "
            "logs in that home; set BASHGYM_HOME to it.",
        )
    try:
        lines = follower.read_new() + ([] if a.follow else follower.rest())
        last = lines[-a.lines :] if a.lines else []
        if ctx.as_json:
            return done(ctx, {"path": str(path), "lines": last})
        _print_lines(last)
        if a.follow:
            await _follow(follower)
        return EXIT_OK
    finally:
        follower.close()


async def _follow(follower: LogFollower, *, poll_s: float = FOLLOW_POLL_S) -> None:
    """Print the lines the log gains, until Ctrl-C (which main answers with exit 130)."""
    while True:
        await asyncio.sleep(poll_s)
        _print_lines(follower.read_new())


def _print_lines(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        sys.stdout.flush()


# -- projects and experiments -------------------------------------------------------------------
