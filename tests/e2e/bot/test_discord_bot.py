"""The real discord.py bot against the loopback Discord stand-in and a real daemon: commands sync, every
group answers with the daemon's word, authority is the daemon's, confirmations belong to the person who
asked, a training launched from Discord posts its milestones, and the notifier neither drops nor
duplicates a post across a crash."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.bot.app import BashGymBot
from bashgym.bot.settings import BotSettings
from bashgym.trainers.tiny import build_tiny

from tests.support.discord_standin import (
    ALICE_ID,
    BOB_ID,
    CHANNEL_ID,
    EPHEMERAL,
    FAKE_TOKEN,
    GUILD_ID,
    DiscordStandIn,
    bot_settings_for,
    discord_standin,
    running_client,
)
from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, cli_async, start_daemon

pytestmark = pytest.mark.anyio

GROUPS = {
    "project", "run", "eval", "runcard", "promote", "campaign", "research", "ledger", "budget", "device", "auth",
    "jobs", "tags", "ui",
}  # fmt: skip


@dataclass
class World:
    daemon: RunningDaemon
    standin: DiscordStandIn
    settings: BotSettings
    tmp: Path

    def admin(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.daemon.token}"}
        return httpx.AsyncClient(base_url=self.daemon.url, headers=headers, timeout=30)

    async def slash(
        self, name: str, user_id: int = ALICE_ID, role_ids: Sequence[int] = (), **options: Any
    ) -> dict[str, Any]:
        sent = await self.standin.send_slash(name, options=options or None, user_id=user_id, role_ids=role_ids)
        return await self.standin.wait_for_reply(sent, timeout_s=30)


def text_of(message: dict[str, Any]) -> str:
    parts = [message.get("content") or ""]
    for embed in message.get("embeds") or []:
        parts += [embed.get("title", ""), embed.get("description") or ""]
        parts += [f"{f['name']}: {f['value']}" for f in embed.get("fields", [])]
    return "\n".join(parts)


@asynccontextmanager
async def world(tmp_path: Path, **settings: str) -> AsyncIterator[World]:
    """The daemon (with these extra settings), the Discord stand-in, project nightly, Alice a lead."""
    env = {"BASHGYM_DISCORD_GUILD_IDS": str(GUILD_ID), "BASHGYM_DISCORD_TOKEN": FAKE_TOKEN, **settings}
    daemon = await asyncio.to_thread(start_daemon, tmp_path / "home", env=env)
    try:
        async with discord_standin() as standin:
            settings = bot_settings_for(standin, daemon.url, daemon.home)
            denv = daemon.env()
            assert (await cli_async(denv, "project", "create", "--id", "nightly", "--name", "Nightly SFT")).code == 0
            granted = await cli_async(denv, "authority", "grant", "--discord-user", str(ALICE_ID), "--profile", "lead")
            assert granted.code == 0, granted.stderr
            yield World(daemon, standin, settings, tmp_path)
            assert standin.errors == []
    finally:
        await asyncio.to_thread(daemon.stop)


@asynccontextmanager
async def running_bot(w: World) -> AsyncIterator[BashGymBot]:
    bot = BashGymBot(w.settings)
    async with running_client(bot, timeout_s=30):
        await w.standin.wait_until(lambda: bot.synced or None, timeout_s=30, what="commands synced")
        yield bot


@pytest.mark.timeout(600)
async def test_commands_answer_with_the_daemons_word_and_a_discord_run_posts_its_milestones(tmp_path: Path) -> None:
    async with world(tmp_path) as w, running_bot(w):
        synced = w.standin.commands[GUILD_ID]
        assert set(synced) == GROUPS
        placeholders = [
            f"/{group} {sub['name']} {option['name']}"
            for group, payload in synced.items()
            for sub in payload.get("options", [])
            for option in sub.get("options", [])
            if option.get("description") in ("…", "")
        ]
        assert placeholders == [], "every synced option says what it is"

        me = await w.slash("auth whoami")
        assert f"discord:{ALICE_ID}" in text_of(me) and me["flags"] & EPHEMERAL
        assert "training.launch" in text_of(me)
        assert "nightly" in text_of(await w.slash("project list"))
        routed = await w.slash("project channel-set", project="nightly")
        assert f"<#{CHANNEL_ID}>" in text_of(routed)
        await w.standin.wait_for_message(CHANNEL_ID, lambda m: "now come here" in text_of(m), timeout_s=30)

        # A run launched from Discord: the daemon checks the person, then the channel gets its milestones.
        tiny = await asyncio.to_thread(build_tiny, w.tmp / "tiny")
        model = await cli_async(
            w.daemon.env(), "model", "register", "--project", "nightly", "--model", "tiny", "--version", "tiny-v1",
            "--dir", str(tiny),
        )  # fmt: skip
        assert model.code == 0, model.stderr
        data = sft_data(w.tmp, rows=8)
        registered = await cli_async(
            w.daemon.env(), "dataset", "register", "--project", "nightly", "--dataset", "traces",
            "--version", "traces-v1", "--file", str(data),
        )  # fmt: skip
        assert registered.code == 0, registered.stderr
        config = {"max_steps": 4, "batch_size": 4, "learning_rate": 5e-3, "max_seq_length": 128, "save_steps": 2}
        launch = {"project": "nightly", "method": "sft", "model": "tiny-v1", "dataset": "traces-v1",
                  "config": ("config.json", json.dumps(config).encode())}  # fmt: skip
        refused = await w.slash("run start", user_id=BOB_ID, **launch)
        assert refused["flags"] & EPHEMERAL
        assert f"discord:{BOB_ID} lacks the capability training.launch" in text_of(refused)
        queued = await w.slash("run start", **launch)
        run_id = next(f["value"] for f in queued["embeds"][0]["fields"] if f["name"] == "run_id")
        started = await w.standin.wait_for_message(
            CHANNEL_ID, lambda m: f"Run started: {run_id}" in text_of(m), timeout_s=60
        )
        completed = await w.standin.wait_for_message(
            CHANNEL_ID, lambda m: f"Run completed: {run_id}" in text_of(m), timeout_s=240
        )
        assert "method: sft" in text_of(started) and "train.loss" in text_of(completed)
        footer = completed["embeds"][0]["footer"]["text"]
        assert footer.startswith("nightly · corr ") and "http" not in footer

        # One command of every other group, each showing the daemon's answer.
        assert run_id in text_of(await w.slash("run status", project="nightly", run=run_id))
        assert run_id in text_of(await w.slash("run list", project="nightly"))
        assert "train.loss" in text_of(await w.slash("run metrics", project="nightly", run=run_id))
        assert "Evaluations of nightly" in text_of(await w.slash("eval results", project="nightly"))
        assert "RunCard check" in text_of(await w.slash("runcard validate", project="nightly", run=run_id))
        gate = await w.slash("promote gate", project="nightly", run=run_id)
        assert "blocked" in text_of(gate), "a training run without evaluations never ships"
        typed = await w.standin.autocomplete("run status", "run", run_id[:8], {"project": "nightly"})
        choices = (await w.standin.wait_for_callback(typed)).data["choices"]
        assert [c["value"] for c in choices] == [run_id], "choices come from the daemon, for this user"
        spec = {"campaign_id": "bash-q4", "title": "Better bash", "objective": "Raise pass@1.",
                "suite_id": "bash-tasks-v1", "starting_model_version_id": "tiny-v1",
                "dataset_version_ids": ["traces-v1"], "base_recipe": {"strategy": "sft", "max_steps": 4},
                "budget": {"runs": 2}, "stop_rules": {"max_iterations": 2}}  # fmt: skip
        created = await w.slash("campaign create", project="nightly", spec=("spec.json", json.dumps(spec).encode()))
        assert "Campaign created" in text_of(created) and "bash-q4" in text_of(created)
        assert "Campaigns of nightly" in text_of(await w.slash("campaign list", project="nightly"))
        assert "Report" in text_of(await w.slash("campaign report", project="nightly", campaign="bash-q4"))
        report = await w.standin.wait_for_message(CHANNEL_ID, lambda m: "Report: Campaign bash-q4" in text_of(m))
        charts = sorted(a["filename"] for a in report["attachments"])
        assert charts == ["budget.png", "loss.png", "metric.png"], charts
        assert w.standin.attachment_bytes(report["attachments"][0]).startswith(b"\x89PNG")
        assert "Iterations" in (report["embeds"][0]["description"] or "")
        missing = await w.slash("research state", project="nightly", campaign="nope")
        assert missing["flags"] & EPHEMERAL and "nope" in text_of(missing)
        assert "Ledger health" in text_of(await w.slash("ledger health"))
        assert "Budget of nightly" in text_of(await w.slash("budget show", project="nightly"))
        assert "Devices" in text_of(await w.slash("device list"))

        # Confirmations: only the person who asked may press; the daemon still decides.
        sent = await w.standin.send_slash(
            "budget amend", options={"project": "nightly", "reason": "one more", "runs": 1}, user_id=ALICE_ID
        )
        prompt = await w.standin.wait_for_reply(sent, timeout_s=30)
        assert "Amend the budget" in text_of(prompt)
        stranger = await w.standin.click(prompt, "confirm", user_id=BOB_ID)
        refusal = await w.standin.wait_for_reply(stranger, timeout_s=10)
        assert refusal["flags"] & EPHEMERAL and f"<@{ALICE_ID}>" in text_of(refusal)
        confirmed = await w.standin.click(prompt, "confirm", user_id=ALICE_ID)
        await w.standin.wait_until(lambda: confirmed.followup_ids or None, timeout_s=30, what="the confirmed answer")
        answer = w.standin.message(confirmed.followup_ids[0])
        assert "Budget amended" in text_of(answer) and '"runs": 1' in text_of(answer)
        notice = await w.standin.wait_for_message(
            CHANNEL_ID, lambda m: "Budget amended: project" in text_of(m), timeout_s=30
        )
        assert f"by discord:{ALICE_ID}" in text_of(notice)


@pytest.mark.timeout(300)
async def test_the_notifier_survives_a_crash_between_post_and_acknowledgement(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        async with w.admin() as admin:
            assert (await admin.put("/v1/projects/nightly/channel", json={"channel_id": str(CHANNEL_ID)})).is_success

        async def amend(n: int) -> None:
            async with w.admin() as admin:
                body = {"runs": 1, "reason": f"amend {n}"}
                assert (await admin.post("/v1/projects/nightly/budget/amend", json=body)).status_code == 201

        class Crash(BaseException):
            """A kill: nothing after it runs, nothing catches it."""

        async with running_bot(w) as first:
            real_ack = first.notifier._ack

            async def ack_unless_second_post_landed(cursor: int) -> None:
                if first.notifier.posted == 2:  # the second post has landed; its acknowledgement never happens
                    raise Crash
                await real_ack(cursor)

            first.notifier._ack = ack_unless_second_post_landed  # type: ignore[method-assign]
            for n in range(4):
                await amend(n)
            await w.standin.wait_until(lambda: len(w.standin.messages(CHANNEL_ID)) >= 2 or None, timeout_s=30)
            await asyncio.sleep(0.5)

        w.standin.rate_limit("POST", r"/channels/\d+/messages", 0.3)  # the next post meets a 429 first
        async with running_bot(w):
            await w.standin.wait_until(
                lambda: sum("Budget amended" in text_of(m) for m in w.standin.messages(CHANNEL_ID)) >= 4 or None,
                timeout_s=60,
            )
            await asyncio.sleep(1.5)  # time enough for a wrong duplicate to appear

    titles = [text_of(m) for m in w.standin.messages(CHANNEL_ID) if "Budget amended" in text_of(m)]
    assert len(titles) == 4, titles
    assert sorted(t.split("entry: ")[1].split("\n")[0] for t in titles) == sorted(
        {t.split("entry: ")[1].split("\n")[0] for t in titles}
    )
    posts = w.standin.requests_to("POST", r"/channels/\d+/messages")
    assert [r.status for r in posts].count(429) == 1, "the 429 was waited out and the post sent again"
    nonces = [r.json["nonce"] for r in posts if r.status == 200]
    assert len(nonces) > len(set(nonces)), "the post whose acknowledgement was lost was sent again ..."
    assert len(titles) == len(set(nonces)), "... and Discord dropped the duplicate"
