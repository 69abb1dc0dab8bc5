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


# The slow suite's longest files, longest first, as measured on 2 cores (CI on 2026-12-05): two workers take whole
# files in collection order, two at a time to start with, so the longest go first and to different workers, the
# rest filling in behind (longest processing time first). Left in path order, the full demo (8.8 min) started
# last on a worker that had already run the cascade (5 min): 17.6 min of wall time for 13 min of work per worker.
LONGEST_FIRST = (
    "tests/e2e/cli/test_demo.py",  # 528 s: the full demo, twice
    "tests/e2e/workflows/test_retrieval_demo.py",  # 34 s: shares the first worker's start with the demo
    "tests/e2e/campaigns/test_cascades.py",  # 335 s
    "tests/e2e/campaigns/test_campaign_learning.py",  # 255 s
    "tests/e2e/bench/test_gpu_sft_bench.py",  # 87 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow (minutes of training) run with --slow or -m slow, never in the default suite; there, the
    longest files are scheduled first (LONGEST_FIRST)."""
    if config.getoption("--slow") or "slow" in (config.getoption("-m") or ""):
        rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep order
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
