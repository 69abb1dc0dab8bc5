"""A loopback stand-in of Discord (REST and gateway) that the real discord.py 2.x client runs against.

It serves the REST routes under /api/v10 and a gateway websocket on one aiohttp server bound to
127.0.0.1, records every request, keeps synced commands, messages and attachments in memory, and
answers unknown routes with a loud 404 naming the method and path (facts in PROTOCOLS.md). Tests
drive it like a user would: `send_slash`, `click` and `autocomplete` dispatch INTERACTION_CREATE
over the gateway, and the `wait_for_*` helpers return what the bot answered.

    async with discord_standin() as discord_, running_client(client):
        await tree.sync(guild=discord.Object(discord_.guild_id))
        sent = await discord_.send_slash("ping")
        assert (await discord_.wait_for_reply(sent))["content"] == "pong"

Like Discord it enforces what a bot most often gets wrong: the 3 s deadline of the first answer to
an interaction, one acknowledgement per interaction, message and embed length limits, command
schemas, and the `nonce` + `enforce_nonce` de-duplication of channel posts. `refuse_posts` and
`fail_posts` make one channel's posts meet a permanent refusal or a few server errors.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import math
import mimetypes
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import discord
import discord.gateway
import discord.http
import yarl
from aiohttp import WSMsgType, web
from aiohttp.multipart import BodyPartReader
from bashgym.bot.settings import BotSettings

T = TypeVar("T")

API = "/api/v10"
GATEWAY_PATH = "/gateway"
FAKE_TOKEN = "standin-bot-token"
HEARTBEAT_INTERVAL_MS = 41_250
DISCORD_EPOCH_MS = 1_420_070_400_000

APPLICATION_ID = 1_250_000_000_000_000_001
BOT_USER_ID = APPLICATION_ID  # a modern bot's user id is its application id
GUILD_ID = 1_250_000_000_000_000_100
CHANNEL_ID = 1_250_000_000_000_000_101
RUNS_CHANNEL_ID = 1_250_000_000_000_000_102
TRAINER_ROLE_ID = 1_250_000_000_000_000_110
ALICE_ID = 1_250_000_000_000_001_000
BOB_ID = 1_250_000_000_000_001_001

EPHEMERAL = 1 << 6
LOADING = 1 << 7
EVERYONE_PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 16) | (1 << 31)  # view, send, history, app commands
APP_PERMISSIONS = (1 << 50) - 1
ATTACHMENT_SIZE_LIMIT = 25 * 1024 * 1024
CATEGORY = 4  # a channel type no message can be posted in
# Discord's permanent refusals of a channel post, by error code: (HTTP status, message, errors).
REFUSALS: dict[int, tuple[int, str, dict[str, Any] | None]] = {
    50008: (400, "Cannot send messages in a non-text channel", None),
    50035: (
        400,
        "Invalid Form Body",
        {"embeds": {"0": {"description": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Too long."}]}}}},
    ),
    50013: (403, "Missing Permissions", None),
    10003: (404, "Unknown Channel", None),
}

INTERACTION_APP_COMMAND, INTERACTION_COMPONENT, INTERACTION_AUTOCOMPLETE = 2, 3, 4
MESSAGE_DEFAULT, MESSAGE_REPLY, MESSAGE_CHAT_INPUT = 0, 19, 20
SUB_COMMAND, SUB_COMMAND_GROUP = 1, 2
STRING, INTEGER, BOOLEAN, USER, CHANNEL, ROLE, MENTIONABLE, NUMBER, ATTACHMENT = 3, 4, 5, 6, 7, 8, 9, 10, 11

OptionValue = str | int | float | bool | tuple[str, bytes]
"""A slash option's value; an ATTACHMENT option takes (filename, bytes), USER/CHANNEL/ROLE an id."""


# -- configuration and records -------------------------------------------------------------------


@dataclass(frozen=True)
class StandInChannel:
    id: int
    name: str
    type: int = 0  # 0 text


@dataclass(frozen=True)
class StandInRole:
    id: int
    name: str
    permissions: int = 0


@dataclass(frozen=True)
class StandInGuild:
    """A guild the bot is in; its first role must be @everyone (id == guild id)."""

    id: int
    name: str
    channels: tuple[StandInChannel, ...]
    roles: tuple[StandInRole, ...]


DEFAULT_GUILD = StandInGuild(
    id=GUILD_ID,
    name="BashGym Test",
    channels=(StandInChannel(CHANNEL_ID, "general"), StandInChannel(RUNS_CHANNEL_ID, "runs")),
    roles=(StandInRole(GUILD_ID, "@everyone", EVERYONE_PERMISSIONS), StandInRole(TRAINER_ROLE_ID, "trainer")),
)


@dataclass(frozen=True)
class RecordedPart:
    name: str | None
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass
class RecordedRequest:
    """One HTTP request as received; `json` is the body, or a multipart request's payload_json."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    json: Any
    parts: list[RecordedPart]
    status: int = 0


@dataclass(frozen=True)
class InteractionCallback:
    type: int  # 4 message, 5 deferred message, 6 deferred update, 7 update, 8 autocomplete, 9 modal
    data: dict[str, Any]
    files: list[RecordedPart]


@dataclass
class SentInteraction:
    """An interaction the stand-in dispatched, and what the bot has answered to it so far."""

    id: int
    token: str
    type: int
    guild_id: int | None
    channel_id: int
    user_id: int
    dispatched_at: float  # time.monotonic()
    source_message_id: int | None = None  # the clicked message of a component interaction
    callbacks: list[InteractionCallback] = field(default_factory=list)
    original_message_id: int | None = None
    followup_ids: list[int] = field(default_factory=list)
    has_reply: bool = False  # the original response shows a final (not loading) message


@dataclass
class _RateLimit:
    method: str
    path_pattern: re.Pattern[str]
    retry_after_s: float
    times_left: int


@dataclass
class _GatewaySession:
    id: str
    ws: web.WebSocketResponse | None
    seq: int = 0
    backlog: list[dict[str, Any]] = field(default_factory=list)


class DiscordError(Exception):
    """A Discord-shaped error reply: HTTP status plus the JSON body Discord would send."""

    def __init__(self, status: int, message: str, code: int, errors: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"message": message, "code": code}
        if errors:
            self.body["errors"] = errors


Handler = Callable[[web.Request, dict[str, str], RecordedRequest], Awaitable[web.Response]]


# -- the stand-in ---------------------------------------------------------------------------------


class DiscordStandIn:
    """Start with `async with discord_standin() as standin:`, which also points discord.py at it."""

    def __init__(
        self,
        *,
        guilds: Sequence[StandInGuild] = (DEFAULT_GUILD,),
        bot_name: str = "BashGym",
        token: str | None = None,
        callback_deadline_s: float = 3.0,
    ) -> None:
        self.guilds = list(guilds)
        self.application_id = APPLICATION_ID
        self.bot_user = _user(BOT_USER_ID, bot_name, is_bot=True)
        self.token = token  # None accepts any bot token
        self.callback_deadline_s = callback_deadline_s
        self.usernames: dict[int, str] = {ALICE_ID: "alice", BOB_ID: "bob"}
        self.requests: list[RecordedRequest] = []
        self.gateway_frames: list[dict[str, Any]] = []  # what the client sent on the gateway
        self.gateway_queries: list[dict[str, str]] = []  # the query of each gateway connection
        self.commands: dict[int | None, dict[str, dict[str, Any]]] = {}  # guild id (None: global) -> name -> command
        self.interactions: dict[str, SentInteraction] = {}  # by token
        self.errors: list[Exception] = []  # what the stand-in itself failed on; a test may assert it is empty
        # Called with each channel message once it is stored, before the poster gets the answer (a crash test
        # kills the poster there).
        self.on_channel_post: Callable[[dict[str, Any]], None] | None = None
        self._messages: dict[int, dict[str, Any]] = {}
        self._deleted_ids: set[int] = set()
        self._nonces: dict[tuple[int, str], int] = {}
        self._files: dict[int, tuple[str, str, bytes]] = {}  # attachment id -> filename, content type, bytes
        self._rate_limits: list[_RateLimit] = []
        self._refused_posts: dict[int, DiscordError] = {}  # channel id -> what every post there is answered
        self._failing_posts: dict[int, list[int]] = {}  # channel id -> the 5xx statuses its next posts get
        self._session: _GatewaySession | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._changed = asyncio.Condition()
        self._last_snowflake = 0
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.ws_url = ""
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = self._route_table()

    @property
    def guild_id(self) -> int:
        return self.guilds[0].id

    @property
    def channel_id(self) -> int:
        return self.guilds[0].channels[0].id

    async def __aenter__(self) -> DiscordStandIn:
        app = web.Application(client_max_size=ATTACHMENT_SIZE_LIMIT * 2)
        app.router.add_get(GATEWAY_PATH, self._gateway)
        app.router.add_route("*", "/{tail:.*}", self._http)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}{GATEWAY_PATH}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()

    # -- test controls ----------------------------------------------------------------------------

    async def send_slash(
        self,
        name: str,
        options: Mapping[str, OptionValue] | None = None,
        *,
        subcommand_group: str | None = None,
        subcommand: str | None = None,
        user_id: int = ALICE_ID,
        role_ids: Sequence[int] = (),
        guild_id: int | None = None,
        channel_id: int | None = None,
    ) -> SentInteraction:
        """Dispatch `/name [group] [sub] options...` as a user; `name` may also be "probe echo".

        Raises:
            LookupError: the command, subcommand or an option is not in the synced commands.
            ValueError: a required option is missing or a value is not among the choices.
        """
        data, resolved, _ = self._command_data(
            name, options or {}, subcommand_group, subcommand, guild_id=guild_id, is_partial=False
        )
        if resolved:
            data["resolved"] = resolved
        return await self._dispatch_interaction(
            INTERACTION_APP_COMMAND, data, user_id=user_id, role_ids=role_ids, guild_id=guild_id, channel_id=channel_id
        )

    async def autocomplete(
        self,
        name: str,
        focused: str,
        value: str,
        options: Mapping[str, OptionValue] | None = None,
        *,
        subcommand_group: str | None = None,
        subcommand: str | None = None,
        user_id: int = ALICE_ID,
        role_ids: Sequence[int] = (),
        guild_id: int | None = None,
        channel_id: int | None = None,
    ) -> SentInteraction:
        """Dispatch an autocomplete request while the user (with these roles) types `value` into option `focused`."""
        data, _, schema = self._command_data(
            name, options or {}, subcommand_group, subcommand, guild_id=guild_id, is_partial=True
        )
        spec = _named(schema, focused, f"/{name} has no option to autocomplete")
        _leaf_options(data).append({"type": spec["type"], "name": focused, "value": value, "focused": True})
        return await self._dispatch_interaction(
            INTERACTION_AUTOCOMPLETE, data, user_id=user_id, role_ids=role_ids, guild_id=guild_id, channel_id=channel_id
        )

    async def click(
        self,
        message: int | Mapping[str, Any],
        custom_id: str,
        *,
        user_id: int = ALICE_ID,
        role_ids: Sequence[int] = (),
        values: Sequence[str] | None = None,
    ) -> SentInteraction:
        """Click the component `custom_id` on a message (id or dict); `values` picks from a select menu."""
        message_id = int(message if isinstance(message, int) else message["id"])
        stored = self.message(message_id)
        component = _find_component(stored.get("components", []), custom_id)
        if component is None:
            present = sorted(_custom_ids(stored.get("components", [])))
            raise LookupError(f"Message {message_id} has no component {custom_id!r}; it has {present}.")
        if component.get("disabled"):
            raise ValueError(f"Component {custom_id!r} on message {message_id} is disabled; a user cannot click it.")
        data: dict[str, Any] = {"custom_id": custom_id, "component_type": component["type"]}
        if values is not None:
            data["values"] = list(values)
        guild_id = int(stored["guild_id"]) if stored.get("guild_id") else None
        return await self._dispatch_interaction(
            INTERACTION_COMPONENT,
            data,
            user_id=user_id,
            role_ids=role_ids,
            guild_id=guild_id,
            channel_id=int(stored["channel_id"]),
            message=stored,
        )

    async def wait_for_callback(self, sent: SentInteraction, *, timeout_s: float = 5.0) -> InteractionCallback:
        """The bot's first answer (callback) to an interaction."""
        return await self.wait_until(
            lambda: sent.callbacks[0] if sent.callbacks else None,
            timeout_s=timeout_s,
            what=f"a callback to interaction {sent.id}",
        )

    async def wait_for_reply(self, sent: SentInteraction, *, timeout_s: float = 5.0) -> dict[str, Any]:
        """The original response message once it is final: sent, or edited after a defer."""
        await self.wait_until(lambda: sent.has_reply, timeout_s=timeout_s, what=f"a reply to interaction {sent.id}")
        assert sent.original_message_id is not None
        return self.message(sent.original_message_id)

    async def wait_for_message(
        self,
        channel_id: int,
        predicate: Callable[[dict[str, Any]], bool] = lambda _: True,
        *,
        timeout_s: float = 5.0,
    ) -> dict[str, Any]:
        """The first message in a channel (oldest first) that satisfies `predicate`."""
        return await self.wait_until(
            lambda: next((m for m in self.messages(channel_id) if predicate(m)), None),
            timeout_s=timeout_s,
            what=f"a matching message in channel {channel_id}",
        )

    async def wait_until(self, predicate: Callable[[], T | None], *, timeout_s: float = 5.0, what: str = "") -> T:
        """Wait until `predicate()` is truthy (re-checked after each request) and return its value."""
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                while not (result := predicate()):
                    await self._changed.wait()
                return result
        except TimeoutError:
            recent = [f"{r.method} {r.path} -> {r.status}" for r in self.requests[-6:]]
            raise TimeoutError(f"Waited {timeout_s}s for {what or predicate}; last requests: {recent}") from None

    async def wait_for_gateway(self, *, timeout_s: float = 5.0) -> None:
        """Wait until a client holds an identified (or resumed) gateway connection."""
        await self.wait_until(
            lambda: self._session is not None and self._session.ws is not None,
            timeout_s=timeout_s,
            what="a gateway connection",
        )

    async def disconnect(self, *, is_resumable: bool = True, code: int = 4000) -> None:
        """Drop the gateway socket; discord.py reconnects and RESUMEs, or re-IDENTIFYs if not resumable."""
        session = self._session
        if not is_resumable:
            self._session = None
        if session is not None and session.ws is not None:
            ws, session.ws = session.ws, None
            await ws.close(code=code)

    def rate_limit(self, method: str, path_regex: str, retry_after_s: float, *, times: int = 1) -> None:
        """Answer the next `times` requests matching method ("*": any) and path (searched under /api/v10) with 429."""
        self._rate_limits.append(_RateLimit(method.upper(), re.compile(path_regex), retry_after_s, times))

    def refuse_posts(self, channel_id: int, *, code: int = 50008) -> None:
        """Answer every post in `channel_id` with Discord's permanent refusal `code` (see REFUSALS: 50008 a
        non-text channel, 50035 an invalid body, ...) until `accept_posts`."""
        status, message, errors = REFUSALS[code]
        self._refused_posts[channel_id] = DiscordError(status, message, code, errors)

    def accept_posts(self, channel_id: int) -> None:
        self._refused_posts.pop(channel_id, None)

    def fail_posts(self, channel_id: int, times: int, *, status: int = 500) -> None:
        """Answer the next `times` posts in `channel_id` with a server error `status`, then take them again."""
        self._failing_posts.setdefault(channel_id, []).extend([status] * times)

    def messages(self, channel_id: int | None = None) -> list[dict[str, Any]]:
        """Messages that exist now, oldest first, ephemeral ones included (marked in flags)."""
        found = [m for m in self._messages.values() if channel_id is None or int(m["channel_id"]) == channel_id]
        return [copy.deepcopy(m) for m in found]

    def message(self, message_id: int) -> dict[str, Any]:
        try:
            return copy.deepcopy(self._messages[message_id])
        except KeyError:
            raise LookupError(f"No message {message_id}; it was never sent or has been deleted.") from None

    def attachment_bytes(self, attachment: int | Mapping[str, Any]) -> bytes:
        attachment_id = int(attachment if isinstance(attachment, int) else attachment["id"])
        return self._files[attachment_id][2]

    def requests_to(self, method: str, path_regex: str) -> list[RecordedRequest]:
        pattern = re.compile(path_regex)
        return [r for r in self.requests if r.method == method.upper() and pattern.search(r.path)]

    # -- interactions -------------------------------------------------------------------------

    def _command_data(
        self,
        name: str,
        values: Mapping[str, OptionValue],
        group: str | None,
        sub: str | None,
        *,
        guild_id: int | None,
        is_partial: bool,
    ) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        """The interaction's `data` for a command path, its `resolved` objects, and the leaf's option schema."""
        words = name.split()
        root, path = words[0], [w for w in [*words[1:], group, sub] if w]
        guild_id = guild_id or self.guild_id
        command, synced_guild = self._synced_command(root, guild_id)
        resolved: dict[str, Any] = {}
        data: dict[str, Any] = {"id": command["id"], "name": root, "type": 1}
        if synced_guild is not None:
            data["guild_id"] = str(synced_guild)  # without it discord.py looks only among global commands
        schema, holder = command, data
        for word in path:
            schema = _named(schema.get("options", []), word, f"/{root} has no subcommand (group) {word!r}")
            nested: dict[str, Any] = {"type": schema["type"], "name": word}
            holder.setdefault("options", []).append(nested)
            holder = nested
        if any(o["type"] in (SUB_COMMAND, SUB_COMMAND_GROUP) for o in schema.get("options", [])):
            raise LookupError(f"/{name} needs a subcommand; pass subcommand= (and subcommand_group=).")
        holder["options"] = self._options(schema.get("options", []), values, resolved, is_partial=is_partial)
        return data, resolved, schema.get("options", [])

    def _synced_command(self, name: str, guild_id: int) -> tuple[dict[str, Any], int | None]:
        for scope in (guild_id, None):
            command = self.commands.get(scope, {}).get(name)
            if command is not None:
                return command, scope
        synced = {scope: sorted(names) for scope, names in self.commands.items()}
        raise LookupError(
            f"/{name} is synced neither to guild {guild_id} nor globally (synced: {synced}); "
            "the bot must call tree.sync() first."
        )

    def _options(
        self,
        schema: list[dict[str, Any]],
        values: Mapping[str, OptionValue],
        resolved: dict[str, Any],
        *,
        is_partial: bool,
    ) -> list[dict[str, Any]]:
        options = []
        for option_name, value in values.items():
            spec = _named(schema, option_name, "no such option")
            options.append({"type": spec["type"], "name": option_name, "value": self._resolve(spec, value, resolved)})
            if not is_partial:
                _check_choice(spec, value)
        missing = [o["name"] for o in schema if o.get("required") and o["name"] not in values]
        if missing and not is_partial:
            raise ValueError(f"Required options {missing} are missing; Discord's client would not send the command.")
        return options

    def _resolve(self, spec: dict[str, Any], value: OptionValue, resolved: dict[str, Any]) -> Any:
        kind = spec["type"]
        if kind in (USER, CHANNEL, ROLE, MENTIONABLE) and isinstance(value, str) and value.isdigit():
            value = int(value)
        if kind == ATTACHMENT:
            if not isinstance(value, tuple):
                raise ValueError(f"Option {spec['name']!r} takes an attachment: pass (filename, bytes).")
            attachment = self._store_file(value[0], value[1], None)
            resolved.setdefault("attachments", {})[attachment["id"]] = attachment
            return attachment["id"]
        if kind in (USER, MENTIONABLE) and isinstance(value, int) and self._role(value) is None:
            resolved.setdefault("users", {})[str(value)] = self._user(value)
            resolved.setdefault("members", {})[str(value)] = _without(self._member(value, ()), "user")
            return str(value)
        if kind in (ROLE, MENTIONABLE) and isinstance(value, int) and (role := self._role(value)) is not None:
            resolved.setdefault("roles", {})[str(value)] = _role_payload(role)
            return str(value)
        if kind == CHANNEL and isinstance(value, int):
            resolved.setdefault("channels", {})[str(value)] = {
                **self._channel_payload(value),
                "permissions": str(APP_PERMISSIONS),
            }
            return str(value)
        return _coerced(spec, value)

    async def _dispatch_interaction(
        self,
        kind: int,
        data: dict[str, Any],
        *,
        user_id: int,
        role_ids: Sequence[int],
        guild_id: int | None,
        channel_id: int | None,
        message: dict[str, Any] | None = None,
    ) -> SentInteraction:
        guild = self._guild(guild_id or self.guild_id)
        channel_id = channel_id or guild.channels[0].id
        sent = SentInteraction(
            id=self._snowflake(),
            token=f"aW50ZXJhY3Rpb246{secrets.token_urlsafe(24)}",
            type=kind,
            guild_id=guild.id,
            channel_id=channel_id,
            user_id=user_id,
            dispatched_at=time.monotonic(),
            source_message_id=int(message["id"]) if message else None,
        )
        payload: dict[str, Any] = {
            "id": str(sent.id),
            "application_id": str(self.application_id),
            "type": kind,
            "data": data,
            "guild_id": str(guild.id),
            "guild": {"id": str(guild.id), "locale": "en-US", "features": []},
            "channel_id": str(channel_id),
            "channel": self._channel_payload(channel_id),
            "member": self._member(user_id, role_ids),
            "token": sent.token,
            "version": 1,
            "app_permissions": str(APP_PERMISSIONS),
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(guild.id)},
            "context": 0,
            "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,  # discord.py raises KeyError without it
        }
        if message is not None:
            payload["message"] = message
        self.interactions[sent.token] = sent
        await self._dispatch_event("INTERACTION_CREATE", payload)
        return sent

    # -- HTTP ---------------------------------------------------------------------------------------

    def _route_table(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        webhook = r"/webhooks/(?P<app>\d+)/(?P<token>[^/]+)"
        table: list[tuple[str, str, Handler]] = [
            ("GET", r"/users/@me", self._get_me),
            ("GET", r"/oauth2/applications/@me", self._get_application),
            ("GET", r"/gateway(/bot)?", self._get_gateway),
            ("GET", r"/applications/(?P<app>\d+)(/guilds/(?P<guild>\d+))?/commands", self._get_commands),
            ("PUT", r"/applications/(?P<app>\d+)(/guilds/(?P<guild>\d+))?/commands", self._put_commands),
            ("POST", r"/interactions/(?P<id>\d+)/(?P<token>[^/]+)/callback", self._post_callback),
            ("POST", webhook, self._post_followup),
            ("GET", webhook + r"/messages/(?P<message>@original|\d+)", self._get_webhook_message),
            ("PATCH", webhook + r"/messages/(?P<message>@original|\d+)", self._patch_webhook_message),
            ("DELETE", webhook + r"/messages/(?P<message>@original|\d+)", self._delete_webhook_message),
            ("POST", r"/channels/(?P<channel>\d+)/messages", self._post_channel_message),
            ("GET", r"/channels/(?P<channel>\d+)/messages", self._get_channel_messages),
            ("GET", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)", self._get_channel_message),
            ("PATCH", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)", self._patch_channel_message),
            ("DELETE", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)", self._delete_channel_message),
        ]
        routes = [(method, re.compile(API + pattern), handler) for method, pattern, handler in table]
        routes.append(("GET", re.compile(r"/attachments/(?P<id>\d+)/(?P<filename>[^/]+)"), self._get_attachment))
        return routes

    async def _http(self, request: web.Request) -> web.StreamResponse:
        payload, parts = await _read_body(request)
        recorded = RecordedRequest(
            request.method, request.path, dict(request.query), dict(request.headers), payload, parts
        )
        self.requests.append(recorded)
        try:
            response = await self._answer(request, recorded)
        except DiscordError as err:
            response = _json(err.status, err.body)
        except Exception as err:
            # A stand-in bug or a payload it cannot read: a 500 would make discord.py retry for ~16 s,
            # so answer 400 at once and keep the error for the test to see.
            self.errors.append(err)
            problem = f"Discord stand-in failed on {request.method} {request.path}: {err!r}"
            response = _json(400, {"message": problem, "code": 0})
        recorded.status = response.status
        async with self._changed:
            self._changed.notify_all()
        return response

    async def _answer(self, request: web.Request, recorded: RecordedRequest) -> web.Response:
        limited = self._take_rate_limit(request.method, request.path)
        if limited is not None:
            return _rate_limited(limited.retry_after_s)
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(request.path)
            if match and method == request.method:
                self._check_auth(request)
                return await handler(request, {k: v for k, v in match.groupdict().items() if v}, recorded)
        message = f"Discord stand-in has no route {request.method} {request.path}"
        return _json(404, {"message": message, "code": 0, "path": request.path})

    def _take_rate_limit(self, method: str, path: str) -> _RateLimit | None:
        if not path.startswith(API):
            return None
        for rule in self._rate_limits:
            if rule.times_left > 0 and rule.method in ("*", method) and rule.path_pattern.search(path[len(API) :]):
                rule.times_left -= 1
                return rule
        return None

    def _check_auth(self, request: web.Request) -> None:
        # Interaction callbacks and webhooks authenticate by their token in the path, not the header.
        if self.token is None or not request.path.startswith(API):
            return
        if request.path.startswith((f"{API}/interactions/", f"{API}/webhooks/")):
            return
        if request.headers.get("Authorization") != f"Bot {self.token}":
            raise DiscordError(401, "401: Unauthorized", 0)

    async def _get_attachment(self, request: web.Request, match: dict[str, str], _: RecordedRequest) -> web.Response:
        stored = self._files.get(int(match["id"]))
        if stored is None:
            return _json(404, {"message": f"Discord stand-in has no attachment at {request.path}", "code": 0})
        return web.Response(body=stored[2], headers={"Content-Type": stored[1]})

    async def _get_me(self, request: web.Request, _: dict[str, str], __: RecordedRequest) -> web.Response:
        return _json(200, {**self.bot_user, "verified": True, "mfa_enabled": False, "flags": 0, "locale": "en-US"})

    async def _get_application(self, request: web.Request, _: dict[str, str], __: RecordedRequest) -> web.Response:
        return _json(
            200,
            {
                "id": str(self.application_id),
                "name": self.bot_user["username"],
                "description": "",
                "icon": None,
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": self._user(ALICE_ID),
                "verify_key": "0" * 64,
                "flags": 0,
                "team": None,
                "interactions_endpoint_url": None,  # set, discord.py warns that interactions bypass the gateway
            },
        )

    async def _get_gateway(self, request: web.Request, _: dict[str, str], __: RecordedRequest) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return _json(200, {"url": self.ws_url, "shards": 1, "session_start_limit": limit})

    async def _get_commands(self, request: web.Request, match: dict[str, str], _: RecordedRequest) -> web.Response:
        self._check_application(match)
        scope = int(match["guild"]) if "guild" in match else None
        return _json(200, list(self.commands.get(scope, {}).values()))

    async def _put_commands(self, request: web.Request, match: dict[str, str], rec: RecordedRequest) -> web.Response:
        self._check_application(match)
        scope = int(match["guild"]) if "guild" in match else None
        if scope is not None and all(g.id != scope for g in self.guilds):
            raise DiscordError(403, "Missing Access", 50001)  # the bot is not in that guild
        if not isinstance(rec.json, list):
            raise DiscordError(400, "Invalid Form Body", 50035, {"_errors": [{"code": "LIST_TYPE_CONVERT"}]})
        errors = _command_errors(rec.json)
        if errors:
            raise DiscordError(400, "Invalid Form Body", 50035, errors)
        before = self.commands.get(scope, {})
        self.commands[scope] = {c["name"]: self._command(c, before.get(c["name"]), scope) for c in rec.json}
        return _json(200, list(self.commands[scope].values()))

    def _command(self, sent: dict[str, Any], old: dict[str, Any] | None, scope: int | None) -> dict[str, Any]:
        command: dict[str, Any] = {
            "type": 1,
            "options": [],
            "default_member_permissions": None,
            "nsfw": False,
            "description": "",
            **sent,
            "id": old["id"] if old else str(self._snowflake()),  # Discord keeps a command's id across syncs
            "application_id": str(self.application_id),
            "version": str(self._snowflake()),
        }
        if scope is not None:
            command["guild_id"] = str(scope)
        return command

    def _check_application(self, match: dict[str, str]) -> None:
        if int(match["app"]) != self.application_id:
            raise DiscordError(403, "Missing Access", 50001)

    async def _post_callback(self, request: web.Request, match: dict[str, str], rec: RecordedRequest) -> web.Response:
        sent = self.interactions.get(match["token"])
        if sent is None or sent.id != int(match["id"]):
            raise DiscordError(404, "Unknown interaction", 10062)
        if sent.callbacks:
            raise DiscordError(400, "Interaction has already been acknowledged.", 40060)
        if time.monotonic() - sent.dispatched_at > self.callback_deadline_s:
            # Discord drops an interaction that got no answer within 3 s; the bot must defer sooner.
            raise DiscordError(404, "Unknown interaction", 10062)
        body = rec.json if isinstance(rec.json, dict) else {}
        callback = InteractionCallback(int(body.get("type", 0)), body.get("data") or {}, _files_of(rec.parts))
        message = self._apply_callback(sent, callback)
        sent.callbacks.append(callback)
        if not _is_true(request.query.get("with_response")):
            return web.Response(status=204)
        return _json(200, _callback_reply(sent, callback, message))

    def _apply_callback(self, sent: SentInteraction, callback: InteractionCallback) -> dict[str, Any] | None:
        data = callback.data
        match callback.type:
            case 4 | 5:
                flags = (int(data.get("flags", 0)) & EPHEMERAL) | (LOADING if callback.type == 5 else 0)
                fields = data if callback.type == 4 else {}
                kind = MESSAGE_CHAT_INPUT if sent.type == INTERACTION_APP_COMMAND else MESSAGE_DEFAULT
                message = self._new_message(sent.channel_id, fields, callback.files, kind=kind, sent=sent, flags=flags)
                sent.original_message_id = int(message["id"])
                sent.has_reply = callback.type == 4
                return message
            case 6 | 7 if sent.type == INTERACTION_COMPONENT:
                assert sent.source_message_id is not None  # a component interaction always has one
                sent.original_message_id = sent.source_message_id
                if callback.type == 6:
                    return None
                sent.has_reply = True
                return self._edit_message(sent.source_message_id, data, callback.files)
            case 8 if sent.type == INTERACTION_AUTOCOMPLETE:
                return None
            case 9 if sent.type != INTERACTION_AUTOCOMPLETE:
                return None
        raise DiscordError(
            400, f"Invalid interaction response type {callback.type} for interaction type {sent.type}", 0
        )

    async def _post_followup(self, request: web.Request, match: dict[str, str], rec: RecordedRequest) -> web.Response:
        sent = self._answered_interaction(match)
        payload = rec.json if isinstance(rec.json, dict) else {}
        files = _files_of(rec.parts)
        original = self._messages.get(sent.original_message_id or 0)
        if original is not None and original["flags"] & LOADING and not sent.followup_ids:
            # After a defer, the first followup fills the loading message instead of posting a new one.
            message = self._edit_message(int(original["id"]), payload, files)
            sent.has_reply = True
        else:
            flags = int(payload.get("flags", 0)) & EPHEMERAL
            message = self._new_message(sent.channel_id, payload, files, kind=MESSAGE_DEFAULT, sent=sent, flags=flags)
        sent.followup_ids.append(int(message["id"]))
        if not _is_true(request.query.get("wait")):
            return web.Response(status=204)
        return _json(200, message)

    async def _get_webhook_message(
        self, request: web.Request, match: dict[str, str], _: RecordedRequest
    ) -> web.Response:
        return _json(200, self.message(self._webhook_message_id(match)))

    async def _patch_webhook_message(
        self, request: web.Request, match: dict[str, str], rec: RecordedRequest
    ) -> web.Response:
        message_id = self._webhook_message_id(match)
        payload = rec.json if isinstance(rec.json, dict) else {}
        message = self._edit_message(message_id, payload, _files_of(rec.parts))
        sent = self._answered_interaction(match)
        if message_id == sent.original_message_id:
            sent.has_reply = True
        return _json(200, message)

    async def _delete_webhook_message(
        self, request: web.Request, match: dict[str, str], _: RecordedRequest
    ) -> web.Response:
        self._delete_message(self._webhook_message_id(match))
        return web.Response(status=204)

    def _answered_interaction(self, match: dict[str, str]) -> SentInteraction:
        sent = self.interactions.get(match["token"])
        if sent is None or int(match["app"]) != self.application_id or not sent.callbacks:
            raise DiscordError(404, "Unknown Webhook", 10015)  # also Discord's answer before the first callback
        return sent

    def _webhook_message_id(self, match: dict[str, str]) -> int:
        sent = self._answered_interaction(match)
        if match["message"] == "@original":
            message_id = sent.original_message_id
        else:
            message_id = int(match["message"])
            if message_id not in (sent.original_message_id, *sent.followup_ids):
                message_id = None
        if message_id is None or message_id not in self._messages:
            raise DiscordError(404, "Unknown Message", 10008)
        return message_id

    async def _post_channel_message(
        self, request: web.Request, match: dict[str, str], rec: RecordedRequest
    ) -> web.Response:
        channel = self._channel(int(match["channel"]))
        channel_id = channel.id
        self._check_postable(channel)
        payload = rec.json if isinstance(rec.json, dict) else {}
        nonce = payload.get("nonce")
        key = (channel_id, str(nonce))
        if nonce is not None and payload.get("enforce_nonce") and key in self._nonces:
            first = self._nonces[key]
            if first in self._deleted_ids:
                raise DiscordError(404, "Unknown Message", 10008)
            return _json(200, self.message(first))  # the duplicate creates nothing
        kind = MESSAGE_REPLY if payload.get("message_reference") else MESSAGE_DEFAULT
        message = self._new_message(channel_id, payload, _files_of(rec.parts), kind=kind, sent=None, flags=0)
        if nonce is not None:
            self._nonces[key] = int(message["id"])
        if self.on_channel_post is not None:
            self.on_channel_post(message)  # the message is stored; the bot has not had the answer yet
        return _json(200, message)

    def _check_postable(self, channel: StandInChannel) -> None:
        failing = self._failing_posts.get(channel.id)
        if failing:
            status = failing.pop(0)
            raise DiscordError(status, f"{status}: Internal Server Error", 0)
        if channel.id in self._refused_posts:
            raise self._refused_posts[channel.id]
        if channel.type == CATEGORY:
            raise DiscordError(*REFUSALS[50008][:2], 50008)

    async def _get_channel_messages(
        self, request: web.Request, match: dict[str, str], _: RecordedRequest
    ) -> web.Response:
        channel_id = self._channel(int(match["channel"])).id
        found = [m for m in self.messages(channel_id) if not m["flags"] & EPHEMERAL]
        before, after = request.query.get("before"), request.query.get("after")
        if before:
            found = [m for m in found if int(m["id"]) < int(before)]
        if after:
            found = [m for m in found if int(m["id"]) > int(after)]
        limit = int(request.query.get("limit", "50"))
        return _json(200, list(reversed(found))[:limit])  # newest first, like Discord

    async def _get_channel_message(
        self, request: web.Request, match: dict[str, str], _: RecordedRequest
    ) -> web.Response:
        return _json(200, self.message(self._channel_message_id(match)))

    async def _patch_channel_message(
        self, request: web.Request, match: dict[str, str], rec: RecordedRequest
    ) -> web.Response:
        payload = rec.json if isinstance(rec.json, dict) else {}
        return _json(200, self._edit_message(self._channel_message_id(match), payload, _files_of(rec.parts)))

    async def _delete_channel_message(
        self, request: web.Request, match: dict[str, str], _: RecordedRequest
    ) -> web.Response:
        self._delete_message(self._channel_message_id(match))
        return web.Response(status=204)

    def _channel_message_id(self, match: dict[str, str]) -> int:
        message = self._messages.get(int(match["message"]))
        if message is None or message["channel_id"] != match["channel"] or message["flags"] & EPHEMERAL:
            raise DiscordError(404, "Unknown Message", 10008)
        return int(message["id"])

    # -- messages -------------------------------------------------------------------------------

    def _new_message(
        self,
        channel_id: int,
        payload: dict[str, Any],
        files: list[RecordedPart],
        *,
        kind: int,
        sent: SentInteraction | None,
        flags: int,
    ) -> dict[str, Any]:
        _check_form(payload)
        message = _message_shell(self._snowflake(), channel_id, self._channel_guild(channel_id), self.bot_user, kind)
        message["flags"] = flags | (int(payload.get("flags", 0)) & ~(EPHEMERAL | LOADING))
        if sent is not None:
            message["webhook_id"] = str(self.application_id)
            message["application_id"] = str(self.application_id)
            message["interaction_metadata"] = {
                "id": str(sent.id),
                "type": sent.type,
                "user": self._user(sent.user_id),
                "authorizing_integration_owners": {"0": str(sent.guild_id)},
            }
        self._apply_fields(message, payload, files)
        if "nonce" in payload:
            message["nonce"] = payload["nonce"]
        if payload.get("message_reference"):
            message["message_reference"] = {"channel_id": str(channel_id), **payload["message_reference"]}
        if flags & LOADING == 0 and not _has_body(message):
            raise DiscordError(400, "Cannot send an empty message", 50006)
        self._messages[int(message["id"])] = message
        return copy.deepcopy(message)

    def _edit_message(self, message_id: int, payload: dict[str, Any], files: list[RecordedPart]) -> dict[str, Any]:
        _check_form(payload)
        message = self._messages.get(message_id)
        if message is None:
            raise DiscordError(404, "Unknown Message", 10008)
        self._apply_fields(message, payload, files)
        if "flags" in payload:
            kept = message["flags"] & (EPHEMERAL | LOADING)
            message["flags"] = kept | (int(payload["flags"] or 0) & ~(EPHEMERAL | LOADING))
        message["flags"] &= ~LOADING
        message["edited_timestamp"] = _now()
        return copy.deepcopy(message)

    def _apply_fields(self, message: dict[str, Any], payload: dict[str, Any], files: list[RecordedPart]) -> None:
        for key, empty in (("content", ""), ("embeds", []), ("components", []), ("tts", False)):
            if key in payload:
                message[key] = payload[key] if payload[key] is not None else empty
        message["embeds"] = [{"type": "rich", **e} for e in message["embeds"]]
        if "attachments" in payload or files:
            message["attachments"] = self._attachments(message["attachments"], payload.get("attachments"), files)

    def _attachments(
        self, existing: list[dict[str, Any]], listed: list[dict[str, Any]] | None, files: list[RecordedPart]
    ) -> list[dict[str, Any]]:
        # An upload is named `files[n]` and listed as {"id": n}; an existing attachment is kept only if listed.
        uploads = {int(m.group(1)): p for p in files if p.name and (m := re.fullmatch(r"files\[(\d+)\]", p.name))}
        by_id = {a["id"]: a for a in existing}
        result, used = [], set()
        for entry in listed if listed is not None else [{"id": a["id"]} for a in existing]:
            entry_id = str(entry.get("id"))
            if entry_id in by_id:
                result.append(by_id[entry_id])
            elif entry_id.isdigit() and int(entry_id) in uploads:
                part = uploads[int(entry_id)]
                used.add(int(entry_id))
                result.append(self._store_file(entry.get("filename") or part.filename or "file", part.data, part))
        for index, part in sorted(uploads.items()):
            if index not in used:
                result.append(self._store_file(part.filename or "file", part.data, part))
        return result

    def _store_file(self, filename: str, data: bytes, part: RecordedPart | None) -> dict[str, Any]:
        attachment_id = self._snowflake()
        sent_type = part.content_type if part else None
        content_type = sent_type or mimetypes.guess_type(filename)[0] or "application/octet-stream"
        self._files[attachment_id] = (filename, content_type, data)
        url = f"{self.url}/attachments/{attachment_id}/{quote(filename)}"
        return {
            "id": str(attachment_id),
            "filename": filename,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    def _delete_message(self, message_id: int) -> None:
        self._messages.pop(message_id, None)
        self._deleted_ids.add(message_id)

    # -- gateway --------------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.gateway_queries.append(dict(request.query))
        self._sockets.add(ws)
        try:
            await ws.send_json({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_INTERVAL_MS}, "s": None, "t": None})
            async for frame in ws:
                if frame.type is WSMsgType.TEXT:
                    await self._on_gateway_frame(ws, json.loads(frame.data))
        finally:
            self._sockets.discard(ws)
            if self._session is not None and self._session.ws is ws:
                self._session.ws = None
        return ws

    async def _on_gateway_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        self.gateway_frames.append(frame)
        match frame.get("op"):
            case 1:
                await ws.send_json({"op": 11, "d": None, "s": None, "t": None})
            case 2:
                await self._identify(ws, frame["d"])
            case 6:
                await self._resume(ws, frame["d"])
            case _:
                pass  # presence updates and member requests change nothing here
        async with self._changed:
            self._changed.notify_all()

    async def _identify(self, ws: web.WebSocketResponse, identify: dict[str, Any]) -> None:
        if self.token is not None and identify.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        self._session = _GatewaySession(id=secrets.token_hex(16), ws=ws)
        ready = {
            "v": 10,
            "user": self.bot_user,
            "guilds": [{"id": str(g.id), "unavailable": True} for g in self.guilds],
            "session_id": self._session.id,
            "session_type": "normal",
            "resume_gateway_url": self.ws_url,
            "shard": [0, 1],
            "application": {"id": str(self.application_id), "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
        }
        await self._dispatch_event("READY", ready)
        for guild in self.guilds:
            await self._dispatch_event("GUILD_CREATE", self._guild_payload(guild))

    async def _resume(self, ws: web.WebSocketResponse, resume: dict[str, Any]) -> None:
        session = self._session
        if session is None or resume.get("session_id") != session.id:
            await ws.send_json({"op": 9, "d": False, "s": None, "t": None})  # not resumable: identify anew
            return
        session.ws = ws
        backlog, session.backlog = session.backlog, []
        for frame in backlog:
            await ws.send_json(frame)
        await self._dispatch_event("RESUMED", {})

    async def _dispatch_event(self, name: str, data: dict[str, Any]) -> None:
        session = self._session
        if session is None:
            raise RuntimeError(f"No bot has identified on the gateway, so {name} has no receiver; start the client.")
        session.seq += 1
        frame = {"op": 0, "t": name, "s": session.seq, "d": data}
        if session.ws is None or session.ws.closed:
            session.backlog.append(frame)  # replayed when the client RESUMEs
            return
        await session.ws.send_json(frame)

    # -- payloads from the configuration ----------------------------------------------------------

    def _snowflake(self) -> int:
        # Real snowflakes carry their creation time, so discord.py's created_at stays meaningful.
        now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_snowflake = max(now, self._last_snowflake + 1)
        return self._last_snowflake

    def _guild(self, guild_id: int) -> StandInGuild:
        for guild in self.guilds:
            if guild.id == guild_id:
                return guild
        raise DiscordError(404, "Unknown Guild", 10004)

    def _channel(self, channel_id: int) -> StandInChannel:
        for channel in itertools.chain.from_iterable(g.channels for g in self.guilds):
            if channel.id == channel_id:
                return channel
        raise DiscordError(404, "Unknown Channel", 10003)

    def _channel_guild(self, channel_id: int) -> int:
        return next(g.id for g in self.guilds if any(c.id == channel_id for c in g.channels))

    def _role(self, role_id: int) -> StandInRole | None:
        roles = itertools.chain.from_iterable(g.roles for g in self.guilds)
        return next((r for r in roles if r.id == role_id), None)

    def _user(self, user_id: int) -> dict[str, Any]:
        return _user(user_id, self.usernames.get(user_id, f"user-{user_id}"), is_bot=False)

    def _member(self, user_id: int, role_ids: Sequence[int]) -> dict[str, Any]:
        roles = [r for r in (self._role(i) for i in role_ids) if r is not None]
        permissions = EVERYONE_PERMISSIONS
        for role in roles:
            permissions |= role.permissions
        return {
            "user": self._user(user_id),
            "roles": [str(i) for i in role_ids],
            "joined_at": "2024-01-01T00:00:00+00:00",
            "nick": None,
            "avatar": None,
            "deaf": False,
            "mute": False,
            "pending": False,
            "flags": 0,
            "permissions": str(permissions),
        }

    def _channel_payload(self, channel_id: int) -> dict[str, Any]:
        channel = self._channel(channel_id)
        guild_id = self._channel_guild(channel_id)
        position = next(i for g in self.guilds for i, c in enumerate(g.channels) if c.id == channel_id)
        return {
            "id": str(channel.id),
            "type": channel.type,
            "name": channel.name,
            "guild_id": str(guild_id),
            "position": position,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "rate_limit_per_user": 0,
            "last_message_id": None,
            "flags": 0,
        }

    def _guild_payload(self, guild: StandInGuild) -> dict[str, Any]:
        bot_member = {**self._member(BOT_USER_ID, ()), "user": self.bot_user}
        return {
            "id": str(guild.id),
            "name": guild.name,
            "unavailable": False,
            "owner_id": str(ALICE_ID),
            "member_count": 3,
            "large": False,
            "joined_at": "2024-01-01T00:00:00+00:00",
            "roles": [_role_payload(r) for r in guild.roles],
            "channels": [
                {k: v for k, v in self._channel_payload(c.id).items() if k != "guild_id"} for c in guild.channels
            ],
            "members": [bot_member],
            "threads": [],
            "voice_states": [],
            "presences": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "preferred_locale": "en-US",
            "premium_tier": 0,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "system_channel_id": None,
        }


# -- discord.py wiring ----------------------------------------------------------------------------


@contextmanager
def pointed_at(standin: DiscordStandIn) -> Iterator[None]:
    """Point every discord.py REST, webhook and gateway call at the stand-in, and restore afterwards."""
    saved = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    discord.http.Route.BASE = f"{standin.url}{API}"
    # A yarl.URL: discord.py appends ?v=10&encoding=json&compress=zlib-stream with with_query().
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(standin.ws_url)
    try:
        yield
    finally:
        discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = saved


def bot_settings_for(standin: DiscordStandIn, api: str, home: Path) -> BotSettings:
    """The bot's settings against this stand-in and the daemon at `api` whose home holds bot.token."""
    return BotSettings(
        discord_token=FAKE_TOKEN,
        application_id=standin.application_id,
        guild_ids=(GUILD_ID,),
        api=api,
        api_token=(home / "bot.token").read_text().strip(),
        poll_wait_s=1.0,
    )


@asynccontextmanager
async def discord_standin(
    *,
    guilds: Sequence[StandInGuild] = (DEFAULT_GUILD,),
    token: str | None = None,
    callback_deadline_s: float = 3.0,
) -> AsyncIterator[DiscordStandIn]:
    """`async with discord_standin() as standin:` serves Discord on 127.0.0.1 and points discord.py at it."""
    async with DiscordStandIn(guilds=guilds, token=token, callback_deadline_s=callback_deadline_s) as standin:
        with pointed_at(standin):
            yield standin


@asynccontextmanager
async def running_client(
    client: discord.Client, *, token: str = FAKE_TOKEN, timeout_s: float = 5.0
) -> AsyncIterator[discord.Client]:
    """Log in, connect and wait until ready; close the client and await its connection task on exit."""
    await client.login(token)
    connection = asyncio.create_task(client.connect(), name="discord-client-connect")
    try:
        ready = asyncio.create_task(client.wait_until_ready())
        try:
            done, _ = await asyncio.wait({ready, connection}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            await asyncio.gather(ready, return_exceptions=True)
        if connection in done:
            connection.result()  # raises what stopped the client
            raise RuntimeError("The discord client stopped before it became ready.")
        if ready not in done:
            raise TimeoutError(f"The discord client was not ready within {timeout_s}s.")
        yield client
    finally:
        await client.close()
        await asyncio.wait({connection}, timeout=timeout_s)
        connection.cancel()  # a no-op once connect() has returned, as it does after close()
        await asyncio.gather(connection, return_exceptions=True)


# -- pure helpers ---------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _json(status: int, body: Any) -> web.Response:
    # Exactly "application/json": discord.py parses JSON only on that exact header, not with a charset.
    return web.Response(status=status, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


def _rate_limited(retry_after_s: float) -> web.Response:
    response = _json(429, {"message": "You are being rate limited.", "retry_after": retry_after_s, "global": False})
    response.headers.update(
        {
            "Retry-After": str(math.ceil(retry_after_s)),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{time.time() + retry_after_s:.3f}",
            "X-RateLimit-Reset-After": f"{retry_after_s:.3f}",
            "X-RateLimit-Bucket": "standin-bucket",
            "X-RateLimit-Scope": "user",
            "Via": "1.1 google",  # without Via, discord.py takes a 429 for a Cloudflare ban and raises
        }
    )
    return response


async def _read_body(request: web.Request) -> tuple[Any, list[RecordedPart]]:
    if not request.content_type.startswith("multipart/"):
        raw = await request.read()
        if not raw:
            return None, []
        try:
            return json.loads(raw), []
        except ValueError:
            return raw.decode(errors="replace"), []
    parts: list[RecordedPart] = []
    async for part in await request.multipart():
        if isinstance(part, BodyPartReader):
            data = bytes(await part.read())
            parts.append(RecordedPart(part.name, part.filename, part.headers.get("Content-Type"), data))
    payload_json = next((p.data for p in parts if p.name == "payload_json"), None)
    return (json.loads(payload_json) if payload_json else None), parts


def _files_of(parts: list[RecordedPart]) -> list[RecordedPart]:
    return [p for p in parts if p.name != "payload_json"]


def _is_true(flag: str | None) -> bool:
    return (flag or "").lower() in ("1", "true")


def _user(user_id: int, username: str, *, is_bot: bool) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": username,
        "discriminator": "0",
        "global_name": None if is_bot else username.title(),
        "avatar": None,
        "bot": is_bot,
        "public_flags": 0,
    }


def _without(payload: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k != key}


def _role_payload(role: StandInRole) -> dict[str, Any]:
    return {
        "id": str(role.id),
        "name": role.name,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "position": 0,
        "permissions": str(role.permissions),
        "managed": False,
        "mentionable": False,
        "flags": 0,
    }


def _message_shell(
    message_id: int, channel_id: int, guild_id: int, author: dict[str, Any], kind: int
) -> dict[str, Any]:
    return {
        "id": str(message_id),
        "type": kind,
        "channel_id": str(channel_id),
        "guild_id": str(guild_id),
        "author": author,
        "content": "",
        "embeds": [],
        "attachments": [],
        "components": [],
        "timestamp": _now(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "pinned": False,
        "flags": 0,
    }


def _has_body(message: dict[str, Any]) -> bool:
    return bool(message["content"] or message["embeds"] or message["attachments"] or message["components"])


def _callback_reply(sent: SentInteraction, callback: InteractionCallback, message: dict[str, Any] | None) -> Any:
    flags = int((message or {}).get("flags", 0))
    interaction: dict[str, Any] = {
        "id": str(sent.id),
        "type": sent.type,
        "response_message_loading": callback.type == 5,
        "response_message_ephemeral": bool(flags & EPHEMERAL),
    }
    if sent.original_message_id is not None:
        # discord.py stores a sent view under this id; a click on the message finds the view by it.
        interaction["response_message_id"] = str(sent.original_message_id)
    resource: dict[str, Any] = {"type": callback.type}
    if message is not None:
        resource["message"] = message
    return {"interaction": interaction, "resource": resource}


def _named(options: list[dict[str, Any]], name: str, why: str) -> dict[str, Any]:
    for option in options:
        if option["name"] == name:
            return option
    raise LookupError(f"{why}: {name!r} is not among {[o['name'] for o in options]}.")


def _leaf_options(data: dict[str, Any]) -> list[dict[str, Any]]:
    options = data.get("options", [])
    nested = [o for o in options if o["type"] in (SUB_COMMAND, SUB_COMMAND_GROUP)]
    return _leaf_options(nested[0]) if nested else options


def _coerced(spec: dict[str, Any], value: OptionValue) -> Any:
    kind = spec["type"]
    converters: dict[int, Callable[[Any], Any]] = {STRING: str, INTEGER: int, BOOLEAN: bool, NUMBER: float}
    if kind in converters:
        return converters[kind](value)
    return str(value)


def _check_choice(spec: dict[str, Any], value: OptionValue) -> None:
    choices = [c["value"] for c in spec.get("choices") or []]
    if choices and value not in choices:
        raise ValueError(f"Option {spec['name']!r} accepts only {choices}, got {value!r}.")


def _find_component(components: list[dict[str, Any]], custom_id: str) -> dict[str, Any] | None:
    for component in components:
        if component.get("custom_id") == custom_id:
            return component
        found = _find_component(component.get("components", []), custom_id)
        if found is not None:
            return found
    return None


def _custom_ids(components: list[dict[str, Any]]) -> set[str]:
    found = {c["custom_id"] for c in components if "custom_id" in c}
    for component in components:
        found |= _custom_ids(component.get("components", []))
    return found


def _too_long(value: Any, limit: int) -> dict[str, Any] | None:
    if isinstance(value, str) and len(value) > limit:
        return {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {limit} or fewer in length."}]}
    return None


def _check_form(payload: dict[str, Any]) -> None:
    """Discord's length limits on a message, which a bot posting long reports hits first."""
    errors: dict[str, Any] = {}
    for key, limit in (("content", 2000), ("nonce", 25)):
        if (error := _too_long(str(payload[key]) if payload.get(key) is not None else None, limit)) is not None:
            errors[key] = error
    embeds = payload.get("embeds") or []
    if len(embeds) > 10:
        errors["embeds"] = {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 10 or fewer in length."}]}
    for index, embed in enumerate(embeds[:10]):
        embed_errors = {
            k: e
            for k, e in (
                ("title", _too_long(embed.get("title"), 256)),
                ("description", _too_long(embed.get("description"), 4096)),
            )
            if e
        }
        for f_index, item in enumerate(embed.get("fields") or []):
            for key, limit in (("name", 256), ("value", 1024)):
                if error := _too_long(item.get(key), limit):
                    embed_errors.setdefault("fields", {}).setdefault(str(f_index), {})[key] = error
        for key, limit in (("footer", 2048), ("author", 256)):
            part = embed.get(key) or {}
            if error := _too_long(part.get("text" if key == "footer" else "name"), limit):
                embed_errors[key] = error
        if len(embed.get("fields") or []) > 25:
            embed_errors["fields"] = {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 25 or fewer."}]}
        if _embed_size(embed) > 6000:
            embed_errors["_errors"] = [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Embed size exceeds 6000."}]
        if embed_errors:
            errors.setdefault("embeds", {})[str(index)] = embed_errors
    if errors:
        raise DiscordError(400, "Invalid Form Body", 50035, errors)


def _embed_size(embed: dict[str, Any]) -> int:
    """The characters Discord counts against an embed's 6000: title, description, fields, footer, author."""
    texts = [embed.get("title"), embed.get("description"), (embed.get("footer") or {}).get("text")]
    texts += [(embed.get("author") or {}).get("name")]
    texts += [item.get(key) for item in embed.get("fields") or [] for key in ("name", "value")]
    return sum(len(text) for text in texts if isinstance(text, str))


def _command_errors(commands: list[dict[str, Any]]) -> dict[str, Any]:
    """Discord's checks on synced commands: names, description lengths, unique names, option order."""
    errors: dict[str, Any] = {}
    names = [c.get("name") for c in commands]
    if len(set(names)) != len(names):
        errors["_errors"] = [{"code": "APPLICATION_COMMANDS_DUPLICATE_NAME", "message": "Names must be unique."}]
    for index, command in enumerate(commands):
        if command_errors := _schema_errors(command, needs_description=command.get("type", 1) == 1):
            errors[str(index)] = command_errors
    return errors


def _schema_errors(schema: dict[str, Any], *, needs_description: bool) -> dict[str, Any]:
    errors: dict[str, Any] = {}
    name, description = schema.get("name") or "", schema.get("description") or ""
    if not re.fullmatch(r"[-_\w]{1,32}", name) or name != name.lower():
        errors["name"] = {"_errors": [{"code": "APPLICATION_COMMAND_INVALID_NAME", "message": f"Invalid {name!r}."}]}
    if needs_description and not 1 <= len(description) <= 100:
        errors["description"] = {"_errors": [{"code": "BASE_TYPE_BAD_LENGTH", "message": "Must be 1-100 long."}]}
    options = schema.get("options") or []
    required = [bool(o.get("required")) for o in options]
    if required != sorted(required, reverse=True):
        errors["options"] = {"_errors": [{"code": "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID_ORDER"}]}
    if len(options) > 25 or len(schema.get("choices") or []) > 25:
        errors["options"] = {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 25 or fewer."}]}
    for index, option in enumerate(options):
        if option_errors := _schema_errors(option, needs_description=True):
            errors.setdefault("options", {})[str(index)] = option_errors
    return errors
