"""The notifier with the real discord.py client, the loopback Discord stand-in and a real daemon: a notice Discord
refuses for good is recorded as `notice.failed` and passed (the notices behind it still post, the default channel
says so, the doctor says what to do), a post that meets server errors is sent again and shows once, and no
embed passes Discord's limits."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import discord
import httpx
import pytest
from bashgym.bot.app import BashGymBot
from bashgym.bot.notifier import DiscordNotifier
from bashgym.client.aio import AioDaemonClient
from bashgym.client.models import Notice, NoticeField

from tests.support.discord_standin import (
    CHANNEL_ID,
    FAKE_TOKEN,
    GUILD_ID,
    RUNS_CHANNEL_ID,
    DiscordStandIn,
    bot_settings_for,
    discord_standin,
    running_client,
)
from tests.support.helpers import RunningDaemon, cli_async, start_daemon

pytestmark = pytest.mark.anyio
CONSUMER = "discord-notifier"


@dataclass
class World:
    daemon: RunningDaemon
    standin: DiscordStandIn

    def admin(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.daemon.token}"}
        return httpx.AsyncClient(base_url=self.daemon.url, headers=headers, timeout=30)

    async def amend(self, project: str, reason: str) -> None:
        async with self.admin() as admin:
            answer = await admin.post(f"/v1/projects/{project}/budget/amend", json={"runs": 1, "reason": reason})
            assert answer.status_code == 201, answer.text

    async def events(self, kind: str) -> list[dict[str, Any]]:
        async with self.admin() as admin:
            return list((await admin.get("/v1/events", params={"type": kind, "limit": 500})).json()["events"])

    def amended(self, channel_id: int) -> list[dict[str, Any]]:
        return [m for m in self.standin.messages(channel_id) if "Budget amended" in str(m["embeds"])]


@asynccontextmanager
async def world(tmp_path: Path, *, channels: dict[str, int]) -> AsyncIterator[World]:
    """A daemon with projects routed to `channels` (a project not named has no channel) and the stand-in."""
    env = {"BASHGYM_DISCORD_GUILD_IDS": str(GUILD_ID), "BASHGYM_DISCORD_TOKEN": FAKE_TOKEN}
    daemon = await asyncio.to_thread(start_daemon, tmp_path / "home", env=env)
    try:
        async with discord_standin() as standin:
            w = World(daemon, standin)
            async with w.admin() as admin:
                for project in ("nightly", "daily"):
                    created = await admin.post("/v1/projects", json={"project_id": project, "name": project})
                    assert created.status_code == 201, created.text
                for project, channel_id in channels.items():
                    routed = await admin.put(f"/v1/projects/{project}/channel", json={"channel_id": str(channel_id)})
                    assert routed.is_success, routed.text
            yield w
            assert standin.errors == []
    finally:
        await asyncio.to_thread(daemon.stop)


@asynccontextmanager
async def running_bot(w: World) -> AsyncIterator[BashGymBot]:
    """The bot, with the stand-in's first channel as its default channel; its cursor is at the ledger's head
    before it is ready (setup_hook)."""
    settings = dataclasses.replace(
        bot_settings_for(w.standin, w.daemon.url, w.daemon.home), default_channel_id=CHANNEL_ID
    )
    bot = BashGymBot(settings)
    async with running_client(bot, timeout_s=30):
        await w.standin.wait_until(lambda: bot.synced or None, timeout_s=30, what="commands synced")
        yield bot


@pytest.mark.timeout(180)
async def test_a_notice_discord_refuses_for_good_is_recorded_and_the_notices_behind_it_still_post(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, channels={"nightly": RUNS_CHANNEL_ID}) as w, running_bot(w):
        w.standin.refuse_posts(RUNS_CHANNEL_ID, code=50008)  # as a category channel's id would
        await w.amend("nightly", "refused 1")
        await w.amend("nightly", "refused 2")
        await w.amend("daily", "posted 1")  # daily has no channel: the default channel gets it
        told = await w.standin.wait_for_message(CHANNEL_ID, lambda m: "Budget amended" in str(m), timeout_s=30)
        await w.amend("daily", "posted 2")
        await w.standin.wait_until(lambda: len(w.amended(CHANNEL_ID)) == 2 or None, timeout_s=30)

        failed = await w.events("notice.failed")
        amendments = await w.events("budget.entry")
        async with w.admin() as admin:
            cursor = (await admin.get(f"/v1/consumers/{CONSUMER}/cursor")).json()["cursor"]
        doctor = await cli_async(w.daemon.env(), "doctor", "--json")
        printed = await cli_async(w.daemon.env(), "doctor")

    assert told["content"] == (
        f"⚠ 2 notices could not be posted in <#{RUNS_CHANNEL_ID}>: Discord answered 400 50008 (Cannot send "
        "messages in a non-text channel). `bashgym doctor` says what to do."
    )
    assert not w.amended(CHANNEL_ID)[1]["content"], "a refusal is told once"
    assert w.standin.messages(RUNS_CHANNEL_ID) == []
    posts = w.standin.requests_to("POST", rf"/channels/{RUNS_CHANNEL_ID}/messages")
    assert [r.status for r in posts] == [400, 400], "a permanent refusal is not sent again"

    refused = [e for e in amendments if e["project_id"] == "nightly" and e["payload"]["kind"] == "amend"]
    assert [(e["project_id"], e["payload"]) for e in failed] == [
        (
            "nightly",
            {
                "consumer": CONSUMER,
                "cursor": amendment["cursor"],
                "event_id": amendment["event_id"],
                "event_type": "budget.entry",
                "channel_id": str(RUNS_CHANNEL_ID),
                "status": 400,
                "code": 50008,
                "message": "Cannot send messages in a non-text channel",
            },
        )
        for amendment in refused
    ]
    assert cursor >= max(e["cursor"] for e in amendments), "the cursor moved past the refused notices"

    check = next(c for c in doctor.json()["checks"] if c["check"] == "discord notices")
    assert check["ready"] is False and check["required"] is False and check["facts"]["count"] == 2
    latest = check["facts"]["failures"][0]
    assert latest["cursor"] == refused[-1]["cursor"] and latest["status"] == 400 and latest["code"] == 50008
    assert f"Channel {RUNS_CHANNEL_ID} is not a text channel" in latest["advice"]
    assert "`bashgym project channel nightly --channel ID`" in latest["advice"]
    assert "2 notices refused by Discord in the last 24 h" in printed.stdout
    assert f"in channel {RUNS_CHANNEL_ID}: HTTP 400 code 50008 Cannot send messages" in printed.stdout


@pytest.mark.timeout(180)
async def test_a_post_that_meets_server_errors_is_sent_again_and_shows_once(tmp_path: Path) -> None:
    async with world(tmp_path, channels={"nightly": CHANNEL_ID}) as w, running_bot(w):
        w.standin.fail_posts(CHANNEL_ID, 2, status=500)  # discord.py sends again by itself
        await w.amend("nightly", "after two 500s")
        await w.standin.wait_until(lambda: len(w.amended(CHANNEL_ID)) == 1 or None, timeout_s=30)
        w.standin.fail_posts(CHANNEL_ID, 1, status=503)  # discord.py raises; the notifier sends again
        await w.amend("nightly", "after a 503")
        await w.standin.wait_until(lambda: len(w.amended(CHANNEL_ID)) == 2 or None, timeout_s=30)
        await asyncio.sleep(1.0)  # time enough for a wrong duplicate to appear
        failed = await w.events("notice.failed")

    posts = w.standin.requests_to("POST", rf"/channels/{CHANNEL_ID}/messages")
    assert [r.status for r in posts] == [500, 500, 200, 503, 200]
    assert len(w.amended(CHANNEL_ID)) == 2 and failed == []


def too_many_fields() -> discord.Embed:
    made = discord.Embed(title="26 fields")
    for i in range(26):
        made.add_field(name=f"n{i}", value="v")
    return made


def too_long_in_all() -> discord.Embed:
    return discord.Embed(title="t" * 256, description="d" * 4096).set_footer(text="f" * 2048)


async def test_an_oversized_notice_posts_within_discords_limits(tmp_path: Path) -> None:
    notice = Notice(
        cursor=7,
        event_id="evt-oversized",
        event_type="run.failed",
        workspace_id="default",
        project_id="nightly",
        channel_id=str(CHANNEL_ID),
        nonce="o" * 25,
        outcome="failure",
        title="Run failed: " + "r" * 400,
        description="Traceback line\n" * 400,
        fields=[NoticeField(name=f"metric {i}", value="v" * 1500) for i in range(40)],
        footer="nightly · corr " + "c" * 3000,
    )
    plain = discord.Client(intents=discord.Intents.none(), chunk_guilds_at_startup=False, guild_ready_timeout=0.5)
    # A notice without files asks the daemon nothing: no daemon answers at this address.
    async with (
        discord_standin() as standin,
        running_client(plain) as client,
        AioDaemonClient("http://127.0.0.1:9", None) as daemon,
    ):
        for unfitted in (too_many_fields(), too_long_in_all()):  # the stand-in refuses either, as Discord does
            with pytest.raises(discord.HTTPException) as refused:
                await client.get_partial_messageable(CHANNEL_ID).send(embed=unfitted)
            assert (refused.value.status, refused.value.code) == (400, 50035)
        await DiscordNotifier(client, daemon, consumer=CONSUMER).post(notice)

    posts = standin.requests_to("POST", rf"/channels/{CHANNEL_ID}/messages")
    assert [r.status for r in posts] == [400, 400, 200], "Discord took the notice: nothing over its limits"
    posted = standin.messages(CHANNEL_ID)[0]["embeds"][0]
    assert posted["title"].endswith("… (cut)") and len(posted["title"]) == 256
    assert posted["fields"][-1] == {
        "name": "left out",
        "value": f"{40 - len(posted['fields']) + 1} more fields, over Discord's limits",
        "inline": False,
    }
    assert len(discord.Embed.from_dict(posted)) <= 6000
