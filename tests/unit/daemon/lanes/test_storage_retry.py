"""Writes whose source of truth is a file (a trainer's metrics) wait out a refusing disk instead of
dropping what they read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bashgym.client.errors import InvalidInput, LedgerDiskFull
from bashgym.daemon.background import until_stored
from bashgym.daemon.lanes.supervisor import MetricsFollower

pytestmark = pytest.mark.anyio


async def test_a_refused_write_is_retried_until_the_disk_takes_it() -> None:
    calls: list[int] = []

    async def write() -> str:
        calls.append(len(calls))
        if len(calls) < 3:
            raise LedgerDiskFull("The ledger could not grow.", hint="Free space.")
        return "stored"

    assert await until_stored(write, what="metrics of run r1") == "stored"
    assert len(calls) == 3


async def test_a_write_refused_for_its_content_is_not_retried() -> None:
    async def write() -> None:
        raise InvalidInput("NaN is not a metric value.")

    with pytest.raises(InvalidInput):
        await until_stored(write, what="metrics of run r1")


def test_metrics_read_but_not_yet_stored_are_read_again(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "metrics": {"train.loss": 1.0 / s}}) for s in (1, 2)]
    path.write_text("\n".join(lines) + "\n" + '{"step": 3, "metr')  # the last line is still being written
    follower = MetricsFollower(path, "r1.a1", "r1")
    first, records, offset = follower.read_batches()
    again, _, _ = follower.read_batches()  # the store failed: the offset has not moved
    assert [p.step for p in first[0].points] == [1, 2] and again == first and len(records) == 2
    follower.offset = offset
    assert follower.read_batches()[0] == []  # stored: nothing new until the half line is complete


def test_each_point_carries_the_time_its_line_was_logged_at(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 1, "time": 1_700_000_000.5, "metrics": {"train.loss": 1.0}},
        {"step": 2, "metrics": {"train.loss": 0.5}},  # a trainer that wrote no time
        {"step": 3, "time": "soon", "metrics": {"train.loss": 0.25}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    batches, _, _ = MetricsFollower(path, "r1.a1", "r1").read_batches()
    assert [p.time for p in batches[0].points] == [1_700_000_000.5, None, None]
