from __future__ import annotations

import os

# One torch thread per process. The suite runs two workers on two cores, and each worker's daemons and
# trainers run torch at once: with torch's default of a thread per core, two tiny runs side by side took
# 82 ms a step instead of 17 ms (threads waiting on cores), and a resumed SSH run took 116 s in place of 18.
# Set before anything imports torch; every daemon and trainer the suite starts inherits it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from bashgym.client.specs import Actor
from bashgym.ledger.store import Ledger

from tests.support.helpers import RunningDaemon, running_daemon


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (make test-slow)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow (minutes of training) run with --slow or -m slow, never in the default suite."""
    if config.getoption("--slow") or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with make test-slow (pytest -m slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


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
