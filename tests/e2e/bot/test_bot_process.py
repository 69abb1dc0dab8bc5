"""The bot's process: `bashgym bot` is the bot (same pid), so a signal to it leaves nothing behind; the bot of
`bashgym up` dies with it, even by SIGKILL; and two bots never follow one notice cursor, a lease in the ledger
refusing the second by name until the first is stopped or its lease expired."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.ledger.leases import ConsumerLeaseHeld, LeaseClaim
from bashgym.ledger.store import Ledger

from tests.support.discord_standin import API, FAKE_TOKEN, GUILD_ID, DiscordStandIn, discord_standin
from tests.support.helpers import BASHGYM, SUITE_OPERATOR_ENV, RunningDaemon, cli_async, start_daemon

pytestmark = pytest.mark.anyio

LEASE = "/v1/consumers/discord-notifier/lease"
EXIT_CONFLICT = 6
TTL_S = 3


async def test_a_lease_is_renewed_by_its_holder_refused_to_others_until_it_lapses_and_released_by_its_pid(
    tmp_path: Path,
) -> None:
    now = [datetime(2025, 1, 1, 12, 0, tzinfo=UTC)]
    ledger = await Ledger.open(tmp_path / "ledger.sqlite3", synchronous="NORMAL", clock=lambda: now[0])

    def claim(holder: str, pid: int) -> LeaseClaim:
        return LeaseClaim(holder=holder, host="box", pid=pid, actor_id="discord-bot", ttl_s=30)

    try:
        first = await ledger.take_consumer_lease("discord-notifier", claim("bot-a", 11))
        assert first["held"] and first["expires_in_s"] == 30
        now[0] += timedelta(seconds=20)
        renewed = await ledger.take_consumer_lease("discord-notifier", claim("bot-a", 11))
        assert renewed["lease"]["acquired_at"] == first["lease"]["acquired_at"] and renewed["expires_in_s"] == 30

        now[0] += timedelta(seconds=29)
        with pytest.raises(ConsumerLeaseHeld) as refused:
            await ledger.take_consumer_lease("discord-notifier", claim("bot-b", 22))
        assert refused.value.details | {"holder": "bot-a", "pid": 11, "host": "box", "expires_in_s": 1} == (
            refused.value.details
        )
        assert "bot-a (pid 11 on host box" in refused.value.message and "wait 1 s" in refused.value.hint

        now[0] += timedelta(seconds=2)  # bot-a stopped renewing: its lease lapsed
        assert not (await ledger.get_consumer_lease("discord-notifier"))["held"]
        assert (await ledger.take_consumer_lease("discord-notifier", claim("bot-b", 22)))["lease"]["holder"] == "bot-b"
        # A restart under the same name takes the lease over at once; the old pid can no longer release it.
        taken_over = await ledger.take_consumer_lease("discord-notifier", claim("bot-b", 33))
        assert taken_over["lease"]["pid"] == 33
        assert not await ledger.release_consumer_lease("discord-notifier", holder="bot-b", pid=22)
        assert await ledger.release_consumer_lease("discord-notifier", holder="bot-b", pid=33)
        assert not (await ledger.get_consumer_lease("discord-notifier"))["held"]
    finally:
        await ledger.close()


@dataclass
class World:
    daemon: RunningDaemon
    standin: DiscordStandIn
    tmp: Path

    def bot_env(self, **extra: str) -> dict[str, str]:
        return {**self.daemon.env(), **discord_env(self.standin), "BASHGYM_BOT_LEASE_TTL_S": str(TTL_S), **extra}

    async def start_bot(self, name: str) -> asyncio.subprocess.Process:
        with (self.tmp / f"{name}.log").open("ab") as log:
            return await asyncio.create_subprocess_exec(
                *BASHGYM, "bot", env=self.bot_env(), stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )

    async def lease(self) -> dict[str, Any]:
        return await fetch_lease(self.daemon.url, self.daemon.token)

    async def wait_until_serving(self, bot: asyncio.subprocess.Process, name: str) -> dict[str, Any]:
        """The bot holds the lease under its own pid and has synced its commands to the stand-in."""
        lease = await wait_for_lease(self.daemon.url, self.daemon.token, bot.pid, log=self.tmp / f"{name}.log")
        await self.standin.wait_until(lambda: self.standin.commands.get(GUILD_ID), timeout_s=60, what="commands")
        return lease


def discord_env(standin: DiscordStandIn) -> dict[str, str]:
    return {
        "BASHGYM_DISCORD_TOKEN": FAKE_TOKEN,
        "BASHGYM_DISCORD_APPLICATION_ID": str(standin.application_id),
        "BASHGYM_DISCORD_GUILD_IDS": str(GUILD_ID),
        "BASHGYM_DISCORD_API_BASE": f"{standin.url}{API}",
        "BASHGYM_DISCORD_GATEWAY": standin.ws_url,
    }


async def fetch_lease(url: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as client:
        answer = await client.get(LEASE)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def wait_for_lease(url: str, token: str, pid: int, *, log: Path, timeout_s: float = 60) -> dict[str, Any]:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            while True:
                state = await fetch_lease(url, token)
                if state["held"] and state["lease"]["pid"] == pid:
                    return state
                await asyncio.sleep(0.2)
    raise AssertionError(f"pid {pid} holds no lease: {log.read_text(errors='replace')[-3000:]}")


def bot_processes(home: Path) -> set[int]:
    """Live processes running bashgym.bot for this home (zombies aside: their cmdline reads empty)."""
    marks = {f"BASHGYM_HOME={home}".encode(), f"BASHGYM_HOME={home.resolve()}".encode()}
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            is_bot = b"bashgym.bot" in (entry / "cmdline").read_bytes()
            if is_bot and marks & set((entry / "environ").read_bytes().split(b"\0")):
                found.add(int(entry.name))
    return found


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


async def wait_gone(home: Path, timeout_s: float = 10) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            while bot_processes(home):  # noqa: ASYNC110 - /proc is polled: no event says that a process ended
                await asyncio.sleep(0.1)
    assert bot_processes(home) == set()


async def wait_exit(proc: asyncio.subprocess.Process, timeout_s: float = 30) -> int:
    async with asyncio.timeout(timeout_s):
        return await proc.wait()


@contextlib.asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[World]:
    env = {"BASHGYM_DISCORD_GUILD_IDS": str(GUILD_ID), "BASHGYM_DISCORD_TOKEN": FAKE_TOKEN}
    daemon = await asyncio.to_thread(start_daemon, tmp_path / "home", env=env)
    try:
        async with discord_standin() as standin:
            yield World(daemon, standin, tmp_path)
    finally:
        for pid in bot_processes(daemon.home):  # a failed test leaves no bot polling behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(daemon.stop)


@pytest.mark.timeout(180)
async def test_sigterm_to_bashgym_bot_stops_the_bot_itself_and_releases_its_lease(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        bot = await w.start_bot("bot")
        await w.wait_until_serving(bot, "bot")
        # The command's pid is the bot: nothing else, no child of it, runs the bot for this home.
        assert bot_processes(w.daemon.home) == {bot.pid}

        bot.send_signal(signal.SIGTERM)
        assert await wait_exit(bot) == 0, (w.tmp / "bot.log").read_text()
        await wait_gone(w.daemon.home)
        assert (await w.lease())["held"] is False


@pytest.mark.slow  # about 18 s, waiting out a lease; SIGTERM's clean stop stays in the suite
@pytest.mark.timeout(240)
async def test_a_second_bot_is_refused_by_name_and_a_killed_ones_lease_expires(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        first = await w.start_bot("first")
        held = (await w.wait_until_serving(first, "first"))["lease"]

        second = await cli_async(w.bot_env(), "bot", timeout_s=120)
        assert second.code == EXIT_CONFLICT, second.stderr
        for said in (held["holder"], f"pid {first.pid}", held["host"], "since", "kill -TERM", "lease to expire"):
            assert said in second.stderr, (said, second.stderr)
        assert bot_processes(w.daemon.home) == {first.pid}

        first.send_signal(signal.SIGKILL)
        assert await wait_exit(first) == -signal.SIGKILL
        await wait_gone(w.daemon.home)
        # Killed outright, the first released nothing: its lease lapses after the TTL, then a new bot starts.
        async with asyncio.timeout(TTL_S + 10):
            while (await w.lease())["held"]:  # noqa: ASYNC110 - an expiry is seen by asking the daemon
                await asyncio.sleep(0.2)
        third = await w.start_bot("third")
        await wait_for_lease(w.daemon.url, w.daemon.token, third.pid, log=w.tmp / "third.log")
        third.send_signal(signal.SIGTERM)
        assert await wait_exit(third) == 0
        await wait_gone(w.daemon.home)


@dataclass
class Up:
    proc: asyncio.subprocess.Process
    url: str
    bot_pid: int


async def start_up(home: Path, env: dict[str, str], log: Path) -> Up:
    """`bashgym up --port 0`; waits for the daemon's address and the bot's pid it prints."""
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            *BASHGYM, "up", "--port", "0", env=env, stdout=asyncio.subprocess.PIPE, stderr=err
        )
    assert proc.stdout is not None
    url, bot_pid = "", 0
    async with asyncio.timeout(60):
        while not (url and bot_pid):
            line = (await proc.stdout.readline()).decode()
            assert line, log.read_text(errors="replace")[-3000:]
            if "listening on" in line:
                url = line.split("listening on ", 1)[1].split()[0]
            if "Discord bot started (pid" in line:
                bot_pid = int(line.split("(pid ", 1)[1].split(")")[0])
    return Up(proc, url, bot_pid)


@pytest.mark.slow  # two `bashgym up` in turn, about 15 s
@pytest.mark.timeout(240)
async def test_the_bot_of_bashgym_up_dies_with_it_and_the_next_up_takes_its_lease_over(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with discord_standin() as standin:
        # A long TTL: the next `up`'s bot holds the lease well before a lapse could explain it.
        env = {**os.environ, **SUITE_OPERATOR_ENV, **discord_env(standin), "BASHGYM_HOME": str(home)}
        env |= {"BASHGYM_BOT_LEASE_TTL_S": "120"}
        env.pop("BASHGYM_API", None)
        up = await start_up(home, env, tmp_path / "up.log")
        started = [up]
        try:
            token = (home / "admin.token").read_text().strip()
            await wait_for_lease(up.url, token, up.bot_pid, log=tmp_path / "up.log")
            assert parent_of(up.bot_pid) == up.proc.pid and bot_processes(home) == {up.bot_pid}

            up.proc.kill()
            await wait_exit(up.proc)
            await wait_gone(home)

            again = await start_up(home, env, tmp_path / "up-again.log")
            started.append(again)
            lease = await wait_for_lease(again.url, token, again.bot_pid, log=tmp_path / "up-again.log")
            assert lease["lease"]["holder"] in {f"bashgym up {home}", f"bashgym up {home.resolve()}"}
            again.proc.send_signal(signal.SIGTERM)
            assert await wait_exit(again.proc) == 0
            await wait_gone(home)
        finally:
            for pid in bot_processes(home) | {u.proc.pid for u in started if u.proc.returncode is None}:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
