from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from bashgym.ledger import Ledger
from bashgym.ledger.models import Actor

from tests.helpers import RunningDaemon, running_daemon


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[Ledger]:
    """A fresh ledger file in tmp_path with every migration applied."""
    opened = await Ledger.open(tmp_path / "ledger.sqlite3", synchronous="NORMAL")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def actor() -> Actor:
    return Actor(actor_id="alice", correlation_id="cor-test")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path / "home") as running:
        yield running


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)
