"""Ledger benchmark: BashGym through its daemon API against MLflow's SQLite store, in one run.

Measures (issue 3 targets in brackets):
  - metric ingestion through the API in batches of 1,000   [>= 5x MLflow log_batch, >= 60,000 points/s]
  - against MLflow 3.x log_batch of 1,000 and log_metric one by one  [>= 200x log_metric]
  - trend of one metric with 100,000 points                 [< 250 ms]
  - context and filtered runs over 100,000 runs             [< 50 ms each]
  - a 100-event cursor page after a random cursor, 1,000,000 events   [p99 < 5 ms]

Run: make bench-peers (its own .venv-bench with MLflow; under 5 minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import history
from bashgym.client.specs import Actor, RunRegistration, RunTransition
from bashgym.ledger.runs import register_run, transition_run
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import Tx

from tests.support.factories import tracking_context
from tests.support.helpers import running_daemon

BATCH = 1_000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed_ms(client: httpx.Client, path: str, params: Any, n: int) -> list[float]:
    """Latency of n GETs over one keep-alive connection of the standard library's lean HTTP client.

    httpx adds ~1 ms of its own per request on this machine; the figure is meant to be the daemon's.
    """
    url = httpx.URL(str(client.base_url))
    conn = http.client.HTTPConnection(url.host, url.port)
    # The client's credential, a bearer token or a web view session's cookie.
    headers = {k: v for k, v in client.headers.items() if k.lower() in {"authorization", "cookie"}}
    samples = []
    try:
        for _ in range(n):
            query = urllib.parse.urlencode(params() if callable(params) else params, doseq=True)
            start = time.perf_counter()
            conn.request("GET", f"{path}?{query}", headers=headers)
            response = conn.getresponse()
            body = response.read()
            samples.append((time.perf_counter() - start) * 1000)
            assert response.status == 200, body[:300]
    finally:
        conn.close()
    return samples


def bashgym_ingest(home: Path, points: int) -> dict[str, float]:
    with running_daemon(home) as daemon, daemon.client() as client:
        run = client.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()}).json()["record"]
        attempt = f"{run['run_id']}.a1"
        bodies = [
            json.dumps(
                {
                    "run_id": run["run_id"],
                    "attempt_id": attempt,
                    "points": [
                        {"metric": "train.loss", "step": b * BATCH + i, "value": 1.0 / (b * BATCH + i + 1)}
                        for i in range(BATCH)
                    ],
                }
            ).encode()
            for b in range(points // BATCH)
        ]
        headers = {"Content-Type": "application/json"}
        start = time.perf_counter()
        for body in bodies:
            client.post("/v1/projects/nightly/metrics", content=body, headers=headers).raise_for_status()
        elapsed = time.perf_counter() - start
        trend = timed_ms(client, "/v1/projects/nightly/trend", {"metric": "train.loss", "run": run["run_id"]}, 5)
        count = client.get("/v1/projects/nightly/trend", params={"metric": "train.loss", "run": run["run_id"]}).json()
        assert count["summary"]["count"] == points
    return {"points_per_s": points / elapsed, "trend_100k_ms_median": statistics.median(trend)}


def mlflow_ingest(root: Path, batch_points: int, single_points: int) -> dict[str, float]:
    import logging

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.create_experiment("bench", artifact_location=str(root / "artifacts"))
    run_id = client.create_run(experiment).info.run_id
    now = int(time.time() * 1000)
    start = time.perf_counter()
    for b in range(batch_points // BATCH):
        client.log_batch(
            run_id, metrics=[Metric("train.loss", 1.0 / (b * BATCH + i + 1), now, b * BATCH + i) for i in range(BATCH)]
        )
    batch_s = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(single_points):
        client.log_metric(run_id, "eval.loss", 1.0 / (i + 1), timestamp=now, step=i)
    single_s = time.perf_counter() - start
    return {"log_batch_points_per_s": batch_points / batch_s, "log_metric_points_per_s": single_points / single_s}


async def build_big_ledger(path: Path, runs: int, events: int) -> None:
    """Fill a ledger through its own write code, many records per transaction."""
    actor = Actor(actor_id="bench", correlation_id="cor-bench")
    methods = ("sft", "dpo", "grpo", "rlvr")
    async with await Ledger.open(path, synchronous="NORMAL") as ledger:

        def add_runs(tx: Tx, first: int, count: int) -> None:
            for i in range(first, first + count):
                spec = RunRegistration(
                    method=methods[i % 4], tracking_context=tracking_context(), source_run_id=f"src-{i}"
                )
                record, _, _ = register_run(tx, "default", spec)
                if i % 3 == 0:
                    transition_run(tx, "default", "nightly", record["run_id"], RunTransition(status="running"))
                    transition_run(tx, "default", "nightly", record["run_id"], RunTransition(status="completed"))

        for first in range(0, runs, 5_000):
            await ledger.write(actor, lambda tx, f=first: add_runs(tx, f, 5_000))

        def annotate(tx: Tx, count: int) -> None:
            for i in range(count):
                tx.append_event(
                    "annotation.added", workspace_id="default", project_id="nightly", payload={"text": f"note {i}"}
                )

        while ledger.last_cursor < events:
            await ledger.write(actor, lambda tx: annotate(tx, min(20_000, events - ledger.last_cursor)))


# The reads below measure the ledger, not the per-principal read limiter, which would refuse them past its burst.
UNLIMITED_READS = {"BASHGYM_READ_RATE_PER_MINUTE": "1000000", "BASHGYM_READ_RATE_BURST": "1000000"}


def big_ledger_reads(home: Path, events: int) -> dict[str, float]:
    with running_daemon(home, env=UNLIMITED_READS) as daemon, daemon.client() as client:
        context = timed_ms(client, "/v1/projects/nightly/context", {}, 30)
        runs = timed_ms(client, "/v1/projects/nightly/runs", {"status": "completed", "method": "sft", "limit": 50}, 50)
        last = events - 100
        pages = timed_ms(
            client,
            "/v1/projects/nightly/events",
            lambda: {"after_cursor": random.randint(0, last), "limit": 100},
            1_000,
        )
        sample = client.get("/v1/projects/nightly/events", params={"after_cursor": 1000, "limit": 100}).json()
        assert len(sample["events"]) == 100
    return {
        "context_ms_median": statistics.median(context),
        "runs_filtered_ms_median": statistics.median(runs),
        "cursor_page_ms_p50": percentile(pages, 0.50),
        "cursor_page_ms_p99": percentile(pages, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--single-points", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    started, start = time.perf_counter(), history.begin()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ours = bashgym_ingest(root / "ingest", args.points)
        print(f"bashgym ingestion: {ours['points_per_s']:,.0f} points/s", file=sys.stderr)
        try:
            peer = mlflow_ingest(root / "mlflow", args.points, args.single_points)
        except ImportError:
            peer = {}
            print(
                "MLflow is not installed here (make bench-peers runs this in .venv-bench); peer figures skipped",
                file=sys.stderr,
            )
        build_start = time.perf_counter()
        asyncio.run(build_big_ledger(root / "big" / "ledger.sqlite3", args.runs, args.events))
        print(
            f"built {args.runs:,} runs / {args.events:,} events in {time.perf_counter() - build_start:.0f} s",
            file=sys.stderr,
        )
        reads = big_ledger_reads(root / "big", args.events)
    result: dict[str, Any] = {
        "bashgym_ingest_points_per_s": round(ours["points_per_s"]),
        "trend_100k_points_ms_median": round(ours["trend_100k_ms_median"], 1),
        **{k: round(v, 2) for k, v in reads.items()},
        "runs": args.runs,
        "events": args.events,
        "points": args.points,
    }
    if peer:
        result["mlflow_log_batch_points_per_s"] = round(peer["log_batch_points_per_s"])
        result["mlflow_log_metric_points_per_s"] = round(peer["log_metric_points_per_s"])
        result["ratio_vs_log_batch"] = round(ours["points_per_s"] / peer["log_batch_points_per_s"], 1)
        result["ratio_vs_log_metric"] = round(ours["points_per_s"] / peer["log_metric_points_per_s"], 1)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))
    ms = functools.partial(history.Figure, unit="ms", better="lower")
    figures = {
        "ingest_points_per_s": history.Figure(
            result["bashgym_ingest_points_per_s"], unit="points/s", better="higher",
            anchor=result.get("mlflow_log_batch_points_per_s"),
            anchor_name="mlflow log_batch" if peer else None,
        ),
        **{name: ms(result[name]) for name in ("trend_100k_points_ms_median", *reads)},
    }  # fmt: skip
    history.record("ledger_ingest", figures, settings=vars(args), start=start)


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    main()
