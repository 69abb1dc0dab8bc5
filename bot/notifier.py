"""The Discord notifier: a durable consumer of the daemon's notices that posts each one in its project's
channel. Its cursor lives in the ledger and moves only after a post landed; each post carries a nonce
derived from its event with enforce_nonce, so the resend after a crash between post and acknowledgement
is dropped by Discord instead of appearing twice. Discord's 429s are waited out by discord.py's HTTP
client (it sleeps `retry_after` and retries); other failures are retried here with a capped backoff."""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any

import discord
from bashgym.bot.core import COLOURS
from bashgym.daemon.api_models import Notice, NoticePage
from bashgym.daemon.client_aiohttp import AioDaemonClient
from bashgym.daemon.wire_errors import ApiError

log = logging.getLogger("bashgym.bot.notifier")
MAX_BACKOFF_S = 30.0


def notice_embed(notice: Notice) -> discord.Embed:
    made = discord.Embed(
        title=notice.title[:256], description=notice.description[:4000] or None, colour=COLOURS[notice.outcome]
    )
    for item in notice.fields[:25]:
        made.add_field(name=item.name[:256], value=item.value[:1024] or "—", inline=item.inline)
    made.set_footer(text=notice.footer[:2048])
    charts = [f.name for f in notice.files if f.name.endswith(".png")]
    if charts:
        made.set_image(url=f"attachment://{charts[0]}")
    return made


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
        channel_id = int(notice.channel_id) if notice.channel_id else self.default_channel_id
        if channel_id is None:
            log.debug("Notice %s of project %s has no channel; skipped", notice.cursor, notice.project_id)
            return
        files = [await self._file(notice, f.path, f.name) for f in notice.files]
        channel = self.client.get_partial_messageable(channel_id)
        try:
            await channel.send(embed=notice_embed(notice), files=files, nonce=notice.nonce)
        except (discord.Forbidden, discord.NotFound) as exc:
            # A channel the bot cannot post in is a setup problem; holding every later notice back would
            # not fix it. Say so loudly and go on.
            log.error(
                "Cannot post notice %s in channel %s (%s); set the project's channel again with /project channel-set",
                notice.cursor,
                channel_id,
                exc.text or exc.status,
            )
            return
        self.posted += 1

    async def _file(self, notice: Notice, path: str, name: str) -> discord.File:
        data = await self.daemon.raw("GET", path, params={"workspace": notice.workspace_id})
        return discord.File(io.BytesIO(data), filename=name)

    async def _ack(self, cursor: int) -> None:
        body: dict[str, Any] = {"cursor": cursor}
        try:
            await self.daemon.request("PUT", f"/v1/consumers/{self.consumer}/cursor", body=body)
        except ApiError as exc:
            raise RuntimeError(f"could not store the notifier's cursor {cursor}: {exc.message}") from exc
