"""Web view benchmark: the runs table over 100,000 runs and a run's curve of 100,000 points, server time, beside
MLflow's UI endpoints over the same data where MLflow is installed (make bench-peers' .venv-bench).

Measures (issue 42 targets in brackets), each the median of its requests over one keep-alive connection:
  - the runs table's data: a page of 50 runs, first, deep (after 50,000) and filtered   [< 50 ms]
  - the project page (HTML: health and the first runs page)
  - the curve's data: 100,000 points thinned to a 1,000-pixel chart, and a zoomed range at full resolution
  - the run page (HTML)
  - the runs table filtered in the search grammar and sorted by a metric (HTML, issue 54):
    `metrics.val.loss < 0.5 and status = 'completed'` by `metrics.val.loss asc`, every run holding one val.loss
  - an evaluation's page at 88 tasks x 4 samples (HTML: families, tasks and every sample, read from its attempts file)
  - in headless Chromium (where Debian's chromium and chromium-driver are installed): the run page of 100,000 points
    from navigation to its chart drawn [< 1 s], and a live run's new point from its ingestion to the chart redrawn
    with it [the issue asks 2 s], both on the page's own clock (ui.js marks each draw)
  MLflow peer: `runs/search` (max_results 50; plain, and with the same filter and order as ours:
  ``metrics.`val.loss` < 0.5 and attributes.status = 'FINISHED'`` by ``metrics.`val.loss` ASC``) and
  `metrics/get-history-bulk-interval` (max_results 1,000), the calls its UI makes for a runs table and a chart,
  against `mlflow server` on its SQLite store (its runs made one by one: --mlflow-runs of them, each with a val.loss
  and a third FINISHED, as ours).

Each run's figures are appended to bench/results.jsonl (bench/history.py; `make bench-report` prints their history).

Run: python bench/ui_bench.py [--runs 100000 --points 100000] (MLflow's share: make bench-env first, then
.venv-bench/bin/python bench/ui_bench.py; building MLflow's runs one by one takes minutes, --mlflow-runs scales it)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import history
from bashgym.client.specs import Actor, EvalResultSpec, MetricBatch, MetricPoint
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.evidence.evaluations import terminal_suite_spec
from bashgym.ledger.store import Ledger
from bashgym.trainers.environments.terminal_tasks import default_suite
from ledger_ingest import build_big_ledger, timed_ms
from runs_table_bench import add_losses

from tests.support.helpers import eventually, running_daemon

UNLIMITED_READS = {"BASHGYM_READ_RATE_PER_MINUTE": "1000000", "BASHGYM_READ_RATE_BURST": "1000000"}
SORT_METRIC = "val.loss"  # one point a run (train.loss is the long curve of one run)
FILTERED_SORTED = {
    "filter": f"metrics.{SORT_METRIC} < 0.5 and status = 'completed'",
    "sort": f"metrics.{SORT_METRIC} asc",
}
SAMPLES_PER_TASK = 4


async def add_evaluation(path: Path, artifacts: Path) -> str:
    """A result of the 88-task suite with 4 samples a task and its attempts file in the daemon's blob store, written
    as the evaluator writes one (a benchmark's fixture in a throwaway ledger: no model was evaluated)."""
    suite = default_suite()
    lines, per_task = [], {}
    for n, task in enumerate(suite.tasks):
        passes = n % 5
        share = min(passes, SAMPLES_PER_TASK) / SAMPLES_PER_TASK
        per_task[task.task_id] = {"family": task.task_family, "pass@1": share}
        for index in range(SAMPLES_PER_TASK):
            passed = index < passes
            attempt = {"task_id": task.task_id, "task_family": task.task_family, "attempt_index": index,
                       "command": task.gold if passed else f"grep -c line data.txt | tee out.txt # try {index}",
                       "passed": passed, "reward": float(passed), "verifier_status": "ok", "timed_out": False,
                       "duration_s": 0.12, "exit_code": 0 if passed else 1, "stdout": "3\n" * 40,
                       "stderr_tail": "" if passed else "grep: data.txt: No such file or directory\n",
                       "isolation": "namespaces", "tamper_reasons": [], "unsafe_actions": [],
                       "unsafe_action_count": 0, "safety_observed": "syscalls", "split": "train"}  # fmt: skip
            lines.append(json.dumps(attempt))
    written = path.parent / "attempts.jsonl"
    written.write_text("".join(line + "\n" for line in lines))
    digest, _ = await BlobStore(artifacts).put_file(written)
    actor = Actor(actor_id="bench")
    async with await Ledger.open(path, synchronous="NORMAL") as ledger:
        await ledger.register_eval_suite(actor, "default", "nightly", terminal_suite_spec(suite))
        details = {"per_task": per_task, "attempts_sha256": digest}
        spec = EvalResultSpec(
            suite_id=suite.suite_id, metrics={"pass@1": 0.4}, sample_count=len(lines), details=details
        )
        made = await ledger.record_eval_result(actor, "default", "nightly", spec, provenance="measured")
        return str(made.record["result_id"])


async def add_points(path: Path, points: int) -> str:
    """A run of the big ledger gets `points` points of train.loss through the ledger's own write code."""
    async with await Ledger.open(path, synchronous="NORMAL") as ledger:
        run_id = str((await ledger.runs_page("default", "nightly", filters={}, limit=1))["runs"][0]["run_id"])
        actor = Actor(actor_id="bench")
        for first in range(0, points, 10_000):
            batch = MetricBatch(
                run_id=run_id,
                attempt_id=f"{run_id}.a1",
                points=[
                    MetricPoint(
                        metric="train.loss",
                        step=s,
                        value=1.0 / (s + 1) + (0.5 if s % 997 == 0 else 0.0),
                        time=1_767_225_600.0 + s * 0.5,
                    )
                    for s in range(first, min(points, first + 10_000))
                ],
            )
            await ledger.ingest_metrics(actor, "default", "nightly", batch)
        return run_id


def bashgym_reads(home: Path, run_id: str, deep_cursor: str, result_id: str) -> dict[str, float]:
    with running_daemon(home, env=UNLIMITED_READS) as daemon, daemon.client() as client:
        link = client.post("/v1/ui/links").json()["url"]
        with httpx.Client(follow_redirects=False) as browser:
            signed = browser.get(link)
            cookie = f"bashgym_ui={signed.cookies['bashgym_ui']}"  # the session's (a sign-in sets two cookies)
        series = f"/ui/data/p/nightly/runs/{run_id}/series"
        zoomed = {"metric": "train.loss", "points": 1000, "lo": 40_000, "hi": 41_999}
        with httpx.Client(base_url=daemon.url, headers={"Cookie": cookie}) as session:
            figures = {
                "project_page_ms": timed_ms(session, "/ui/p/nightly", {}, 20),
                "project_page_deep_ms": timed_ms(session, "/ui/p/nightly", {"after": deep_cursor}, 20),
                "project_page_filtered_ms": timed_ms(
                    session, "/ui/p/nightly", {"status": "completed", "method": "sft"}, 20
                ),
                "series_100k_to_1000px_ms": timed_ms(session, series, {"metric": "train.loss", "points": 1000}, 20),
                "series_zoomed_2000_points_ms": timed_ms(session, series, zoomed, 20),
                "run_page_ms": timed_ms(session, f"/ui/p/nightly/runs/{run_id}", {}, 10),
                "runs_page_filtered_sorted_ms": timed_ms(session, "/ui/p/nightly", FILTERED_SORTED, 10),
                "evaluation_page_88x4_ms": timed_ms(session, f"/ui/p/nightly/evaluations/{result_id}", {}, 10),
            }
            sorted_page = session.get("/ui/p/nightly", params=FILTERED_SORTED).text
            assert "invalid" not in sorted_page.lower() and sorted_page.count('<a href="/ui/p/nightly/runs/') >= 50
            evaluation = session.get(f"/ui/p/nightly/evaluations/{result_id}").text
            assert f"{SAMPLES_PER_TASK * 88} samples from the evaluator" in evaluation, evaluation[-500:]
        medians = {name: statistics.median(samples) for name, samples in figures.items()}
        medians.update(browser_draws(daemon, link_for=lambda: client.post("/v1/ui/links").json()["url"], run_id=run_id))
    return medians


def browser_draws(daemon: Any, link_for: Any, run_id: str, repeats: int = 5) -> dict[str, float]:
    """Chromium's own times, read from the page's performance marks: the 100,000-point run page from navigation to
    its chart drawn, and a live run's point from the moment it is sent to the chart redrawn with it."""
    chromium, driver_path = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
    except ImportError:
        chromium = None
    if chromium is None or driver_path is None:
        print("no selenium, chromium or chromedriver here: the browser's figures are skipped", file=sys.stderr)
        return {}
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    drawn = (
        "return performance.getEntriesByName('bashgym-chart-drawn')"
        ".map(m => [performance.timeOrigin + m.startTime, m.startTime])"
    )
    try:
        driver.get(link_for())
        page_ms = []
        for _ in range(repeats):
            driver.get(f"{daemon.url}/ui/p/nightly/runs/{run_id}")
            page_ms.append(eventually("the chart drawn", lambda: driver.execute_script(drawn), every_s=0.02)[0][1])
        live_ms = []
        with daemon.client() as client:
            live = client.post("/v1/runs", json={"method": "sft", "tracking_context": live_context()}).json()
            live_id = live["record"]["run_id"]
            send_points(client, live_id, range(0, 10))
            client.post(f"/v1/projects/nightly/runs/{live_id}/transitions", json={"status": "running"})
            driver.get(f"{daemon.url}/ui/p/nightly/runs/{live_id}")
            eventually("the live chart drawn", lambda: driver.execute_script(drawn), every_s=0.02)
            time.sleep(1.0)  # the page's event stream is open
            for i in range(repeats):
                drawn_before = len(driver.execute_script(drawn))
                sent_ms = time.time() * 1000
                send_points(client, live_id, range(10 + i, 11 + i))
                marks = eventually("the new point drawn", functools.partial(drawn_past, driver, drawn, drawn_before))
                live_ms.append(marks[-1][0] - sent_ms)
                time.sleep(0.5)
    finally:
        driver.quit()
    return {
        "browser_run_page_drawn_ms": statistics.median(page_ms),
        "browser_live_point_drawn_ms": statistics.median(live_ms),
    }


def drawn_past(driver: Any, script: str, count: int) -> list[Any] | None:
    """The page's draw marks once there are more than `count` of them."""
    marks = list(driver.execute_script(script))
    return marks if len(marks) > count else None


def live_context() -> dict[str, Any]:
    from tests.support.factories import tracking_context

    return tracking_context(project_id="nightly")


def send_points(client: httpx.Client, run_id: str, steps: range) -> None:
    points = [{"metric": "train.loss", "step": s, "value": 1.0 / (s + 1), "time": time.time()} for s in steps]
    body = {"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": points}
    client.post("/v1/projects/nightly/metrics", json=body).raise_for_status()


def runs_page_query_ms(path: Path) -> tuple[dict[str, float], str]:
    """The runs table's query alone (the ledger, no HTTP), first page, deep page and filtered; and the deep cursor."""

    async def measure() -> tuple[dict[str, float], str]:
        async with await Ledger.open(path, synchronous="NORMAL") as ledger:
            first = await ledger.runs_page("default", "nightly", filters={}, limit=50)
            cursor = first["next"]
            for _ in range(1000):  # 50,000 runs deep, or the last page of a smaller ledger
                page = await ledger.runs_page("default", "nightly", filters={}, after=tuple(cursor), limit=50)
                if page["next"] is None:
                    break
                cursor = page["next"]
            out = {}
            for name, kwargs in (
                ("runs_page_first_ms", {"filters": {}}),
                ("runs_page_deep_ms", {"filters": {}, "after": tuple(cursor)}),
                ("runs_page_filtered_ms", {"filters": {"status": "completed", "method": "sft"}}),
            ):
                samples = []
                for _ in range(30):
                    start = time.perf_counter()
                    await ledger.runs_page("default", "nightly", limit=50, **kwargs)
                    samples.append((time.perf_counter() - start) * 1000)
                out[name] = statistics.median(samples)
            return out, "|".join(cursor)

    return asyncio.run(measure())


def mlflow_reads(root: Path, runs: int, points: int) -> dict[str, float] | None:
    try:
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient
    except ImportError:
        print("MLflow is not installed here (.venv-bench has it): its figures are skipped", file=sys.stderr)
        return None
    store = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=store)
    experiment = client.create_experiment("bench", artifact_location=str(root / "artifacts"))
    run_ids = [client.create_run(experiment).info.run_id for _ in range(runs)]
    now = int(time.time() * 1000)
    for i, made in enumerate(run_ids):  # as ours: one val.loss a run, every third run finished
        client.log_batch(made, metrics=[Metric(SORT_METRIC, (i * 7919 % 1000) / 1000, now, 0)])
        if i % 3 == 0:
            client.set_terminated(made, "FINISHED")
    for first in range(0, points, 1000):
        client.log_batch(
            run_ids[0],
            metrics=[Metric("train.loss", 1.0 / (s + 1), now, s) for s in range(first, min(points, first + 1000))],
        )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store, "--host", "127.0.0.1", "--port",
         str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(120):
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/health")
                break
            except OSError:
                time.sleep(0.5)
        search = timed_ms_post(port, "/ajax-api/2.0/mlflow/runs/search",
                               {"experiment_ids": [experiment], "max_results": 50}, 20)  # fmt: skip
        filtered = {"experiment_ids": [experiment], "max_results": 50,
                    "filter": f"metrics.`{SORT_METRIC}` < 0.5 and attributes.status = 'FINISHED'",
                    "order_by": [f"metrics.`{SORT_METRIC}` ASC"]}  # fmt: skip
        search_filtered = timed_ms_post(port, "/ajax-api/2.0/mlflow/runs/search", filtered, 10)
        interval = {"run_ids": run_ids[0], "metric_key": "train.loss", "max_results": 1000}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as peer:
            history = timed_ms(peer, "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval", interval, 20)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {
        "mlflow_runs_search_ms": statistics.median(search),
        "mlflow_runs_search_filtered_sorted_ms": statistics.median(search_filtered),
        "mlflow_history_interval_ms": statistics.median(history),
    }


def timed_ms_post(port: int, path: str, body: dict[str, Any], n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    samples = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            samples.append((time.perf_counter() - start) * 1000)
            assert response.status == 200, data[:300]
    finally:
        conn.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--mlflow-runs", type=int, default=10_000, help="MLflow creates runs one by one: minutes")
    args = parser.parse_args()
    started, start = time.perf_counter(), history.begin()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ledger_path = root / "big" / "ledger.sqlite3"
        asyncio.run(build_big_ledger(ledger_path, args.runs, 1_000))
        asyncio.run(add_losses(ledger_path, SORT_METRIC))
        run_id = asyncio.run(add_points(ledger_path, args.points))
        result_id = asyncio.run(add_evaluation(ledger_path, root / "big" / "artifacts"))
        query, deep = runs_page_query_ms(ledger_path)
        reads = bashgym_reads(root / "big", run_id, deep, result_id)
        peer = mlflow_reads(root / "mlflow", args.mlflow_runs, args.points)
        shutil.rmtree(root / "mlflow", ignore_errors=True)
    result: dict[str, Any] = {
        **{k: round(v, 2) for k, v in {**query, **reads}.items()},
        "runs": args.runs,
        "points": args.points,
    }
    if peer:
        result.update({k: round(v, 2) for k, v in peer.items()})
        result["mlflow_runs"] = args.mlflow_runs
        # Both over HTTP: our whole project page (health and the first 50 runs) against MLflow's search of 50 runs.
        page_ms = reads["project_page_ms"]
        result["ratio_project_page_vs_mlflow_search"] = round(peer["mlflow_runs_search_ms"] / page_ms, 1)
        result["ratio_series_vs_mlflow_interval"] = round(
            peer["mlflow_history_interval_ms"] / reads["series_100k_to_1000px_ms"], 1
        )
        result["ratio_filtered_sorted_vs_mlflow"] = round(
            peer["mlflow_runs_search_filtered_sorted_ms"] / reads["runs_page_filtered_sorted_ms"], 1
        )
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))
    remember(result, settings=vars(args), start=start)


def remember(result: dict[str, Any], *, settings: dict[str, Any], start: history.Start) -> None:
    """The figures into bench/results.jsonl, each HTTP one beside MLflow's call for the same view where it ran."""
    anchors = {
        "project_page_ms": "mlflow_runs_search_ms",
        "runs_page_filtered_sorted_ms": "mlflow_runs_search_filtered_sorted_ms",
        "series_100k_to_1000px_ms": "mlflow_history_interval_ms",
    }
    figures = {
        name: history.Figure(
            value=float(value),
            unit="ms",
            better="lower",
            anchor=result.get(anchors.get(name, "")),
            anchor_name="mlflow" if anchors.get(name) in result else None,
        )
        for name, value in result.items()
        if name.endswith("_ms") and not name.startswith("mlflow_")
    }
    history.record("ui_bench", figures, settings=settings, start=start)


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    main()
