"""Every write route, called by those who should not reach what it writes, leaves the ledger as it was.

Issue 50's acceptance: each mutating route of the API (one prepared request each, tests/support/route_cases.py) is
sent by a viewer, a researcher of another project and the admin of another workspace. Each is refused, and the
ledger (every row of every table) is unchanged after each refusal. The other workspace's admin acting in its own
workspace (naming none) may succeed, but then writes nothing outside its workspace.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.ledger.store import Ledger

from tests.support.route_cases import CASES, Harness, open_harness

pytestmark = pytest.mark.anyio
OTHER_WS = "ws9"


@pytest.fixture
async def harness(ledger: Ledger, tmp_path: Path) -> AsyncIterator[Harness]:
    async with open_harness(ledger, tmp_path) as opened:
        yield opened


def ledger_digest(path: Path) -> str:
    """Every row of every table, in a stable order: two equal digests are two equal ledgers."""
    digest = hashlib.sha256()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for table in tables:
            digest.update(table.encode())
            for row in sorted(repr(tuple(r)) for r in conn.execute(f'SELECT * FROM "{table}"')):
                digest.update(row.encode())
    conn.close()
    return digest.hexdigest()


def workspaces_written_since(path: Path, cursor: int) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT DISTINCT workspace_id FROM events WHERE cursor > ?", (cursor,)).fetchall()
    conn.close()
    return {str(r[0]) for r in rows}


async def _send(h: Harness, token: str, method: str, path: str, kwargs: dict[str, Any]) -> Any:
    return await h.client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)


@pytest.mark.parametrize("method, template", list(CASES), ids=[f"{m} {p}" for m, p in CASES])
async def test_a_write_route_refuses_who_may_not_write_there_and_leaves_the_ledger_as_it_was(
    harness: Harness, method: str, template: str
) -> None:
    path, kwargs = await CASES[(method, template)](harness)
    attackers = {
        "a viewer": await harness.token([], profile="viewer", workspace_id="default"),
        "a researcher of another project": await harness.token(
            [], profile="researcher", workspace_id="default", project_id="elsewhere"
        ),
        f"the admin of {OTHER_WS}, naming the default workspace": await harness.token(
            [], profile="admin", workspace_id=OTHER_WS
        ),
    }
    ledger_path = harness.ledger.path
    for who, token in attackers.items():
        before = ledger_digest(ledger_path)
        sent = dict(kwargs, params={**kwargs.get("params", {}), "workspace": "default"})
        answer = await _send(harness, token, method, path, sent)
        assert answer.status_code in {403, 404}, f"{who}: {answer.status_code} {answer.text}"
        assert ledger_digest(ledger_path) == before, f"{who} was refused, yet the ledger changed"

    # In its own workspace (it names none), the other workspace's admin may act, but only there.
    cursor = harness.ledger.last_cursor
    before = ledger_digest(ledger_path)
    answer = await _send(
        harness, attackers[f"the admin of {OTHER_WS}, naming the default workspace"], method, path, kwargs
    )
    if answer.status_code >= 400:
        assert ledger_digest(ledger_path) == before, f"refused with {answer.status_code}, yet the ledger changed"
    else:
        assert workspaces_written_since(ledger_path, cursor) <= {OTHER_WS}, answer.text
