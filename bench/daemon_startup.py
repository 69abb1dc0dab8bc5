"""Time from exec of `bashgym daemon` to a healthy /v1/health, and the daemon's idle RSS.

Targets (issue 2): under 1.5 s to healthy and under 120 MB idle RSS on the 2-core machine.
Run: python bench/daemon_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import history
import httpx

BASHGYM = [sys.executable, "-c", "from bashgym.cli.main import main; main()"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_start(home: Path) -> tuple[float, float, float]:
    env = {**os.environ, "BASHGYM_HOME": str(home)}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*BASHGYM, "daemon", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split("listening on ", 1)[1].split()[0]
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).json()["status"] == "ok":
                    break
            except httpx.TransportError:
                time.sleep(0.005)
        healthy_s = time.perf_counter() - started
        time.sleep(2)  # idle
        rss = rss_mb(proc.pid)
        stop_started = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        stop_s = time.perf_counter() - stop_started
        return healthy_s, rss, stop_s
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stdout:
            proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    start = history.begin()
    runs = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            # The first start on a home also creates the ledger and the admin token; measure both kinds.
            home = Path(tmp)
            first = one_start(home)
            warm = one_start(home)
            runs.append((first, warm))
            print(
                f"run {i}: first start {first[0]:.3f} s, restart {warm[0]:.3f} s, idle RSS {warm[1]:.1f} MB, "
                f"SIGTERM->exit {warm[2]:.3f} s",
                file=sys.stderr,
            )
    result = {
        "first_start_to_healthy_s_median": round(statistics.median(r[0][0] for r in runs), 3),
        "restart_to_healthy_s_median": round(statistics.median(r[1][0] for r in runs), 3),
        "idle_rss_mb_median": round(statistics.median(r[1][1] for r in runs), 1),
        "sigterm_to_exit_s_median": round(statistics.median(r[1][2] for r in runs), 3),
        "targets": {"to_healthy_s": 1.5, "idle_rss_mb": 120},
    }
    print(json.dumps(result))
    figures = {
        name: history.Figure(result[name], unit="MB" if "rss" in name else "s", better="lower")
        for name in ("first_start_to_healthy_s_median", "restart_to_healthy_s_median", "idle_rss_mb_median",
                     "sigterm_to_exit_s_median")
    }  # fmt: skip
    history.record("daemon_startup", figures, settings=vars(args), start=start)


if __name__ == "__main__":
    main()
