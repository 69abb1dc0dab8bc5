"""Runs table benchmark (issue 54): a page of 50 runs at 100,000 runs, filtered in the search grammar and sorted by a
metric, beside today's unfiltered page (newest first) in the same run, the ledger's read alone (no HTTP), p50 and p99.

The ledger is built through the ledger's own write code (bench/ledger_ingest.py's 100,000 runs, a third of them
completed), and each run gets one train.loss point. The filtered page computes every kept run's sort key (one indexed
look-up a run, runs_table.py), so its cost grows with the runs the filter keeps; the unfiltered page walks an index.

Run: python bench/runs_table_bench.py [--runs 100000] (building the ledger takes a few minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import history
from bashgym.client.specs import Actor, MetricBatch, MetricPoint
from bashgym.ledger import runs as ledger_runs
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import Tx
from ledger_ingest import build_big_ledger

QUERIES = {
    "unfiltered, newest first (runs_page, today's page)": None,
    "unfiltered, newest first (runs_table)": {},
    "unfiltered, 50,000 deep (runs_table)": {"deep": True},
    "status = 'completed', newest first": {"filter_text": "status = 'completed'"},
    "filtered + sorted: metrics.train.loss < 0.5 and status = 'completed', by metrics.train.loss asc": {
        "filter_text": "metrics.train.loss < 0.5 and status = 'completed'",
        "sort": "metrics.train.loss asc",
        "columns": "metrics.train.loss, metrics.train.loss:best",
    },
    "sorted by metrics.train.loss desc, no filter": {
        "sort": "metrics.train.loss desc",
        "columns": "metrics.train.loss",
    },
}


async def add_losses(path: Path, metric: str = "train.loss") -> None:
    """One point of `metric` a run, 5,000 runs a transaction."""
    async with await Ledger.open(path, synchronous="NORMAL") as ledger:
        ids = await ledger.read(lambda conn: [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY run_id")])

        def add(tx: Tx, chunk: list[str], first: int) -> None:
            for i, run_id in enumerate(chunk, first):
                point = MetricPoint(metric=metric, step=0, value=(i * 7919 % 1000) / 1000)
                batch = MetricBatch(run_id=run_id, attempt_id=f"{run_id}.a1", points=[point])
                ledger_runs.ingest_metrics(tx, "default", "nightly", batch)

        for at in range(0, len(ids), 5_000):
            await ledger.write(Actor(actor_id="bench"), lambda tx, a=at: add(tx, ids[a : a + 5_000], a))


async def measure(path: Path, repeats: int) -> dict[str, tuple[float, float]]:
    out = {}
    async with await Ledger.open(path, synchronous="NORMAL") as ledger:
        deep = None
        cursor = None
        for _ in range(1000):
            page = await ledger.runs_table_page("default", "nightly", after=cursor, limit=50)
            if page["next"] is None:
                break
            cursor = deep = page["next"]
        for name, kwargs in QUERIES.items():
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                if kwargs is None:
                    await ledger.runs_page("default", "nightly", filters={}, limit=50)
                else:
                    chosen = {k: v for k, v in kwargs.items() if k != "deep"}
                    after = deep if kwargs.get("deep") else None
                    await ledger.runs_table_page("default", "nightly", limit=50, after=after, **chosen)
                samples.append((time.perf_counter() - start) * 1000)
            samples.sort()
            out[name] = (statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    start = history.begin()
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "ledger.db"
        started = time.perf_counter()
        asyncio.run(build_big_ledger(path, args.runs, 0))
        asyncio.run(add_losses(path))
        print(f"built {args.runs:,} runs with one train.loss point each in {time.perf_counter() - started:.0f} s")
        figures = {}
        for name, (p50, p99) in asyncio.run(measure(path, args.repeats)).items():
            print(f"{p50:9.1f} ms p50 {p99:9.1f} ms p99   {name}")
            figures[f"{name}: p50 ms"] = history.Figure(round(p50, 2), unit="ms", better="lower")
            figures[f"{name}: p99 ms"] = history.Figure(round(p99, 2), unit="ms", better="lower")
        history.record("runs_table_bench", figures, settings=vars(args), start=start)


if __name__ == "__main__":
    main()
