"""The web view over HTTP as a browser reaches it: the one-time sign-in, the pages a session may read, the series
endpoint a chart draws from, and every refusal a hostile or unlucky visitor meets (forged, replayed or expired
codes and sessions, another project's or workspace's records, ids with path characters)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.daemon.authority.principals import Principal
from bashgym.daemon.ui.sessions import COOKIE, SignIns
from bashgym.ledger.store import Ledger

from tests.support.factories import campaign_spec, tracking_context
from tests.support.helpers import inprocess_daemon, running_daemon

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def api(ledger: Ledger, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with inprocess_daemon(ledger, tmp_path / "home") as client:
        yield client


async def run_with_points(api: httpx.AsyncClient, project: str, points: int = 50) -> str:
    answer = await api.post(
        "/v1/runs", json={"method": "sft", "tracking_context": tracking_context(project_id=project)}
    )
    run_id = str(answer.json()["record"]["run_id"])
    attempt = f"{run_id}.a1"
    batch = [{"metric": "train.loss", "step": s, "value": 1.0 / (s + 1)} for s in range(points)]
    stored = await api.post(
        f"/v1/projects/{project}/metrics", json={"run_id": run_id, "attempt_id": attempt, "points": batch}
    )
    assert stored.status_code in {200, 201}, stored.text
    return run_id


@contextlib.asynccontextmanager
async def signed_in(api: httpx.AsyncClient, token: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """A browser: a client of its own that follows the link and keeps the cookie."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    link = (await api.post("/v1/ui/links", headers=headers)).json()["url"]
    async with httpx.AsyncClient(transport=api._transport, base_url="http://daemon") as browser:
        answer = await browser.get(link.removeprefix("http://daemon"))
        assert answer.status_code == 303, answer.text
        yield browser


async def researcher(api: httpx.AsyncClient, project: str) -> str:
    body: dict[str, Any] = {"actor_id": f"r-{project}", "profile": "researcher", "project_id": project}
    return str((await api.post("/v1/auth/tokens", json=body)).json()["token"])


async def test_a_link_signs_in_once_and_the_pages_show_the_run_and_its_curve(api: httpx.AsyncClient) -> None:
    run_id = await run_with_points(api, "nightly")
    link = (await api.post("/v1/ui/links")).json()
    assert link["url"].startswith("http://daemon/ui/signin?code=") and link["expires_in_s"] == 120
    browser = httpx.AsyncClient(transport=api._transport, base_url="http://daemon")
    async with browser:
        first = await browser.get(link["url"].removeprefix("http://daemon"))
        assert first.status_code == 303 and first.headers["location"] == "/ui"
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
        again = await browser.get(link["url"].removeprefix("http://daemon"))
        assert again.status_code == 401 and "already used or expired" in again.text

        home = await browser.get("/ui")
        assert home.status_code == 200 and 'href="/ui/p/nightly"' in home.text
        assert "Content-Security-Policy" in home.headers
        project = await browser.get("/ui/p/nightly")
        assert run_id in project.text and "<table>" in project.text
        page = await browser.get(f"/ui/p/nightly/runs/{run_id}")
        assert page.status_code == 200 and "train.loss" in page.text and "data-chart" in page.text
        assert "run.registered" in page.text and "metrics.ingested" in page.text  # its lifecycle events
        series = (await browser.get(f"/ui/data/p/nightly/runs/{run_id}/series", params={"metric": "train.loss"})).json()
        assert series["steps"] == list(range(50)) and series["decimated"] is False
        token = (api.headers["authorization"]).split()[1]
        assert token not in home.text + project.text + page.text


async def test_a_long_series_is_thinned_to_the_charts_width_keeping_its_extremes(api: httpx.AsyncClient) -> None:
    run_id = await run_with_points(api, "nightly", points=5000)
    async with signed_in(api) as browser:
        url = f"/ui/data/p/nightly/runs/{run_id}/series"
        wide = (await browser.get(url, params={"metric": "train.loss", "points": 400})).json()
        assert wide["decimated"] and wide["total"] == 5000 and len(wide["steps"]) <= 400
        assert wide["steps"][0] == 0 and wide["steps"][-1] == 4999 and max(wide["values"]) == 1.0
        zoomed = (await browser.get(url, params={"metric": "train.loss", "points": 400, "lo": 100, "hi": 180})).json()
        assert zoomed["steps"] == list(range(100, 181)) and not zoomed["decimated"]


async def test_compare_overlays_runs_and_marks_the_settings_that_differ(api: httpx.AsyncClient) -> None:
    first, second = await run_with_points(api, "nightly"), await run_with_points(api, "nightly")
    async with signed_in(api) as browser:
        page = await browser.get("/ui/p/nightly/compare", params=[("run", first), ("run", second)])
        assert page.status_code == 200 and first in page.text and second in page.text and "data-chart" in page.text
        one = await browser.get("/ui/p/nightly/compare", params={"run": first})
        assert one.status_code == 422 and "2 to 20 runs" in one.text


async def test_a_session_scoped_to_one_project_sees_nothing_of_another(api: httpx.AsyncClient) -> None:
    theirs = await run_with_points(api, "secret")
    await run_with_points(api, "nightly")
    async with signed_in(api, await researcher(api, "nightly")) as browser:
        home = await browser.get("/ui")
        assert "/ui/p/nightly" in home.text and "secret" not in home.text
        for path in ("/ui/p/secret", f"/ui/p/secret/runs/{theirs}", "/ui/p/secret/events"):
            refused = await browser.get(path)
            assert refused.status_code == 403 and theirs not in refused.text, path
        data = await browser.get(f"/ui/data/p/secret/runs/{theirs}/series", params={"metric": "train.loss"})
        assert data.status_code == 403
        # Its run named under a project the session may read is simply not there.
        hidden = await browser.get(f"/ui/p/nightly/runs/{theirs}")
        assert hidden.status_code == 404
        other_ws = await browser.get("/ui/p/nightly", params={"workspace": "elsewhere"})
        assert other_ws.status_code in {403, 404} and "<html" in other_ws.text


async def test_a_points_time_comes_back_with_it_for_the_wall_clock_axis(api: httpx.AsyncClient) -> None:
    run_id = await run_with_points(api, "nightly", points=3)
    timed = [{"metric": "train.loss", "step": s, "value": 0.1, "time": 1_767_225_600.0 + s} for s in (3, 4)]
    body = {"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": timed}
    assert (await api.post("/v1/projects/nightly/metrics", json=body)).status_code in {200, 201}
    async with signed_in(api) as browser:
        series = (await browser.get(f"/ui/data/p/nightly/runs/{run_id}/series", params={"metric": "train.loss"})).json()
    assert series["steps"] == [0, 1, 2, 3, 4]
    assert series["times"] == [None, None, None, 1_767_225_603.0, 1_767_225_604.0]  # untimed points stay untimed
    # Thinned, each point kept keeps its own time.
    long_run = await run_with_points(api, "nightly", points=1)
    timed = [{"metric": "train.loss", "step": s, "value": 1 / (s + 1), "time": 1_767_225_600.0 + 2 * s}
             for s in range(1, 3000)]  # fmt: skip
    body = {"run_id": long_run, "attempt_id": f"{long_run}.a1", "points": timed}
    assert (await api.post("/v1/projects/nightly/metrics", json=body)).status_code in {200, 201}
    async with signed_in(api) as browser:
        url = f"/ui/data/p/nightly/runs/{long_run}/series"
        thinned = (await browser.get(url, params={"metric": "train.loss", "points": 200})).json()
    assert thinned["decimated"] and len(thinned["steps"]) <= 200
    assert thinned["times"] == [None if s == 0 else 1_767_225_600.0 + 2 * s for s in thinned["steps"]]


async def test_a_campaign_page_draws_its_newest_reports_charts_for_its_readers_only(api: httpx.AsyncClient) -> None:
    await api.post("/v1/projects", json={"project_id": "nightly", "name": "Nightly"})
    spec = campaign_spec(campaign_id="c1", report_schedule=None)
    assert (await api.post("/v1/projects/nightly/campaigns", json=spec)).status_code == 201
    async with signed_in(api) as browser:
        before = await browser.get("/ui/p/nightly/campaigns/c1")
        assert "No report of this campaign yet" in before.text and "bashgym campaign report" in before.text
        made = await api.post("/v1/projects/nightly/campaigns/c1/reports", json={"formats": ["png", "json"]})
        report_id = made.json()["report_id"]
        charts = [f["name"] for f in made.json()["files"] if f["name"].endswith(".png")]
        page = await browser.get("/ui/p/nightly/campaigns/c1")
        assert charts and all(f'<img src="/ui/p/nightly/reports/{report_id}/{c}"' in page.text for c in charts)
        drawn = await browser.get(f"/ui/p/nightly/reports/{report_id}/{charts[0]}")
        assert drawn.status_code == 200 and drawn.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert drawn.headers["content-type"] == "image/png" and drawn.headers["cache-control"] == "no-store"
        for odd in ("..%2Fledger.sqlite3", "secrets.txt", "manifest.json%00.png"):
            refused = await browser.get(f"/ui/p/nightly/reports/{report_id}/{odd}")
            assert refused.status_code == 404 and "<html" in refused.text, odd
    async with signed_in(api, await researcher(api, "elsewhere")) as stranger:
        refused = await stranger.get(f"/ui/p/nightly/reports/{report_id}/{charts[0]}")
        assert refused.status_code == 403 and refused.content[:4] != b"\x89PNG"
        mine_by_name = await stranger.get(f"/ui/p/elsewhere/reports/{report_id}/{charts[0]}")
        assert mine_by_name.status_code in {403, 404} and mine_by_name.content[:4] != b"\x89PNG"


async def test_forged_expired_and_revoked_sessions_and_odd_ids_get_a_clear_page(api: httpx.AsyncClient) -> None:
    run_id = await run_with_points(api, "nightly")
    browser = httpx.AsyncClient(transport=api._transport, base_url="http://daemon")
    async with browser:
        forged = await browser.get("/ui/signin", params={"code": "A" * 43})
        assert forged.status_code == 401 and "bashgym ui" in forged.text
        browser.cookies.set(COOKIE, "made-up-session", domain="daemon", path="/ui")
        assert (await browser.get("/ui")).status_code == 401
    token = await researcher(api, "nightly")
    async with signed_in(api, token) as browser:
        for path in (
            "/ui/p/..%2F..%2Fetc/runs/x",
            "/ui/p/nightly/runs/..%2Fsecret",
            f"/ui/p/nightly/runs/{run_id}/x/y",
        ):
            odd = await browser.get(path)
            assert odd.status_code in {404, 422} and "<html" in odd.text and "Traceback" not in odd.text, path
        tokens = (await api.get("/v1/auth/tokens")).json()
        listed = tokens["tokens"] if isinstance(tokens, dict) else tokens
        revoked = next(t for t in listed if t["actor_id"] == "r-nightly")["token_id"]
        assert (await api.post(f"/v1/auth/tokens/{revoked}/revoke")).status_code in {200, 201}
        assert (await browser.get("/ui")).status_code == 401


def test_a_code_is_good_once_and_for_two_minutes() -> None:
    clock = Clock()
    sign_ins = SignIns(clock)
    alice = Principal(actor_id="alice", token_id="tok-1", capabilities=frozenset())
    code, _ = sign_ins.issue_code({"authorization": "Bearer x"}, "default", alice)
    clock.now += 121
    assert sign_ins.exchange(code) is None
    code, _ = sign_ins.issue_code({"authorization": "Bearer x"}, "default", alice)
    identity = sign_ins.exchange(code)
    assert identity is not None and identity.token_id == "tok-1" and not identity.delegation
    assert "Bearer x" not in repr(identity)  # the token is never kept, only its id
    assert sign_ins.exchange(code) is None


def test_a_live_page_hears_of_new_points_as_they_are_stored(tmp_path: Path) -> None:
    # Over a real socket: the in-process transport buffers a whole answer, and a live stream never ends.
    with running_daemon(tmp_path / "home") as daemon, daemon.client() as admin:
        context = tracking_context(project_id="nightly")
        run_id = admin.post("/v1/runs", json={"method": "sft", "tracking_context": context}).json()["record"]["run_id"]
        link = admin.post("/v1/ui/links").json()["url"]
        with httpx.Client(timeout=10, follow_redirects=True) as browser:
            assert browser.get(link).status_code == 200  # followed to /ui, signed in
            with browser.stream("GET", f"{daemon.url}/ui/live/p/nightly/runs/{run_id}") as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                lines = stream.iter_lines()
                assert next(lines) == ": live"
                point = [{"metric": "train.loss", "step": 3, "value": 0.2}]
                body = {"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": point}
                assert admin.post("/v1/projects/nightly/metrics", json=body).status_code in {200, 201}
                # The stream wakes on the ledger's append (no polling); its read timeout bounds the wait.
                while (line := next(lines)) != "event: points":
                    assert line in {"", ": keep-alive"} or line.startswith(("data:", "event: status")), line


def test_open_live_streams_count_against_the_viewers_long_poll_slots(tmp_path: Path) -> None:
    # A stream is open for minutes: without a bound one session could hold the daemon's connections open at will.
    env = {"BASHGYM_MAX_WAITS_PER_PRINCIPAL": "2"}
    with running_daemon(tmp_path / "home", env=env) as daemon, daemon.client() as admin:
        context = tracking_context(project_id="nightly")
        run_id = admin.post("/v1/runs", json={"method": "sft", "tracking_context": context}).json()["record"]["run_id"]
        link = admin.post("/v1/ui/links").json()["url"]
        url = f"{daemon.url}/ui/live/p/nightly/runs/{run_id}"
        with httpx.Client(timeout=10, follow_redirects=True) as browser:
            assert browser.get(link).status_code == 200
            with contextlib.ExitStack() as held:
                readers = []  # kept: a dropped line reader closes its connection
                for _ in range(2):
                    stream = held.enter_context(browser.stream("GET", url))
                    readers.append(stream.iter_lines())
                    assert stream.status_code == 200 and next(readers[-1]) == ": live"
                third = browser.get(url)
                assert third.status_code == 429 and third.headers["retry-after"] == "1", third.text
                assert "waiting requests open" in third.json()["error"]
            # Closed by the browser: the daemon sees the disconnect and the slots come back.
            deadline = time.monotonic() + 20
            while True:
                with browser.stream("GET", url) as again:
                    if again.status_code == 200:
                        break
                assert time.monotonic() < deadline, "the closed streams' slots never came back"
                time.sleep(0.2)


async def test_the_run_model_version_and_campaign_pages_show_tags_and_the_note_escaped(
    api: httpx.AsyncClient,
) -> None:
    run_id = await run_with_points(api, "nightly", points=2)
    spec = campaign_spec(campaign_id="c-tags")
    assert (await api.post("/v1/projects/nightly/campaigns", json=spec)).status_code == 201
    paths = {
        f"/v1/projects/nightly/runs/{run_id}": f"/ui/p/nightly/runs/{run_id}",
        "/v1/projects/nightly/model-versions/tiny-v1": "/ui/p/nightly/model-versions/tiny-v1",
        "/v1/projects/nightly/campaigns/c-tags": "/ui/p/nightly/campaigns/c-tags",
    }
    for written in paths:
        assert (await api.put(f"{written}/tags", json={"tags": {"team": "nlp"}})).status_code == 201
        note = {"text": "<script>alert(1)</script> lr too high"}
        assert (await api.put(f"{written}/note", json=note)).status_code == 201
    async with signed_in(api, await researcher(api, "nightly")) as browser:
        for shown in paths.values():
            page = await browser.get(shown)
            assert page.status_code == 200, (shown, page.text)
            assert "Tags and note" in page.text and "team=nlp" in page.text and "lr too high" in page.text, shown
            assert "<script>alert" not in page.text and "&lt;script&gt;" in page.text, shown
    async with signed_in(api, await researcher(api, "elsewhere")) as stranger:
        assert (await stranger.get("/ui/p/nightly/model-versions/tiny-v1")).status_code == 403
