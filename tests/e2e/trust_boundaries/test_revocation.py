"""Revocation ends what a credential holds open, and an idempotent replay answers only whoever may see it now.

Attacks of issue 50, finding 9: a web view live stream kept sending a run's events for up to 600 s after its token
was revoked (or its session signed out), a held long-poll answered a revoked token with the events written after
its revocation, a revoked token still got the stored answers of its Idempotency-Keys, and one Discord user got
another's stored answer through the bot's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.daemon.authority import WaitSlots
from bashgym.ledger.store import Ledger

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import campaign_spec, tracking_context
from tests.support.helpers import RunningDaemon, inprocess_daemon, running_daemon

GUILD = "222222222222222222"
ENDED_WITHIN_S = 10.0  # a generous bound on a wait the issue wants under a second: a slow machine must not flake


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    # One long-poll per principal: a second one answers 429 exactly while the first is held open.
    env = {"BASHGYM_DISCORD_GUILD_IDS": GUILD, "BASHGYM_MAX_WAITS_PER_PRINCIPAL": "1"}
    with running_daemon(tmp_path_factory.mktemp("revocation") / "home", env=env) as running:
        with running.client() as admin:
            _new_run(admin)  # and with it the project
            spec = campaign_spec(campaign_id="c1", report_schedule=None)
            assert admin.post("/v1/projects/nightly/campaigns", json=spec).status_code == 201
        yield running


def _new_run(admin: httpx.Client) -> str:
    answer = admin.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["record"]["run_id"])


def _token_id(daemon: RunningDaemon, token: str) -> str:
    with tenant(daemon, token) as holder:
        return str(holder.get("/v1/auth/whoami").json()["token_id"])


def _add_point(admin: httpx.Client, run_id: str, step: int) -> None:
    body = {
        "run_id": run_id,
        "attempt_id": f"{run_id}.a1",
        "points": [{"metric": "train.loss", "step": step, "value": 0.5}],
    }
    assert admin.post("/v1/projects/nightly/metrics", json=body).status_code in {200, 201}


@contextlib.contextmanager
def _emitting(daemon: RunningDaemon, run_id: str) -> Iterator[None]:
    """The run keeps storing points (one every 0.1 s) while the block runs, as a training run does."""
    stop = threading.Event()

    def emit() -> None:
        with daemon.client() as admin:
            step = 0
            while not stop.wait(0.1):
                step += 1
                _add_point(admin, run_id, step)

    emitter = threading.Thread(target=emit, daemon=True)
    emitter.start()
    try:
        yield
    finally:
        stop.set()
        emitter.join(timeout=30)


@contextlib.contextmanager
def _browser(daemon: RunningDaemon, token: str) -> Iterator[httpx.Client]:
    """A browser signed in to the web view with a link made by `token` (as `bashgym ui` makes one)."""
    with tenant(daemon, token) as holder:
        link = holder.post("/v1/ui/links").json()["url"]
    # A silent stream fails the read after 5 s: a stream that neither ends nor sends is caught, not waited on.
    with httpx.Client(timeout=httpx.Timeout(30, read=5), follow_redirects=True) as browser:
        assert browser.get(link).status_code == 200  # followed to /ui, signed in
        yield browser


def _until_ended(lines: Iterator[str], *, since: float) -> list[str]:
    """The stream's lines until it ends; a failure when it is still sending ENDED_WITHIN_S after `since`."""
    heard = []
    for line in lines:
        heard.append(line)
        if time.monotonic() - since > ENDED_WITHIN_S:
            sent = sum(x.startswith("event: points") for x in heard)
            pytest.fail(f"the stream still sends {ENDED_WITHIN_S:.0f} s later ({sent} points events since)")
    return heard


@pytest.mark.parametrize("ending", ["token revoked", "signed out"])
def test_a_live_stream_ends_when_its_token_is_revoked_or_its_session_signs_out(
    daemon: RunningDaemon, ending: str
) -> None:
    token = issue_token(daemon, f"watcher-{ending.split()[0]}", "viewer")
    with daemon.client() as admin, _browser(daemon, token) as browser:
        run_id = _new_run(admin)
        live = f"{daemon.url}/ui/live/p/nightly/runs/{run_id}"
        with browser.stream("GET", live) as stream, _emitting(daemon, run_id):
            lines = stream.iter_lines()
            assert next(lines) == ": live"
            while next(lines) != "event: points":
                pass  # the run's points reach the page while the session may read them
            asked_at = time.monotonic()
            if ending == "token revoked":
                revoked = admin.post(f"/v1/auth/tokens/{_token_id(daemon, token)}/revoke")
                assert revoked.status_code in {200, 201}, revoked.text
                last_allowed = int(revoked.json()["cursor"])
            else:
                assert browser.post(f"{daemon.url}/ui/signout").status_code == 200
                last_allowed = int(admin.get("/v1/ledger/health").json()["last_cursor"])
            heard = _until_ended(lines, since=asked_at)
        assert "event: ended" in heard, heard[-5:]
        # No point written after the session lost its reach reached it.
        sent = [json.loads(x.removeprefix("data:")) for x in heard if x.startswith("data:")]
        cursors = [data["cursor"] for data in sent if "cursor" in data]
        why = "revoked" if ending == "token revoked" else "not signed in"
        assert why in sent[-1]["reason"], sent[-1]  # the page learns why, and stops listening
        assert all(c <= last_allowed for c in cursors), (cursors, last_allowed)
        # Nor can the session open a page or a new stream.
        assert browser.get(f"{daemon.url}/ui/p/nightly").status_code == 401
        again = browser.get(live)
        assert again.status_code == 401 and "event:" not in again.text


def _pokes(admin: httpx.Client) -> dict[str, Callable[[], None]]:
    run_id = _new_run(admin)
    return {
        "events": lambda: _add_point(admin, run_id, 1),
        "campaign": lambda: admin.post(
            "/v1/projects/nightly/campaigns/c1/schedule", json={"cron": "0 9 * * 2"}
        ).raise_for_status(),
    }


@pytest.mark.parametrize(
    ("poller", "path", "params", "poke"),
    [
        ("events", "/v1/events", {"wait_s": 30}, "events"),
        ("project-events", "/v1/projects/nightly/events", {"wait_s": 30}, "events"),
        ("notices", "/v1/notices", {"wait_s": 30}, "events"),
        ("research", "/v1/projects/nightly/campaigns/c1/wait", {"timeout": 60}, "campaign"),
    ],
)
def test_a_held_long_poll_of_a_revoked_token_answers_401_not_what_came_after(
    daemon: RunningDaemon, poller: str, path: str, params: dict[str, Any], poke: str
) -> None:
    token = issue_token(daemon, f"poller-{poller}", "viewer")
    with daemon.client() as admin, tenant(daemon, token) as holder, ThreadPoolExecutor(1) as pool:
        pokes = _pokes(admin)
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
        held = _held_open(pool, holder, path, {**params, "after_cursor": head})
        assert admin.post(f"/v1/auth/tokens/{_token_id(daemon, token)}/revoke").status_code in {200, 201}
        pokes[poke]()  # what the poll waits for arrives after the revocation
        answer = held.result(timeout=ENDED_WITHIN_S)
    assert answer.status_code == 401, answer.text
    assert "revoked" in answer.json()["error"]["message"]


@pytest.mark.anyio
async def test_a_held_long_poll_ends_when_its_token_expires(tmp_path: Path) -> None:
    # In process, with the ledger's clock in the test's hands: a token lives at least a minute.
    now = [datetime(2026, 1, 5, 9, 0, tzinfo=UTC)]
    async with (
        await Ledger.open(tmp_path / "ledger.sqlite3", clock=lambda: now[0]) as ledger,
        inprocess_daemon(ledger, tmp_path / "home") as admin,
    ):
        admin._transport.app.state.services.waits = WaitSlots(1)  # type: ignore[attr-defined]  # as the daemon's
        body = {"actor_id": "short-lived", "profile": "viewer", "expires_in_s": 60}
        headers = {"Authorization": f"Bearer {(await admin.post('/v1/auth/tokens', json=body)).json()['token']}"}
        params = {"wait_s": 30, "after_cursor": ledger.last_cursor}
        held = asyncio.create_task(admin.get("/v1/events", params=params, headers=headers))
        async with asyncio.timeout(ENDED_WITHIN_S):  # until the poll holds the one slot: a second is refused
            while True:
                await asyncio.sleep(0.05)  # the poll runs in this loop too: it reaches its slot while this sleeps
                probe = await admin.get("/v1/events", headers=headers, params={"wait_s": 0.01})
                if held.done():  # the probe took the slot first: the poll itself was refused; send it again
                    assert held.result().status_code == 429, held.result().text
                    held = asyncio.create_task(admin.get("/v1/events", params=params, headers=headers))
                elif "waiting requests open" in probe.text:
                    break
        now[0] += timedelta(seconds=61)  # the token expires while the poll waits
        async with asyncio.timeout(ENDED_WITHIN_S):
            answer = await held
    assert answer.status_code == 401 and "expired" in answer.json()["error"]["message"], answer.text


def _held_open(pool: ThreadPoolExecutor, holder: httpx.Client, path: str, params: dict[str, Any]) -> Future[Any]:
    """The long-poll, once it holds its principal's one slot: a second one is refused while it is open."""
    deadline = time.monotonic() + 20
    held = pool.submit(holder.get, path, params=params)
    while time.monotonic() < deadline:
        if held.done():  # the probe took the slot first: the poll itself was refused; send it again
            assert held.result().status_code == 429, held.result().text
            held = pool.submit(holder.get, path, params=params)
        probe = holder.get("/v1/events", params={"wait_s": 0.01})
        if probe.status_code == 429 and "waiting requests open" in probe.text and not held.done():
            return held
    pytest.fail("the long-poll was never held open")


def _experiment(experiment_id: str) -> dict[str, str]:
    return {"experiment_id": experiment_id, "name": experiment_id}


def test_a_revoked_token_replaying_its_idempotency_key_gets_401_not_its_stored_answer(daemon: RunningDaemon) -> None:
    token = issue_token(daemon, "replayer", "researcher")
    key = {"Idempotency-Key": "replayer-once"}
    with tenant(daemon, token) as holder:
        first = holder.post("/v1/projects/nightly/experiments", json=_experiment("exp-replayer"), headers=key)
        assert first.status_code == 201, first.text
        again = holder.post("/v1/projects/nightly/experiments", json=_experiment("exp-replayer"), headers=key)
        assert again.status_code == 201 and again.headers.get("idempotent-replayed") == "true"
        with daemon.client() as admin:
            assert admin.post(f"/v1/auth/tokens/{_token_id(daemon, token)}/revoke").status_code in {200, 201}
        for body in (_experiment("exp-replayer"), _experiment("exp-other")):
            replayed = holder.post("/v1/projects/nightly/experiments", json=body, headers=key)
            assert replayed.status_code == 401, replayed.text
            assert "idempotent-replayed" not in replayed.headers and "exp-replayer" not in replayed.text
            assert "revoked" in replayed.json()["error"]["message"]


def test_a_discord_user_never_gets_anothers_stored_answer_nor_one_after_losing_the_grant(
    daemon: RunningDaemon,
) -> None:
    bot = issue_token(daemon, "discord-bot-replays", "", capabilities=("delegate.discord",))
    with daemon.client() as admin:
        grant = {"subject_kind": "user", "subject_id": "501", "profile": "researcher"}
        granted = admin.post("/v1/authority/grants", json=grant)
        assert granted.status_code == 201, granted.text
        viewer = {"subject_kind": "user", "subject_id": "502", "profile": "viewer"}
        assert admin.post("/v1/authority/grants", json=viewer).status_code == 201
    as_user = {"X-Discord-Guild-Id": GUILD, "X-Discord-Role-Ids": "", "Idempotency-Key": "discord-1234"}
    body = _experiment("exp-discord")
    with tenant(daemon, bot) as relay:
        owner = relay.post(
            "/v1/projects/nightly/experiments", json=body, headers={**as_user, "X-Discord-User-Id": "501"}
        )
        assert owner.status_code == 201, owner.text
        # Another user's request with the same key is that user's own request: refused, they may not write.
        other = relay.post(
            "/v1/projects/nightly/experiments", json=body, headers={**as_user, "X-Discord-User-Id": "502"}
        )
        assert other.status_code == 403, other.text
        assert "idempotent-replayed" not in other.headers and "discord:502 lacks" in other.text
        # The owner replays while they hold ledger.write; once the grant is revoked, the replay is refused.
        mine = relay.post(
            "/v1/projects/nightly/experiments", json=body, headers={**as_user, "X-Discord-User-Id": "501"}
        )
        assert mine.status_code == 201 and mine.headers.get("idempotent-replayed") == "true"
        with daemon.client() as admin:
            gone = admin.post(f"/v1/authority/grants/{granted.json()['grant_id']}/revoke")
            assert gone.status_code in {200, 201}, gone.text
        lost = relay.post(
            "/v1/projects/nightly/experiments", json=body, headers={**as_user, "X-Discord-User-Id": "501"}
        )
        assert lost.status_code == 403 and "idempotent-replayed" not in lost.headers, lost.text
