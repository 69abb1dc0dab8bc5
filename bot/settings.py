"""The bot's settings, from the environment; every missing piece is named with what to set.

BASHGYM_DISCORD_TOKEN_ENV        name of the variable holding the Discord bot token (default BASHGYM_DISCORD_TOKEN)
BASHGYM_DISCORD_APPLICATION_ID   the Discord application's id
BASHGYM_DISCORD_GUILD_IDS        allowed guild ids, comma-separated (commands sync to these)
BASHGYM_API                      the daemon's URL (default: the running daemon's record in BASHGYM_HOME)
BASHGYM_BOT_API_TOKEN            the bot's daemon token (default: the file $BASHGYM_HOME/bot.token); it holds
                                 delegate.discord and ledger.read
BASHGYM_DISCORD_DEFAULT_CHANNEL  channel for notices of projects without one (default: none; they are skipped)
BASHGYM_DISCORD_API_BASE         Discord's REST base (default https://discord.com/api/v10): a proxy or a local stand-in
BASHGYM_DISCORD_GATEWAY          Discord's gateway (default wss://gateway.discord.gg/): a proxy or a local stand-in
BASHGYM_BOT_LEASE_TTL_S          seconds the bot's lease on its notice cursor outlives its last renewal (default 30)
BASHGYM_BOT_LEASE_HOLDER         the name the lease is held under (default: a fresh one per start); a bot started
                                 under the holder's name takes the lease over at once (`bashgym up` names its bot
                                 after its home)
BASHGYM_BOT_PARENT_PID           set by `bashgym up`: the bot ends when that process does
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bashgym.client.http import resolve_api

DEFAULT_PORT = 8321
MAX_LEASE_TTL_S = 600  # the daemon's limit


class BotConfigError(Exception):
    """The bot cannot start; the message says what to set."""


def fresh_holder() -> str:
    """A lease holder name of one bot start: no other bot takes its lease over."""
    return f"bashgym-bot-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class BotSettings:
    discord_token: str
    application_id: int
    guild_ids: tuple[int, ...]
    api: str
    api_token: str
    default_channel_id: int | None = None
    api_base: str | None = None  # None: discord.py's own (Discord itself)
    gateway: str | None = None
    notifier_consumer: str = "discord-notifier"
    poll_wait_s: float = 10.0
    lease_ttl_s: float = 30.0
    lease_holder: str = field(default_factory=fresh_holder)
    parent_pid: int | None = None  # `bashgym up`'s pid: the bot ends with it

    def __repr__(self) -> str:  # never print the tokens
        return f"BotSettings(application_id={self.application_id}, guild_ids={self.guild_ids}, api={self.api!r})"


def load_bot_settings(environ: Mapping[str, str]) -> BotSettings:
    home = Path(environ.get("BASHGYM_HOME") or Path.home() / ".bashgym").expanduser()
    token_env = environ.get("BASHGYM_DISCORD_TOKEN_ENV", "BASHGYM_DISCORD_TOKEN")
    discord_token = environ.get(token_env, "").strip()
    if not discord_token:
        raise BotConfigError(
            f"The Discord bot token is missing: set {token_env} to the token of your Discord application's bot "
            "(Developer Portal -> your application -> Bot -> Reset Token)."
        )
    application = environ.get("BASHGYM_DISCORD_APPLICATION_ID", "").strip()
    if not application.isdigit():
        raise BotConfigError(
            "BASHGYM_DISCORD_APPLICATION_ID must be your Discord application's id (a number; Developer Portal -> "
            "General Information -> Application ID)."
        )
    guilds = [g.strip() for g in environ.get("BASHGYM_DISCORD_GUILD_IDS", "").split(",") if g.strip()]
    if not guilds or not all(g.isdigit() for g in guilds):
        raise BotConfigError(
            "BASHGYM_DISCORD_GUILD_IDS must list the guild (server) ids the bot serves, comma-separated; the "
            "daemon must allow the same ids."
        )
    api_token = environ.get("BASHGYM_BOT_API_TOKEN", "").strip()
    token_file = home / "bot.token"
    if not api_token and token_file.exists():
        api_token = token_file.read_text().strip()
    if not api_token:
        raise BotConfigError(
            f"The bot has no daemon token: set BASHGYM_BOT_API_TOKEN or write {token_file}. Issue one with "
            "`bashgym auth issue --actor discord-bot --profile viewer --capability delegate.discord`."
        )
    default_channel = environ.get("BASHGYM_DISCORD_DEFAULT_CHANNEL", "").strip()
    if default_channel and not default_channel.isdigit():
        raise BotConfigError("BASHGYM_DISCORD_DEFAULT_CHANNEL must be a channel id (a number).")
    api_base = environ.get("BASHGYM_DISCORD_API_BASE", "").strip().rstrip("/") or None
    if api_base and not api_base.startswith(("https://", "http://")):
        raise BotConfigError("BASHGYM_DISCORD_API_BASE must be an http(s) URL such as https://discord.com/api/v10.")
    gateway = environ.get("BASHGYM_DISCORD_GATEWAY", "").strip() or None
    if gateway and not gateway.startswith(("wss://", "ws://")):
        raise BotConfigError("BASHGYM_DISCORD_GATEWAY must be a ws(s) URL such as wss://gateway.discord.gg/.")
    holder = environ.get("BASHGYM_BOT_LEASE_HOLDER", "").strip()
    if len(holder) > 200 or not holder.isprintable():
        raise BotConfigError("BASHGYM_BOT_LEASE_HOLDER must be a printable name of at most 200 characters.")
    parent = environ.get("BASHGYM_BOT_PARENT_PID", "").strip()
    if parent and not parent.isdigit():
        raise BotConfigError("BASHGYM_BOT_PARENT_PID must be a process id (a number); `bashgym up` sets it.")
    return BotSettings(
        discord_token=discord_token,
        api_base=api_base,
        gateway=gateway,
        application_id=int(application),
        guild_ids=tuple(int(g) for g in guilds),
        api=resolve_api(environ.get("BASHGYM_API"), home / "daemon.json", DEFAULT_PORT),
        api_token=api_token,
        default_channel_id=int(default_channel) if default_channel else None,
        lease_ttl_s=_lease_ttl_s(environ),
        parent_pid=int(parent) if parent else None,
        lease_holder=holder or fresh_holder(),
    )


def _lease_ttl_s(environ: Mapping[str, str]) -> float:
    raw = environ.get("BASHGYM_BOT_LEASE_TTL_S", "").strip() or "30"
    try:
        ttl_s = float(raw)
    except ValueError:
        ttl_s = 0.0
    if not 1 <= ttl_s <= MAX_LEASE_TTL_S:
        raise BotConfigError(
            f"BASHGYM_BOT_LEASE_TTL_S is {raw!r}; it must be a number of seconds from 1 to {MAX_LEASE_TTL_S}."
        )
    return ttl_s
