"""What every slash command shares: the daemon call on behalf of the person who typed it, the answer
(deferred when the daemon is slow), errors as short ephemeral messages, replies as compact embeds, and
the Confirm/Cancel view of consequential commands. The bot decides nothing: the daemon does."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import discord
from bashgym.client.aio import AioDaemonClient
from bashgym.client.errors import ApiError
from bashgym.client.redaction import redact_text

log = logging.getLogger("bashgym.bot")

DEFER_AFTER_S = 0.8  # Discord wants an answer within 3 s; one not ready by now is deferred, then edited
CONFIRM_TIMEOUT_S = 60.0
COLOURS = {
    "success": discord.Colour.green(),
    "failure": discord.Colour.red(),
    "warning": discord.Colour.orange(),
    "info": discord.Colour.blurple(),
    "neutral": discord.Colour.light_grey(),
}
DISCORD_USER_HEADER = "x-discord-user-id"
DISCORD_ROLES_HEADER = "x-discord-role-ids"
DISCORD_GUILD_HEADER = "x-discord-guild-id"


@dataclass
class Reply:
    """What a command answers: text and/or one embed, files, and whether only the caller sees it."""

    content: str = ""
    embed: discord.Embed | None = None
    files: list[discord.File] = field(default_factory=list)
    ephemeral: bool = False
    # Work that ends later: this reply shows at once, then is edited into what `then` answers.
    then: Callable[[], Awaitable[Reply]] | None = None


def identity_headers(interaction: discord.Interaction[Any]) -> dict[str, str]:
    """Who typed the command, for the daemon to resolve into grants (the bot's token only vouches)."""
    user = interaction.user
    roles = [str(role.id) for role in getattr(user, "roles", []) if role.id != interaction.guild_id]
    return {
        DISCORD_USER_HEADER: str(user.id),
        DISCORD_ROLES_HEADER: ",".join(roles),
        DISCORD_GUILD_HEADER: str(interaction.guild_id or ""),
    }


# Each segment of a daemon path is a fixed word or an id someone typed; ids follow the ledger's identifier rule.
PATH_SEGMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,159}$")


def check_path(path: str) -> None:
    """Refuse a path that a typed value bends: `..` would reach another route, `?` or `#` another query."""
    for segment in path.split("/")[1:]:
        if not PATH_SEGMENT_RE.match(segment) or segment == "..":
            raise ApiError(
                422,
                "invalid_input",
                f"{segment!r} is not a valid id (in {path[:200]!r}).",
                "Ids are letters, digits and _ . : -, starting with a letter or digit; pick one from the list offered.",
            )


class Daemon:
    """The daemon client as used for one Discord user: every call carries their identity."""

    def __init__(self, client: AioDaemonClient) -> None:
        self.client = client

    async def call(
        self,
        interaction: discord.Interaction[Any],
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        check_path(path)
        return await self.client.request(
            method,
            path,
            body=body,
            params=params,
            headers=identity_headers(interaction),
            correlation_id=f"discord-{interaction.id}",
            idempotency_key=f"discord-{interaction.id}",
        )


def error_reply(exc: ApiError) -> Reply:
    text = f"**{exc.message}**"
    if exc.hint:
        text += f"\n{exc.hint}"
    if exc.reference:
        text += f"\nReference: `{exc.reference}` (the daemon's log has the details)."
    return Reply(content=text[:1900], ephemeral=True)


def unexpected_reply(where: str) -> Reply:
    reference = f"bot-{secrets.token_hex(6)}"
    log.exception("Unexpected error in %s (reference %s)", where, reference)
    return Reply(
        content=f"Something went wrong on the bot's side. Reference: `{reference}` (it is in the bot's log).",
        ephemeral=True,
    )


async def answer(
    interaction: discord.Interaction[Any], work: Awaitable[Reply], *, where: str = "", ephemeral: bool = False
) -> None:
    """Answer at once when the daemon is quick; otherwise defer within the second and edit the reply."""
    task: asyncio.Future[Reply] = asyncio.ensure_future(work)
    finished, _ = await asyncio.wait({task}, timeout=DEFER_AFTER_S)
    if not finished:
        await interaction.response.defer(ephemeral=ephemeral, thinking=True)
    try:
        reply = await task
    except ApiError as exc:
        reply = error_reply(exc)
    except Exception:
        reply = unexpected_reply(where or interaction.command.qualified_name if interaction.command else "command")
    reply.ephemeral = reply.ephemeral or ephemeral
    await send(interaction, reply)


async def send(interaction: discord.Interaction[Any], reply: Reply) -> None:
    # Every embed a command answers is fitted on its way out: one over Discord's limits fails the whole reply.
    embeds = [fit(reply.embed)] if reply.embed is not None else []
    if not interaction.response.is_done():
        await interaction.response.send_message(
            content=reply.content or None, embeds=embeds, files=reply.files, ephemeral=reply.ephemeral
        )
        return
    original = await interaction.original_response()
    if reply.ephemeral and not original.flags.ephemeral:
        # A public "thinking…" must not turn into a public error: drop it and answer privately.
        await interaction.delete_original_response()
        await interaction.followup.send(
            content=reply.content or discord.utils.MISSING, embeds=embeds, files=reply.files, ephemeral=True
        )
        return
    await interaction.edit_original_response(content=reply.content or None, embeds=embeds, attachments=reply.files)


# -- rendering ----------------------------------------------------------------------------------


# Discord refuses a whole message whose embed passes any of these limits (50035 Invalid Form Body).
TITLE_LIMIT = 256
DESCRIPTION_LIMIT = 4096
FIELDS_LIMIT = 25
FIELD_NAME_LIMIT = 256
FIELD_VALUE_LIMIT = 1024
FOOTER_LIMIT = 2048
AUTHOR_LIMIT = 256
EMBED_TOTAL_LIMIT = 6000  # title, description, field names and values, footer and author together
CUT_MARK = "… (cut)"
KEPT_DESCRIPTION = 1000  # over the total, fields are left out before the description is cut shorter than this

Field = tuple[str, str, bool]


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters; a cut one ends with CUT_MARK, so a reader knows there was more."""
    if len(text) <= limit:
        return text
    return text[: max(limit - len(CUT_MARK), 0)] + CUT_MARK[:limit]


def fit(made: discord.Embed) -> discord.Embed:
    """`made`, changed to fit Discord's embed limits: long text cut with a visible mark, and fields past the
    count or the total left out for a last field that says how many."""
    title = cut(made.title or "", TITLE_LIMIT)
    footer = cut(made.footer.text or "", FOOTER_LIMIT)
    author = cut(made.author.name or "", AUTHOR_LIMIT)
    description = cut(made.description or "", DESCRIPTION_LIMIT)
    fields = [
        (cut(f.name or "—", FIELD_NAME_LIMIT), cut(f.value or "—", FIELD_VALUE_LIMIT), bool(f.inline))
        for f in made.fields
    ]
    room = EMBED_TOTAL_LIMIT - len(title) - len(footer) - len(author)
    shown = _fitting_fields(fields, room - min(len(description), KEPT_DESCRIPTION))
    description = cut(description, room - sum(len(name) + len(value) for name, value, _ in shown))
    made.title, made.description = title or None, description or None
    made.clear_fields()
    for name, value, inline in shown:
        made.add_field(name=name, value=value, inline=inline)
    if footer:
        made.set_footer(text=footer, icon_url=made.footer.icon_url)
    if author:
        made.set_author(name=author, url=made.author.url, icon_url=made.author.icon_url)
    return made


def _fitting_fields(fields: list[Field], room: int) -> list[Field]:
    """The first fields that fit Discord's count and `room` characters; a last one says how many were left out."""
    kept = list(fields)
    while True:
        left_out = len(fields) - len(kept)
        note = f"{left_out} more field{'s' if left_out > 1 else ''}, over Discord's limits"
        shown = kept + ([("left out", note, False)] if left_out else [])
        if len(shown) <= FIELDS_LIMIT and sum(len(name) + len(value) for name, value, _ in shown) <= room:
            return shown
        kept.pop()


def embed(title: str, *, outcome: str = "info", description: str = "", footer: str = "") -> discord.Embed:
    made = discord.Embed(title=title, description=description or None, colour=COLOURS[outcome])
    if footer:
        made.set_footer(text=footer)
    return fit(made)


def show(value: object) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(", ", ": "))[:1000]
    return str(value)[:1000]


def fields_embed(
    title: str, data: Mapping[str, Any], keys: Iterable[str], *, outcome: str = "info", description: str = ""
) -> discord.Embed:
    made = embed(title, outcome=outcome, description=description)
    for key in keys:
        if key in data and data[key] not in (None, "", [], {}):
            made.add_field(name=key, value=show(data[key]), inline=True)
    return fit(made)


def table(rows: Sequence[Mapping[str, Any]], columns: list[str], *, limit: int = 15) -> str:
    """Rows as a monospace table in a code block, within Discord's message size."""
    if not rows:
        return "(none)"
    shown = rows[:limit]
    widths = {c: min(28, max(len(c), *(len(show(r.get(c))) for r in shown))) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(show(r.get(c))[: widths[c]].ljust(widths[c]) for c in columns) for r in shown]
    more = f"\n… and {len(rows) - limit} more" if len(rows) > limit else ""
    return ("```\n" + "\n".join(lines)[:1800] + "\n```" + more)[:1990]


# -- confirmations ------------------------------------------------------------------------------


class Confirm(discord.ui.View):
    """Confirm or Cancel a consequential command. Only the person who typed it may press; it expires
    after a minute; the daemon still checks their authority when the confirmed request arrives."""

    def __init__(
        self, owner_id: int, action: Callable[[], Awaitable[Reply]], *, timeout_s: float = CONFIRM_TIMEOUT_S
    ) -> None:
        super().__init__(timeout=timeout_s)
        self.owner_id = owner_id
        self.action = action
        self.message: discord.InteractionMessage | None = None

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        if interaction.user.id == self.owner_id:
            return True
        await interaction.response.send_message(
            f"Only <@{self.owner_id}>, who asked for this, can confirm or cancel it.", ephemeral=True
        )
        return False

    def _close(self) -> None:
        for item in self.children:
            if isinstance(item, discord.ui.Button):
                item.disabled = True
        self.stop()

    @discord.ui.button(label="Confirm", style=discord.ButtonStyle.danger, custom_id="confirm")
    async def confirm(self, interaction: discord.Interaction[Any], _: discord.ui.Button[Confirm]) -> None:
        self._close()
        await interaction.response.edit_message(view=self)
        reply = await _reply_of(self.action, "confirmation")
        embeds = [reply.embed] if reply.embed is not None else []
        shown = await interaction.followup.send(
            content=reply.content or discord.utils.MISSING, embeds=embeds, ephemeral=reply.ephemeral, wait=True
        )
        if reply.then is not None:
            await _edit_when_done(shown, reply.then)

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary, custom_id="cancel")
    async def cancel(self, interaction: discord.Interaction[Any], _: discord.ui.Button[Confirm]) -> None:
        self._close()
        await interaction.response.edit_message(
            content="Cancelled; nothing was sent to BashGym.", embed=None, view=self
        )

    async def on_timeout(self) -> None:
        self._close()
        if self.message is not None:
            try:
                await self.message.edit(content="Expired after a minute; nothing was sent. Run it again.", view=self)
            except discord.HTTPException:
                log.info("Could not mark an expired confirmation")


async def _reply_of(work: Callable[[], Awaitable[Reply]], where: str) -> Reply:
    """What `work` answers, or its failure as the reply the caller sees."""
    try:
        return await work()
    except ApiError as exc:
        return error_reply(exc)
    except Exception:
        return unexpected_reply(where)


async def _edit_when_done(shown: discord.WebhookMessage, then: Callable[[], Awaitable[Reply]]) -> None:
    final = await _reply_of(then, "a confirmed command")
    await shown.edit(content=final.content or None, embeds=[final.embed] if final.embed is not None else [])


async def confirm_first(
    interaction: discord.Interaction[Any],
    summary: discord.Embed,
    action: Callable[[], Awaitable[Reply]],
    *,
    authority: Authority | Sequence[Authority],
    timeout_s: float = CONFIRM_TIMEOUT_S,
) -> None:
    """Ask the daemon whether this person may do it at all (every capability it will need), refusing privately and
    at once if not; only then show the summary with Confirm and Cancel. The daemon checks the confirmed request
    again."""
    daemon: Daemon = interaction.client.daemon
    for needed in [authority] if isinstance(authority, Authority) else authority:
        params = {"capability": needed.capability, "project": needed.project, "run": needed.run}
        try:
            await daemon.call(interaction, "GET", "/v1/auth/check", params={k: v for k, v in params.items() if v})
        except ApiError as exc:
            await send(interaction, error_reply(exc))
            return
    # The prompt is posted in the channel: a credential typed into an option (a reason) is not echoed there.
    summary.title = redact_text(summary.title) if summary.title else None
    summary.description = redact_text(summary.description) if summary.description else None
    view = Confirm(interaction.user.id, action, timeout_s=timeout_s)
    # Known before the prompt exists: a press can arrive before original_response() returns.
    live_confirmations(interaction.client).add(interaction.id)
    await interaction.response.send_message(
        content="Confirm within a minute; only you can press these.", embed=summary, view=view
    )
    view.message = await interaction.original_response()


@dataclass(frozen=True)
class Authority:
    """What a confirmed command will need: a capability in a project (on a run, for run control)."""

    capability: str
    project: str | None = None
    run: str | None = None


def live_confirmations(client: discord.Client) -> set[int]:
    """The commands (interaction ids) whose Confirm/Cancel this bot showed (a closed view disables its buttons, so
    only these can be pressed while it runs); a press on any other, from before the bot restarted, is answered by
    `answer_stale_confirmation` instead of failing silently."""
    shown: set[int] = client.__dict__.setdefault("_bashgym_confirmations", set())
    return shown


async def answer_stale_confirmation(interaction: discord.Interaction[Any]) -> bool:
    """Answer a Confirm or Cancel press that no live view owns; True if it was one."""
    data: dict[str, Any] = dict(interaction.data or {})
    if interaction.type != discord.InteractionType.component or data.get("custom_id") not in ("confirm", "cancel"):
        return False
    asked = interaction.message.interaction_metadata if interaction.message is not None else None
    if asked is not None and asked.id in live_confirmations(interaction.client):
        return False
    await interaction.response.send_message(
        "This confirmation expired; run the command again. Nothing was sent to BashGym.", ephemeral=True
    )
    return True
