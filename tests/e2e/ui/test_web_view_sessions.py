"""The web view's sessions as a browser and an attacker meet them: kept (hashed) in the ledger so a daemon restart
signs no one out, ended by expiry, sign-out, a revoked token or a revocation (one's own, or an admin's), and a deep
link that survives sign-in without opening a redirect to another site."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from bashgym.daemon.ui.sessions import COOKIE, NEXT_COOKIE, digest
from bashgym.ledger.store import Ledger

from tests.support.factories import tracking_context
from tests.support.helpers import inprocess_daemon, running_daemon

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def api(tmp_path: Path, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    ledger = await Ledger.open(tmp_path / "ledger.sqlite3", synchronous="NORMAL", clock=clock)
    async with ledger, inprocess_daemon(ledger, tmp_path / "home") as client:
        yield client


def browser_of(api: httpx.AsyncClient) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=api._transport, base_url="http://daemon")


async def sign_in(api: httpx.AsyncClient, browser: httpx.AsyncClient, token: str | None = None, next: str = "") -> str:
    """Follow a fresh link in `browser`; where sign-in sent it."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    link = (await api.post("/v1/ui/links", headers=headers)).json()["url"].removeprefix("http://daemon")
    answer = await browser.get(link + (f"&{urlencode({'next': next})}" if next else ""))
    assert answer.status_code == 303, answer.text
    return str(answer.headers["location"])


async def token_of(api: httpx.AsyncClient, actor: str, profile: str = "researcher") -> str:
    body: dict[str, Any] = {"actor_id": actor, "profile": profile}
    made = await api.post("/v1/auth/tokens", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


async def sessions_of(api: httpx.AsyncClient, token: str | None = None, **query: str) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    listed = await api.get("/v1/ui/sessions", headers=headers, params=query)
    assert listed.status_code == 200, listed.text
    return list(listed.json()["sessions"])


async def test_a_session_is_kept_by_its_digest_and_ends_on_expiry_and_sign_out(
    api: httpx.AsyncClient, clock: Clock, tmp_path: Path
) -> None:
    async with browser_of(api) as browser:
        assert await sign_in(api, browser) == "/ui"
        cookie = browser.cookies[COOKIE]
        with sqlite3.connect(tmp_path / "ledger.sqlite3") as db:
            stored = db.execute("SELECT * FROM ui_sessions").fetchall()
        assert stored and cookie not in repr(stored) and digest(cookie) in repr(stored)
        assert (await browser.get("/ui")).status_code == 200
        assert (await browser.get("/ui/")).status_code == 200  # /ui/ answers like /ui
        clock.now += timedelta(hours=8, seconds=1)
        expired = await browser.get("/ui")
        assert expired.status_code == 401 and "not signed in" in expired.text
    async with browser_of(api) as browser:
        await sign_in(api, browser)
        kept = browser.cookies[COOKIE]
        assert (await browser.post("/ui/signout")).status_code == 200
        browser.cookies.set(COOKIE, kept, path="/ui")  # the value replayed after sign-out opens nothing
        assert (await browser.get("/ui")).status_code == 401
    ended = {s["end_reason"] for s in await sessions_of(api)}
    assert ended == {"signed_out", None}  # the expired one was never ended, it lapsed


async def test_revoking_a_session_or_its_token_signs_its_browser_out_and_no_one_else_may(
    api: httpx.AsyncClient,
) -> None:
    alice, mallory = await token_of(api, "alice"), await token_of(api, "mallory")
    async with browser_of(api) as alices, browser_of(api) as admins, browser_of(api) as second:
        await sign_in(api, alices, alice)
        await sign_in(api, admins)
        await sign_in(api, second, alice)
        [newest, oldest] = await sessions_of(api, alice)
        assert {s["actor_id"] for s in await sessions_of(api, alice)} == {"alice"}
        # Mallory, a researcher, may neither list nor end another's sessions; an unknown id reads the same.
        assert (await api.get("/v1/ui/sessions", params={"every": "true"}, headers=bearer(mallory))).status_code == 403
        for target in (oldest["session_id"], "uis-nonexistent"):
            refused = await api.post(f"/v1/ui/sessions/{target}/revoke", headers=bearer(mallory))
            assert refused.status_code == 404 and "of yours" in refused.json()["error"]["message"]
        assert (await alices.get("/ui")).status_code == 200
        # Alice ends her own; the admin (authority.manage) ends anyone's.
        mine = await api.post(f"/v1/ui/sessions/{oldest['session_id']}/revoke", headers=bearer(alice))
        assert mine.status_code == 200 and mine.json()["record"]["end_reason"] == "revoked"
        assert (await alices.get("/ui")).status_code == 401
        assert (await second.get("/ui")).status_code == 200
        admin_ends = await api.post(f"/v1/ui/sessions/{newest['session_id']}/revoke")
        assert admin_ends.status_code == 200 and (await second.get("/ui")).status_code == 401
        # Revoking the token ends every session it opened, for good.
        await sign_in(api, alices, alice)
        assert (await alices.get("/ui")).status_code == 200
        token_id = next(t["token_id"] for t in (await api.get("/v1/auth/tokens")).json() if t["actor_id"] == "alice")
        assert (await api.post(f"/v1/auth/tokens/{token_id}/revoke")).status_code in {200, 201}
        assert (await alices.get("/ui")).status_code == 401
        assert (await admins.get("/ui")).status_code == 200
    reasons = [s["end_reason"] for s in await sessions_of(api, every="true") if s["actor_id"] == "alice"]
    assert sorted(reasons) == ["revoked", "revoked", "token_dead"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_deep_link_survives_sign_in_and_never_leads_off_site(api: httpx.AsyncClient) -> None:
    context = tracking_context(project_id="nightly")
    run_id = (await api.post("/v1/runs", json={"method": "sft", "tracking_context": context})).json()["record"][
        "run_id"
    ]
    deep = f"/ui/p/nightly/runs/{run_id}"
    async with browser_of(api) as browser:
        asked = await browser.get(deep, params={"settings": "all"})
        assert asked.status_code == 401 and browser.cookies[NEXT_COOKIE]
        assert "samesite=lax" in asked.headers["set-cookie"].lower()
        assert await sign_in(api, browser) == f"{deep}?settings=all"
        assert NEXT_COOKIE not in browser.cookies
        assert (await browser.get(deep)).status_code == 200
    async with browser_of(api) as browser:
        assert await sign_in(api, browser, next=deep) == deep
    for hostile in ("//evil.com", "https://evil.com/ui/", "/\\evil.com", "javascript:alert(1)", "/ui\\..\\x",
                    "/ui//evil.com", "/uix", "/ui/signin?code=x", "/ui/\r\nSet-Cookie: x=1", "http:/ui"):  # fmt: skip
        async with browser_of(api) as browser:
            assert await sign_in(api, browser, next=hostile) == "/ui", hostile
    async with browser_of(api) as browser:
        browser.cookies.set(NEXT_COOKIE, "//evil.com", path="/ui")
        assert await sign_in(api, browser) == "/ui"


async def test_the_favicon_is_served_and_cached(api: httpx.AsyncClient) -> None:
    icon = await api.get("/ui/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert "max-age" in icon.headers["cache-control"] and icon.text.startswith("<svg")
    async with browser_of(api) as browser:
        await sign_in(api, browser)
        assert '<link rel="icon" href="/ui/static/favicon.svg"' in (await browser.get("/ui")).text


def test_a_session_survives_a_daemon_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_daemon(home) as daemon, daemon.client() as admin:
        link = admin.post("/v1/ui/links").json()["url"]
        with httpx.Client(timeout=10) as browser:
            assert browser.get(link).status_code == 303
            cookie = browser.cookies[COOKIE]
    with running_daemon(home) as daemon, httpx.Client(timeout=10) as browser:
        browser.cookies.set(COOKIE, cookie)
        again = browser.get(f"{daemon.url}/ui")
        assert again.status_code == 200 and "Projects" in again.text
