"""The bot process: a discord.py client whose slash commands become daemon requests on behalf of the
person who typed them, plus the notifier that posts the daemon's notices. It holds no state of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

import discord
import yarl
from bashgym.bot.commands import COMMANDS, GROUPS
from bashgym.bot.core import Daemon, Reply, answer_stale_confirmation, send, unexpected_reply
from bashgym.bot.notifier import DiscordNotifier
from bashgym.bot.settings import BotConfigError, BotSettings, load_bot_settings
from bashgym.client.aio import AioDaemonClient
from bashgym.client.errors import EXIT_CONFLICT, ApiError
from discord import app_commands

log = logging.getLogger("bashgym.bot")
DAEMON_WAIT_S = 60.0
LEASE_REQUEST_TIMEOUT_S = 10.0


class CommandTree(app_commands.CommandTree["BashGymBot"]):
    async def on_error(self, interaction: discord.Interaction[Any], error: app_commands.AppCommandError) -> None:
        original = getattr(error, "original", error)
        if isinstance(original, ApiError):
            reply = Reply(content=f"**{original.message}**\n{original.hint}".strip(), ephemeral=True)
        elif isinstance(error, app_commands.CheckFailure | app_commands.TransformerError):
            reply = Reply(content=str(error), ephemeral=True)
        else:
            try:
                raise original
            except Exception:
                reply = unexpected_reply(interaction.command.qualified_name if interaction.command else "command")
        with contextlib.suppress(discord.HTTPException):
            await send(interaction, reply)


class BashGymBot(discord.Client):
    def __init__(self, settings: BotSettings, *, lease: CursorLease | None = None) -> None:
        intents = discord.Intents.none()
        intents.guilds = True
        super().__init__(
            intents=intents,
            application_id=settings.application_id,
            chunk_guilds_at_startup=False,
            guild_ready_timeout=0.5,
        )
        self.settings = settings
        self.lease = lease
        self.tree = CommandTree(self)
        for group in GROUPS:
            self.tree.add_command(group())
        for command in COMMANDS:
            self.tree.add_command(command)
        self.api = AioDaemonClient(settings.api, settings.api_token, timeout_s=60.0)
        self.daemon = Daemon(self.api)
        self.notifier = DiscordNotifier(
            self,
            self.api,
            consumer=settings.notifier_consumer,
            default_channel_id=settings.default_channel_id,
            wait_s=settings.poll_wait_s,
        )
        self._notifier_task: asyncio.Task[None] | None = None
        self.synced: dict[int, int] = {}  # guild id -> commands synced there

    async def setup_hook(self) -> None:
        await self._wait_for_daemon()
        if self.lease is not None:
            # Once Discord took the token, before the commands sync or the notifier follows the cursor.
            await self.lease.take()
        for guild_id in self.settings.guild_ids:
            guild = discord.Object(guild_id)
            self.tree.copy_global_to(guild=guild)
            self.synced[guild_id] = len(await self.tree.sync(guild=guild))
        log.info("Slash commands synced to guilds %s", ", ".join(map(str, self.synced)))
        # The cursor is fixed before setup ends: whatever happens after the bot is up gets posted.
        cursor = await self.notifier.start_cursor()
        self._notifier_task = asyncio.create_task(self.notifier.run(cursor), name="notifier")

    async def _wait_for_daemon(self) -> None:
        deadline = asyncio.get_running_loop().time() + DAEMON_WAIT_S
        while True:
            try:
                who = await self.api.request("GET", "/v1/auth/whoami")
                break
            except ApiError as exc:
                if exc.status != 0 or asyncio.get_running_loop().time() > deadline:
                    message = f"The daemon at {self.settings.api} refused the bot: {exc.message} {exc.hint}"
                    raise BotConfigError(message) from exc
                await asyncio.sleep(1.0)
        if "delegate.discord" not in who.get("capabilities", []):
            raise BotConfigError(
                f"The bot's daemon token ({who.get('actor_id')}) lacks delegate.discord, so it cannot act for "
                "Discord users. Issue one with `bashgym auth issue --actor discord-bot --profile viewer "
                "--capability delegate.discord`."
            )

    async def on_ready(self) -> None:
        log.info("Connected to Discord as %s", self.user)

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        await answer_stale_confirmation(interaction)

    async def close(self) -> None:
        if self._notifier_task is not None:
            self._notifier_task.cancel()
            await asyncio.gather(self._notifier_task, return_exceptions=True)
        await super().close()
        await self.api.aclose()


class CursorHeld(Exception):
    """Another bot follows this bot's notice cursor; the message names it and says what to do."""


class CursorLease:
    """The bot's lease on its notifier's consumer, in the daemon's ledger: taken once Discord accepted the token,
    before the commands sync or the notifier starts; renewed every third of its TTL; released when the bot stops.
    Two bots never follow one cursor, and one that was killed blocks the next for one TTL at most."""

    def __init__(self, settings: BotSettings) -> None:
        # A client of its own: the lease is released after the bot's client closed with discord.py.
        self.daemon = AioDaemonClient(settings.api, settings.api_token, timeout_s=LEASE_REQUEST_TIMEOUT_S)
        self.consumer = settings.notifier_consumer
        self.path = f"/v1/consumers/{settings.notifier_consumer}/lease"
        self.holder: dict[str, Any] = {"holder": settings.lease_holder, "pid": os.getpid()}
        self.ask = {**self.holder, "host": socket.gethostname(), "ttl_s": settings.lease_ttl_s}
        self.ttl_s = settings.lease_ttl_s
        self.parent_pid = settings.parent_pid
        self.has_asked = False
        self.is_held = asyncio.Event()

    async def __aenter__(self) -> CursorLease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    async def take(self, *, may_take_over: bool = True) -> None:
        """Take the lease; raises CursorHeld, naming the bot that holds it."""
        try:
            await self._ask()
        except ApiError as exc:
            if exc.status == 409 and may_take_over and await self._take_over_from_the_dead(exc.details or {}):
                return await self.take(may_take_over=False)
            if exc.status == 409:
                raise CursorHeld(f"{exc.message}\n{exc.hint}".strip()) from exc
            raise BotConfigError(
                f"The daemon at {self.daemon.api} refused the bot's lease on {self.consumer}: {exc.message} {exc.hint}"
            ) from exc
        log.info("Holding the lease on consumer %s as %s", self.consumer, self.holder["holder"])
        self.is_held.set()

    async def _take_over_from_the_dead(self, held: dict[str, Any]) -> bool:
        """A lease held by a bot on this host whose process is gone (killed, crashed) is released at once rather
        than waited out; True when it was."""
        pid = held.get("pid")
        if held.get("host") != self.ask["host"] or not isinstance(pid, int) or pid == os.getpid() or _alive(pid):
            return False
        log.warning("The bot holding consumer %s (pid %s on this host) is gone; taking its lease", self.consumer, pid)
        await self.daemon.raw("DELETE", self.path, params={"holder": held.get("holder"), "pid": pid})
        return True

    async def keep(self) -> None:
        """Renew until cancelled. Raises CursorHeld when another bot took the lease (ours lapsed while the daemon
        was out of reach); returns when the `bashgym up` that started this bot is gone."""
        await self.is_held.wait()
        pause_s = self.ttl_s / 3
        while True:
            await asyncio.sleep(pause_s)
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                log.warning("The process that started this bot (pid %s) is gone; stopping", self.parent_pid)
                return
            try:
                await self._ask()
                pause_s = self.ttl_s / 3
            except ApiError as exc:
                if exc.status == 409:
                    raise CursorHeld(f"This bot's lease lapsed and another bot holds it now. {exc.message}") from exc
                log.warning("Could not renew the lease on consumer %s: %s; retrying", self.consumer, exc.message)
                pause_s = min(1.0, pause_s)  # before the lease lapses, if the daemon comes back

    async def release(self) -> None:
        try:
            if self.has_asked:
                await self.daemon.raw("DELETE", self.path, params=self.holder)
                log.info("Released the lease on consumer %s", self.consumer)
        except ApiError as exc:  # the daemon is gone or refuses: the lease lapses after its TTL instead
            log.warning("Could not release the lease on %s (%s); it expires within %.0f s", self.path, exc, self.ttl_s)
        finally:
            await self.daemon.aclose()

    async def _ask(self) -> None:
        # raw(): no Idempotency-Key, so a renewal every few seconds leaves no stored answer in the ledger
        # (asking again only renews again).
        self.has_asked = True
        await self.daemon.raw("POST", self.path, params=self.ask)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True


async def run_bot(settings: BotSettings) -> int:
    """Run the bot until SIGTERM or SIGINT (then 0), holding its notifier's lease throughout. Raises CursorHeld
    when another bot follows the same cursor, and whatever else stopped discord.py."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(RuntimeError, ValueError):  # only the main thread may; elsewhere the host stops us
            loop.add_signal_handler(sig, stopping.set)
    async with CursorLease(settings) as lease, BashGymBot(settings, lease=lease) as bot:
        runner = asyncio.create_task(bot.start(settings.discord_token), name="discord")
        keeper = asyncio.create_task(lease.keep(), name="lease")
        waiter = asyncio.create_task(stopping.wait())
        try:
            done, _ = await asyncio.wait({runner, keeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
            for task in (runner, keeper):
                if task in done:
                    task.result()  # raise what stopped it
        finally:
            keeper.cancel()
            waiter.cancel()
            await bot.close()
            runner.cancel()  # still in its setup when the bot was asked to stop
            await asyncio.gather(runner, keeper, waiter, return_exceptions=True)
    return 0


def end_with_parent(parent_pid: int) -> None:
    """End this bot when `parent_pid` (`bashgym up`) ends, even by SIGKILL (Linux: PR_SET_PDEATHSIG), so no bot
    outlives the daemon it came with. As trainers.signals.end_with_parent, which the bot may not import."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent was gone before the request above was made
        os._exit(1)


def point_at(settings: BotSettings) -> None:
    """Send discord.py's REST and gateway traffic to a proxy or stand-in when the settings name one (this
    process only: the bot is its own process)."""
    if settings.api_base:
        discord.http.Route.BASE = settings.api_base
    if settings.gateway:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.gateway)


def main(environ: Mapping[str, str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_bot_settings(environ)
        if settings.parent_pid is not None:
            end_with_parent(settings.parent_pid)
        point_at(settings)
        return asyncio.run(run_bot(settings))
    except BotConfigError as exc:
        print(f"bashgym bot: {exc}", file=sys.stderr)
        return 2
    except CursorHeld as exc:
        print(f"bashgym bot: {exc}", file=sys.stderr)
        return EXIT_CONFLICT
    except discord.LoginFailure:
        print(
            "bashgym bot: Discord refused the bot token (401). Copy it again from the Developer Portal "
            "(your application -> Bot -> Reset Token) into the variable named by BASHGYM_DISCORD_TOKEN_ENV.",
            file=sys.stderr,
        )
        return 3
    except discord.PrivilegedIntentsRequired:
        print("bashgym bot: Discord refused an intent; BashGym needs none of the privileged ones.", file=sys.stderr)
        return 3
