"""Limits: reads, token guessing, held long-polls and stored bytes are bounded per principal (or address).

Attacks of issue 34, finding 12: a token holder floods reads, a client guesses tokens, a principal holds
long-polls open without end, a project fills the content store. Each answer is a clear 429 with
Retry-After (413 for the quota), and others are not held up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.helpers import RunningDaemon, running_daemon

LIMITS = {
    "BASHGYM_READ_RATE_BURST": "5",
    "BASHGYM_READ_RATE_PER_MINUTE": "60",
    "BASHGYM_BAD_TOKEN_PER_MINUTE": "6",  # two at once
    "BASHGYM_PROJECT_QUOTA_BYTES": "1000",
}
PROBE_PAUSE_S = 0.5  # between long-poll probes: ten times the holder's pause between its retries


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("limits") / "home", env=LIMITS) as running:
        yield running


def test_reads_are_rate_limited_per_principal(daemon: RunningDaemon) -> None:
    flooder, other = issue_token(daemon, "flo", "viewer"), issue_token(daemon, "oli", "viewer")
    with tenant(daemon, flooder) as flo:
        answers = [flo.get("/v1/projects") for _ in range(8)]
    assert [a.status_code for a in answers[:5]] == [200] * 5
    limited = answers[-1]
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert "rate limit for reads" in limited.json()["error"]["message"]
    with tenant(daemon, other) as oli:
        assert oli.get("/v1/projects").status_code == 200


def test_guessing_tokens_is_throttled_and_a_good_token_still_gets_in(daemon: RunningDaemon) -> None:
    guesses = [
        httpx.get(f"{daemon.url}/v1/projects", headers={"Authorization": f"Bearer bgy_guess{i}"}) for i in range(4)
    ]
    assert guesses[0].status_code == 401
    assert guesses[-1].status_code == 429 and "Retry-After" in guesses[-1].headers
    good = issue_token(daemon, "gus", "viewer")
    with tenant(daemon, good) as gus:
        assert gus.get("/v1/projects").status_code == 200


def test_a_principal_holds_a_bounded_number_of_long_polls(tmp_path: Path) -> None:
    with running_daemon(tmp_path / "home", env={"BASHGYM_MAX_WAITS_PER_PRINCIPAL": "1"}) as daemon:
        _one_long_poll_at_a_time(daemon)


def _one_long_poll_at_a_time(daemon: RunningDaemon) -> None:
    token = issue_token(daemon, "polly", "viewer")
    beyond = {"after_cursor": 10**9}
    held: list[httpx.Response] = []

    def hold() -> None:
        with tenant(daemon, token) as polly:
            while True:  # until this one holds the slot (a probe below may hold it for an instant)
                answer = polly.get("/v1/events", params={**beyond, "wait_s": 8})
                if answer.status_code != 429:
                    held.append(answer)
                    return
                time.sleep(0.05)

    waiting = threading.Thread(target=hold)
    waiting.start()
    try:
        with tenant(daemon, token) as polly:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                second = polly.get("/v1/events", params={**beyond, "wait_s": 0.05})
                if second.status_code == 429:
                    break
                # This probe got the only slot, so it may have just refused the holder: leave the slot free for
                # many of the holder's retries, or probes sent back to back could keep it out for good.
                time.sleep(PROBE_PAUSE_S)
            assert second.status_code == 429, second.text
            assert "waiting requests open" in second.json()["error"]["message"]
            assert polly.get("/v1/events", params=beyond).status_code == 200  # no wait: no limit
    finally:
        waiting.join(timeout=30)
    assert held and held[0].status_code == 200


def test_a_project_holds_uploads_up_to_its_quota(daemon: RunningDaemon) -> None:
    token = issue_token(daemon, "quinn", "researcher", project="small")
    with tenant(daemon, token) as quinn:
        first = quinn.put("/v1/blobs", params={"project": "small"}, content=b"a" * 600)
        assert first.status_code == 200, first.text
        again = quinn.put("/v1/blobs", params={"project": "small"}, content=b"a" * 600)
        assert again.status_code == 200, "bytes the project holds already cost nothing more"
        over = quinn.put("/v1/blobs", params={"project": "small"}, content=b"b" * 600)
        assert over.status_code == 413, over.text
        assert over.json()["error"]["code"] in {"quota_exceeded", "payload_too_large"}
        assert "BASHGYM_PROJECT_QUOTA_BYTES" in over.json()["error"]["hint"]


def test_a_workspaces_projects_share_one_quota(tmp_path: Path) -> None:
    """Projects are cheap to make: a tenant spreading uploads over many of them meets the workspace's quota."""
    quotas = {"BASHGYM_PROJECT_QUOTA_BYTES": "1000", "BASHGYM_WORKSPACE_QUOTA_BYTES": "1500"}
    with running_daemon(tmp_path / "home", env=quotas) as daemon:
        token = issue_token(daemon, "wes", "researcher")
        with tenant(daemon, token) as wes:
            for n, size in enumerate((600, 600)):
                stored = wes.put("/v1/blobs", params={"project": f"p{n}"}, content=bytes([n]) * size)
                assert stored.status_code == 200, stored.text
            over = wes.put("/v1/blobs", params={"project": "p2"}, content=b"z" * 600)
        assert over.status_code == 413, over.text
        assert "BASHGYM_WORKSPACE_QUOTA_BYTES" in over.json()["error"]["hint"]
        assert not any(p.name.startswith("tmp") for p in (daemon.home / "artifacts" / "tmp").iterdir())
