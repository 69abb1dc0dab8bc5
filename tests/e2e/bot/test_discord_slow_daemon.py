"""A daemon slower than Discord's three seconds: the bot defers within the second and edits its answer in, and an
error after a public "thinking…" is answered privately, the public placeholder gone. A loopback proxy between the
bot and the real daemon holds the answers of the routes a test names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.e2e.bot.test_discord_bot import running_bot, text_of, world
from tests.support.discord_standin import EPHEMERAL, bot_settings_for

pytestmark = pytest.mark.anyio
HELD_S = 2.0  # past the bot's 0.8 s, short of Discord's 3 s: only a deferred answer arrives in time


@asynccontextmanager
async def holding_proxy(upstream: str, held: tuple[str, ...]) -> AsyncIterator[str]:
    """An HTTP proxy on 127.0.0.1 to `upstream` that holds each answer to a path starting with one of `held`."""
    client = httpx.AsyncClient(base_url=upstream, timeout=60)

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in {"host", "content-length"}}
        answer = await client.request(request.method, request.path_qs, content=body, headers=headers)
        if request.path.startswith(held):
            await asyncio.sleep(HELD_S)
        keep = {k: v for k, v in answer.headers.items() if k.lower() in {"content-type", "retry-after"}}
        return web.Response(status=answer.status_code, body=answer.content, headers=keep)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await client.aclose()


@pytest.mark.timeout(300)
async def test_a_slow_answer_is_deferred_then_edited_and_a_slow_error_is_private(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        held = ("/v1/projects/nightly/runs",)
        async with holding_proxy(w.daemon.url, held) as proxy:
            w.settings = bot_settings_for(w.standin, proxy, w.daemon.home)
            async with running_bot(w):
                quick = await w.standin.send_slash("project list")
                await w.standin.wait_for_reply(quick, timeout_s=10)
                assert [c.type for c in quick.callbacks][:1] == [4], "a quick answer is sent at once"

                slow = await w.standin.send_slash("run list", options={"project": "nightly"})
                listed = await w.standin.wait_for_reply(slow, timeout_s=15)
                assert slow.callbacks[0].type == 5, "deferred (thinking…) before Discord's deadline"
                assert "nightly" in text_of(listed) and not listed["flags"] & EPHEMERAL

                # The daemon's answer is a 404, after the public "thinking…": said privately, the placeholder gone.
                missing = await w.standin.send_slash("run status", options={"project": "nightly", "run": "run-nope"})
                await w.standin.wait_until(lambda: missing.followup_ids or None, timeout_s=15, what="a followup")
                assert missing.callbacks[0].type == 5
                said = w.standin.message(missing.followup_ids[-1])
                assert said["flags"] & EPHEMERAL and "run-nope" in text_of(said), said
                public = [m for m in w.standin.messages() if not m["flags"] & EPHEMERAL and "run-nope" in text_of(m)]
                assert public == [], "nothing of the error is left in the channel"
                if missing.original_message_id is not None and missing.original_message_id != said["id"]:
                    with pytest.raises(LookupError):  # the public "thinking…" was deleted
                        w.standin.message(missing.original_message_id)
