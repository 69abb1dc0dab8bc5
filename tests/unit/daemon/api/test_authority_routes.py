"""Every route declares a capability, and every mutating route enforces it: 401, 403 naming it, success."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bashgym.daemon.api.responses import MUTATING
from bashgym.daemon.api.routing import AUTHENTICATED
from bashgym.daemon.authority import CAPABILITIES
from bashgym.ledger.store import Ledger
from fastapi.routing import APIRoute

from tests.support.route_cases import BEYOND_AUTHORITY, CASES, OWNER, Harness, declared_capability, needed, open_harness

pytestmark = pytest.mark.anyio
UNAUTHENTICATED_ROUTES = {"/v1/health", "/v1/openapi.json", "/v1/docs", "/v1/docs/oauth2-redirect"}
# The web view's pages authenticate by session cookie, and judge ledger.read per page (tests/e2e/ui attacks them).
SESSION_PREFIX = "/ui"
# Writes any signed-in principal may make for itself alone: a sign-in link grants only the caller's own reads, and
# a session revoked is its own (anyone's needs authority.manage: tests/e2e/ui/test_web_view_sessions.py).
FOR_ONESELF = {("POST", "/v1/ui/links"), ("POST", "/v1/ui/sessions/{session_id}/revoke")}


@pytest.fixture
async def harness(ledger: Ledger, tmp_path: Path) -> AsyncIterator[Harness]:
    async with open_harness(ledger, tmp_path) as opened:
        yield opened


def _routes(harness: Harness) -> list[APIRoute]:
    return [r for r in harness.app.routes if isinstance(r, APIRoute)]


async def test_every_route_declares_a_capability(harness: Harness) -> None:
    undeclared = [
        r.path
        for r in _routes(harness)
        if r.path not in UNAUTHENTICATED_ROUTES
        and not r.path.startswith(SESSION_PREFIX)
        and declared_capability(r) is None
    ]
    assert undeclared == []
    known = set(CAPABILITIES) | {AUTHENTICATED}
    assert {declared_capability(r) for r in _routes(harness)} - {None} <= known


async def test_every_mutating_route_has_a_case_in_this_table(harness: Harness) -> None:
    mutating = {
        (m, r.path)
        for r in _routes(harness)
        for m in r.methods
        if m in MUTATING and not r.path.startswith(SESSION_PREFIX) and (m, r.path) not in FOR_ONESELF
    }
    assert mutating == set(CASES)


@pytest.mark.parametrize("method, template", list(CASES), ids=[f"{m} {p}" for m, p in CASES])
async def test_a_mutating_route_answers_401_then_403_naming_the_capability_then_succeeds(
    harness: Harness, method: str, template: str
) -> None:
    route = next(r for r in _routes(harness) if r.path == template and method in r.methods)
    capability = declared_capability(route)
    assert capability is not None
    path, kwargs = await CASES[(method, template)](harness)
    cursor = harness.ledger.last_cursor

    anonymous = await harness.client.request(method, path, **kwargs)
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["error"]["code"] == "authentication_required"

    everything_else = await harness.token([c for c in CAPABILITIES if c != capability])
    denied = await harness.client.request(
        method, path, headers={"Authorization": f"Bearer {everything_else}"}, **kwargs
    )
    assert denied.status_code == 403, denied.text
    assert capability in denied.json()["error"]["message"]
    assert harness.ledger.last_cursor == cursor + 1  # only the token issue above was recorded

    just_that = await harness.token(needed(route), actor_id=OWNER)
    allowed = await harness.client.request(method, path, headers={"Authorization": f"Bearer {just_that}"}, **kwargs)
    if (method, template) in BEYOND_AUTHORITY:
        assert allowed.status_code == BEYOND_AUTHORITY[(method, template)], allowed.text
    else:
        assert allowed.status_code < 300, allowed.text
