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


# The slow suite's order (make test-slow passes --no-loadscope-reorder, so xdist keeps it): two workers take whole
# files from the front of the queue, each taking the next file while it has 2 tests or fewer left. The full demo
# goes first (worker 1), a file of many short tests second (worker 2, which then takes the cascade and the campaign
# as it drains), the short retrieval demo third (worker 1, behind the demo); the rest follow longest first. Left
# to xdist's default (files with the most tests first), the demo (9.5 min) and the cascade (5.4 min) queued on one
# worker: test-slow took 18 min of wall time for 13 min of work per worker (CI, 2026-12-05).
SLOW_ORDER = (
    "tests/e2e/cli/test_demo.py",  # 285 s: the full demo; 2 x 49 s: the short demo, posting to Discord, twice
    "tests/e2e/cli/test_next_actions_paste.py",  # 190 s at load 6 (290 s at 8): the short demo, 46 reads, pastes
    "tests/e2e/trainers/test_methods_through_the_daemon.py",  # 46 s over 6 tests
    "tests/e2e/workflows/test_retrieval_demo.py",  # 37 s
    "tests/e2e/campaigns/test_cascades.py",  # 323 s
    "tests/e2e/campaigns/test_campaign_learning.py",  # 226 s
    "tests/e2e/cli/test_readme_quickstart.py",  # 95 s alone, 137 s at load 6: README's first official run
    "tests/e2e/slurm/test_slurm_lane.py",  # ~70 s with the login node's: SFT through Slurm, cancel, time limit
    "tests/e2e/slurm/test_slurm_login_node.py",
    "tests/e2e/slurm/test_cluster_harness.py",  # ~100 s, mostly waiting: a one-minute time limit, a requeue
    "tests/e2e/agents/test_mcp_agent_session.py",  # 85 s at load 6: an agent ships a retriever with tools
    "tests/e2e/bench/test_gpu_sft_bench.py",  # 98 s
    "tests/e2e/trainers/test_compile_bench.py",  # 70 s
    "tests/e2e/campaigns/test_campaign_runner.py",  # 64 s
    "tests/e2e/evidence/test_eval_repeats.py",  # 55 s
    "tests/e2e/imports/test_mlflow_import.py",  # 140 s at load 8: a real mlflow server, imports run three times
    "tests/e2e/tracking/test_callback.py",  # 55 s (69 s at load 2): two Trainers with the callback, the gate
    "tests/e2e/tracking/test_callback_distributed.py",  # 49 s at load 5.5: two torchrun launches, 2 CPU ranks
    "tests/e2e/ui/test_browser_evaluations.py",  # 40 s: the tiny model evaluated, pages in chromium
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow (minutes of training) run with --slow or -m slow, never in the default suite; there, the
    files are queued in SLOW_ORDER, the rest after them in path order."""
    if config.getoption("--slow") or "slow" in (config.getoption("-m") or ""):
        rank = {path: index for index, path in enumerate(SLOW_ORDER)}
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
