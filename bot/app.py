"""The bot process: a discord.py client whose slash commands become daemon requests on behalf of the
person who typed them, plus the notifier that posts the daemon's notices. It holds no state of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Mapping
from typing import Any

import discord
import yarl
from bashgym.bot.commands import GROUPS
from bashgym.bot.core import Daemon, Reply, answer_stale_confirmation, send, unexpected_reply
from bashgym.bot.notifier import DiscordNotifier
from bashgym.bot.settings import BotConfigError, BotSettings, load_bot_settings
from bashgym.daemon.client_aiohttp import AioDaemonClient
from bashgym.daemon.wire_errors import ApiError
from discord import app_commands

log = logging.getLogger("bashgym.bot")
DAEMON_WAIT_S = 60.0


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
    def __init__(self, settings: BotSettings) -> None:
        intents = discord.Intents.none()
        intents.guilds = True
        super().__init__(
            intents=intents,
            application_id=settings.application_id,
            chunk_guilds_at_startup=False,
            guild_ready_timeout=0.5,
        )
        self.settings = settings
        self.tree = CommandTree(self)
        for group in GROUPS:
            self.tree.add_command(group())
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


async def run_bot(settings: BotSettings) -> int:
    bot = BashGymBot(settings)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(RuntimeError, ValueError):  # only the main thread may; elsewhere the host stops us
            loop.add_signal_handler(sig, stopping.set)
    async with bot:
        runner = asyncio.create_task(bot.start(settings.discord_token))
        waiter = asyncio.create_task(stopping.wait())
        await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if runner.done():
            runner.result()  # raise what stopped it
        await bot.close()
    return 0


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
        point_at(settings)
        return asyncio.run(run_bot(settings))
    except BotConfigError as exc:
        print(f"bashgym bot: {exc}", file=sys.stderr)
        return 2
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
