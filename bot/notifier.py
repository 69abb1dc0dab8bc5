"""The Discord notifier: a durable consumer of the daemon's notices that posts each one in its project's
channel. Its cursor lives in the ledger and moves only after a post landed; each post carries a nonce
derived from its event with enforce_nonce, so the resend after a crash between post and acknowledgement
is dropped by Discord instead of appearing twice. Discord's 429s are waited out by discord.py's HTTP
client (it sleeps `retry_after` and retries). A refusal that no resend can change (any other 4xx: a
category channel, a missing permission, an invalid body) is recorded in the ledger as `notice.failed` and
passed, so it never holds back the notices behind it; the next post in the default channel says so. Other
failures (5xx, the network, the daemon away) are retried from the same cursor with a capped backoff."""

from __future__ import annotations

import asyncio
import io
import logging
from dataclasses import dataclass
from typing import Any

import discord
from bashgym.bot.core import COLOURS, cut, fit
from bashgym.client.aio import AioDaemonClient
from bashgym.client.errors import ApiError
from bashgym.client.models import Notice, NoticePage

log = logging.getLogger("bashgym.bot.notifier")
MAX_BACKOFF_S = 30.0
MESSAGE_LIMIT = 2000  # characters of a message's content
KEPT_MESSAGE = 500  # of Discord's error text when recorded: a 50035 lists every field it refused
TOLD_MESSAGE = 200  # of its first line when the default channel tells of a refusal


def notice_embed(notice: Notice) -> discord.Embed:
    made = discord.Embed(title=notice.title, description=notice.description or None, colour=COLOURS[notice.outcome])
    for item in notice.fields:
        made.add_field(name=item.name, value=item.value or "—", inline=item.inline)
    made.set_footer(text=notice.footer)
    charts = [f.name for f in notice.files if f.name.endswith(".png")]
    if charts:
        made.set_image(url=f"attachment://{charts[0]}")
    return fit(made)


def is_permanent(exc: discord.HTTPException) -> bool:
    """Whether sending again cannot change Discord's answer for this notice: any 4xx but 429 (discord.py waits
    those out) and 401, which refuses the bot's token, not the notice: every notice would be dead-lettered, so the
    notifier retries from the same cursor until the token works again."""
    return 400 <= exc.status < 500 and exc.status not in (401, 429)


@dataclass
class Refusal:
    """Notices one channel refused since the default channel last said so, and Discord's latest answer."""

    count: int
    status: int
    code: int
    message: str

    def line(self, channel_id: int) -> str:
        what = "1 notice" if self.count == 1 else f"{self.count} notices"
        code = f" {self.code}" if self.code else ""
        reason = cut((self.message.splitlines() or [""])[0], TOLD_MESSAGE)
        return (
            f"⚠ {what} could not be posted in <#{channel_id}>: Discord answered {self.status}{code} ({reason}). "
            "`bashgym doctor` says what to do."
        )


class DiscordNotifier:
    def __init__(
        self,
        client: discord.Client,
        daemon: AioDaemonClient,
        *,
        consumer: str,
        default_channel_id: int | None = None,
        wait_s: float = 10.0,
    ) -> None:
        self.client = client
        self.daemon = daemon
        self.consumer = consumer
        self.default_channel_id = default_channel_id
        self.wait_s = wait_s
        self.posted = 0
        self.refused = 0
        self._untold: dict[int, Refusal] = {}  # refused channel -> what the next post in the default channel says

    async def start_cursor(self) -> int:
        """Where to resume: the stored cursor, or (first start) the head, stored at once."""
        return await self._start_cursor()

    async def run(self, cursor: int | None = None) -> None:
        backoff = 1.0
        while True:
            try:
                if cursor is None:
                    cursor = await self._start_cursor()
                cursor = await self.step(cursor)
                backoff = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the daemon restarting, Discord down: wait and go on from the same cursor
                log.warning("Notifier: %s; retrying in %.0f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _start_cursor(self) -> int:
        stored = await self.daemon.request("GET", f"/v1/consumers/{self.consumer}/cursor")
        if stored.get("updated_at"):
            return int(stored["cursor"])
        # A first start begins at the head: a channel gets what happens from now on, not the history.
        head = int((await self.daemon.request("GET", "/v1/ledger/health"))["last_cursor"])
        await self._ack(head)
        return head

    async def step(self, cursor: int) -> int:
        """Post the next page of notices and acknowledge each; returns the new cursor."""
        raw = await self.daemon.request(
            "GET",
            "/v1/notices",
            params={"after_cursor": cursor, "limit": 50, "wait_s": self.wait_s},
            timeout_s=self.wait_s + 30,
        )
        page = NoticePage.model_validate(raw)
        for notice in page.notices:
            await self.post(notice)
            await self._ack(notice.cursor)
        if page.next_cursor != cursor:
            await self._ack(page.next_cursor)
        return page.next_cursor

    async def post(self, notice: Notice) -> None:
        """Post one notice; a permanent refusal is recorded (and passed) instead of raised."""
        channel_id = int(notice.channel_id) if notice.channel_id else self.default_channel_id
        if channel_id is None:
            log.debug("Notice %s of project %s has no channel; skipped", notice.cursor, notice.project_id)
            return
        files = [await self._file(notice, f.path, f.name) for f in notice.files]
        channel = self.client.get_partial_messageable(channel_id)
        told = self._told_in(channel_id)
        try:
            await channel.send(content=told or None, embed=notice_embed(notice), files=files, nonce=notice.nonce)
        except discord.HTTPException as exc:
            if not is_permanent(exc):
                raise
            await self._record_refusal(notice, channel_id, exc)
            return
        if told:
            self._untold.clear()
        self.posted += 1

    def _told_in(self, channel_id: int) -> str:
        """The lines a post in `channel_id` carries: refusals elsewhere, when it is the default channel."""
        if channel_id != self.default_channel_id or not self._untold:
            return ""
        return cut("\n".join(r.line(refused) for refused, r in self._untold.items()), MESSAGE_LIMIT)

    async def _record_refusal(self, notice: Notice, channel_id: int, exc: discord.HTTPException) -> None:
        """Record a notice Discord refused for good as `notice.failed`; the daemon moves the cursor past it."""
        message = cut(exc.text or "", KEPT_MESSAGE)
        log.error(
            "Discord refused notice %s in channel %s (HTTP %s, code %s: %s); recorded as notice.failed, and "
            "`bashgym doctor` says what to do",
            notice.cursor,
            channel_id,
            exc.status,
            exc.code,
            message,
        )
        failure = {"cursor": notice.cursor, "event_id": notice.event_id, "channel_id": str(channel_id)}
        failure |= {"status": exc.status, "code": exc.code, "message": message}
        try:
            await self.daemon.request("POST", f"/v1/consumers/{self.consumer}/failures", body=failure)
        except ApiError as refused:
            if not 400 <= refused.status < 500 or refused.status == 429:
                raise  # the daemon away or busy: the notice is posted again from the same cursor, then recorded
            # The daemon refuses the record itself (one older than this bot has no such route): the log above is
            # all there is, and holding every later notice back would not change that.
            log.error("Could not record notice %s as failed: %s", notice.cursor, refused.message)
        self.refused += 1
        if self.default_channel_id is not None and channel_id != self.default_channel_id:
            seen = self._untold.get(channel_id)
            count = seen.count + 1 if seen else 1
            self._untold[channel_id] = Refusal(count, exc.status, exc.code, message)

    async def _file(self, notice: Notice, path: str, name: str) -> discord.File:
        data = await self.daemon.raw("GET", path, params={"workspace": notice.workspace_id})
        return discord.File(io.BytesIO(data), filename=name)

    async def _ack(self, cursor: int) -> None:
        body: dict[str, Any] = {"cursor": cursor}
        try:
            await self.daemon.request("PUT", f"/v1/consumers/{self.consumer}/cursor", body=body)
        except ApiError as exc:
            raise RuntimeError(f"could not store the notifier's cursor {cursor}: {exc.message}") from exc
