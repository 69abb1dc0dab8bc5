"""Tracking overhead on a training step: bashgym.track's log_metrics against no tracking and MLflow's log_metric.

One metric (`loss`) logged at every step of a training loop, the worst case (a Trainer logs every
`logging_steps`). Each arm runs beside its own baseline, in rounds that alternate the two (the machine is shared and
its speed drifts). Two figures: the cost per step, the time inside the log call plus the CPU the arm's other threads
(bashgym's sender) spent, over the untracked step [issue 53: <= 1 %]; and the difference of mean wall step times,
which on the shared 2-core machine is noisier than 1 % (a control arm that logs nothing differs by a few %).

  - bashgym: `run.log_metrics({"loss": v}, step=s)` against a real daemon on loopback (started here).
  - mlflow: `mlflow.log_metric("loss", v, step=s)` into a SQLite store (MLflow's default without a server), run in
    .venv-bench (MLflow is not a dependency of .venv) as a subprocess of this script.

Workloads: `torch`, a small MLP's forward, backward and SGD step (in .venv only: .venv-bench has no torch), and
`numpy`, the same MLP's forward and backward written in numpy, which every arm runs, MLflow's included: compare
arms on the numpy rows. One BLAS/torch thread everywhere.

Run: .venv/bin/python bench/track_overhead.py [--steps 400 --rounds 6]   (about a minute; needs .venv-bench)
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
Step = Callable[[], float]  # one training step; returns its loss
Log = Callable[[int, float], None]  # logs the loss at a step


def numpy_step(batch: int = 64, width: int = 512) -> Step:
    """A 3-layer MLP (256 -> width -> width/2 -> 10), forward, backward and SGD update, in numpy."""
    rng = np.random.default_rng(0)
    w = [
        rng.standard_normal(s).astype(np.float32) * 0.05 for s in ((256, width), (width, width // 2), (width // 2, 10))
    ]
    x = rng.standard_normal((batch, 256)).astype(np.float32)
    y = rng.standard_normal((batch, 10)).astype(np.float32)

    def step() -> float:
        h1 = np.maximum(x @ w[0], 0)
        h2 = np.maximum(h1 @ w[1], 0)
        out = h2 @ w[2]
        grad = 2 * (out - y) / batch
        g2 = h2.T @ grad
        d2 = (grad @ w[2].T) * (h2 > 0)
        g1 = h1.T @ d2
        d1 = (d2 @ w[1].T) * (h1 > 0)
        g0 = x.T @ d1
        for weight, g in zip(w, (g0, g1, g2), strict=True):
            weight -= 0.01 * g
        return float(((out - y) ** 2).mean())

    return step


def torch_step(batch: int = 64, width: int = 512) -> Step:
    """The same MLP in torch: forward, backward, SGD step."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width // 2),
        torch.nn.ReLU(),
        torch.nn.Linear(width // 2, 10),
    )
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, 256), torch.randn(batch, 10)

    def step() -> float:
        optimiser.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimiser.step()
        return float(loss.item())

    return step


def loop(step: Step, log: Log | None, steps: int, first: int) -> tuple[list[float], list[float], float]:
    """Per-step wall times (s) of `steps` steps, the seconds of each call of `log`, and the CPU seconds the
    process's other threads (bashgym's sender) used meanwhile."""
    times: list[float] = []
    in_log: list[float] = []
    cpu, own_cpu = time.process_time(), time.thread_time()
    for s in range(first, first + steps):
        start = time.perf_counter()
        loss = step()
        if log is not None:
            before = time.perf_counter()
            log(s, loss)
            in_log.append(time.perf_counter() - before)
        times.append(time.perf_counter() - start)
    return times, in_log, (time.process_time() - cpu) - (time.thread_time() - own_cpu)


def side_by_side(name: str, workload: str, step: Step, log: Log, *, steps: int, rounds: int) -> dict[str, Any]:
    """The arm and its baseline in alternating rounds (after a warm-up of each), which goes first swapped each
    round: on this machine the second of two back-to-back loops runs a few % slower, tracked or not."""
    loop(step, None, steps // 4, 0)
    loop(step, log, steps // 4, 0)
    base: list[float] = []
    arm: list[float] = []
    in_log: list[float] = []
    base_cpu = arm_cpu = 0.0
    for r in range(rounds):
        for tracked in (False, True) if r % 2 == 0 else (True, False):
            times, spent, other_cpu = loop(step, log if tracked else None, steps, (r + 1) * steps)
            if tracked:
                arm, in_log, arm_cpu = arm + times, in_log + spent, arm_cpu + other_cpu
            else:
                base, base_cpu = base + times, base_cpu + other_cpu
    base_mean, arm_mean = statistics.fmean(base), statistics.fmean(arm)
    background = max(arm_cpu - base_cpu, 0.0) / len(arm)
    return {
        "arm": name,
        "workload": workload,
        "steps": len(arm),
        "step_ms_untracked": round(base_mean * 1e3, 3),
        "step_ms_tracked": round(arm_mean * 1e3, 3),
        "median_step_ms_untracked": round(statistics.median(base) * 1e3, 3),
        "median_step_ms_tracked": round(statistics.median(arm) * 1e3, 3),
        "wall_overhead_pct": round((arm_mean / base_mean - 1) * 100, 2),
        "log_call_us": round(statistics.fmean(in_log) * 1e6, 1),
        "median_log_call_us": round(statistics.median(in_log) * 1e6, 1),
        "background_cpu_us": round(background * 1e6, 1),
        "cost_pct_of_step": round((statistics.fmean(in_log) + background) / base_mean * 100, 3),
        # The same with the median call and step: the mean counts the preemptions of a loaded machine that land in
        # the call's few microseconds.
        "median_cost_pct_of_step": round((statistics.median(in_log) + background) / statistics.median(base) * 100, 3),
    }


def mlflow_arm(workload: str, steps: int, rounds: int) -> dict[str, Any]:
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as root:
        mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
        with mlflow.start_run():
            result = side_by_side(
                "mlflow",
                workload,
                numpy_step(),
                lambda s, v: mlflow.log_metric("loss", v, step=s),
                steps=steps,
                rounds=rounds,
            )
    return {**result, "version": mlflow.__version__}


def bashgym_arms(workloads: dict[str, Step], steps: int, rounds: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT))
    from bashgym import track

    from tests.support.factories import sft_data
    from tests.support.helpers import register_versions, running_daemon

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text("{}")
        with running_daemon(root / "home") as daemon:
            with daemon.client() as admin:
                admin.post("/v1/projects", json={"project_id": "bench", "name": "bench"}).raise_for_status()
            register_versions(daemon, "bench", root / "model", sft_data(root, rows=4))
            os.environ["BASHGYM_HOME"] = str(root / "user")
            for workload, step in workloads.items():
                with track.start_run(
                    project="bench",
                    model_version="tiny-v1",
                    dataset_version="rows-v1",
                    api=daemon.url,
                    token=daemon.token,
                ) as run:
                    log: Log = lambda s, v: run.log_metrics({"loss": v}, step=s)  # noqa: E731
                    results.append(side_by_side("bashgym", workload, step, log, steps=steps, rounds=rounds))
                with daemon.client() as admin:
                    trend = admin.get("/v1/projects/bench/trend", params={"metric": "loss", "run": run.run_id}).json()
                results[-1]["points_recorded"] = len(trend["steps"])
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| arm | workload | step, untracked | step, tracked | wall difference | log call (median) | background CPU "
        "| cost per step (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['arm']} | {r['workload']} | {r['step_ms_untracked']:.2f} ms | {r['step_ms_tracked']:.2f} ms | "
            f"{r['wall_overhead_pct']:+.2f} % | {r['log_call_us']:.0f} us ({r['median_log_call_us']:.0f} us) | "
            f"{r['background_cpu_us']:.0f} us | "
            f"{r['cost_pct_of_step']:.2f} % ({r['median_cost_pct_of_step']:.2f} %) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="steps per round and arm")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--bench-python", default=str(ROOT / ".venv-bench" / "bin" / "python"))
    parser.add_argument("--arm", choices=["all", "mlflow"], default="all", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm == "mlflow":
        print(json.dumps(mlflow_arm("numpy", args.steps, args.rounds)))
        return
    results = bashgym_arms({"numpy": numpy_step(), "torch": torch_step()}, args.steps, args.rounds)
    peer = subprocess.run(
        [args.bench_python, __file__, "--arm", "mlflow", "--steps", str(args.steps), "--rounds", str(args.rounds)],
        capture_output=True,
        text=True,
        check=True,
    )
    results.append(json.loads(peer.stdout.splitlines()[-1]))
    for result in results:
        print(json.dumps(result))
    print(table(results))


if __name__ == "__main__":
    main()
