"""Terminal-task attempts per second through the sandbox, against the peer in the same run: the same
gold commands and verifiers run as plain subprocesses with no isolation at all.

    python bench/sandbox_attempts.py [--tasks 44]

The sandbox's price is its isolation (namespaces, a read-only host remount, uid 65534, the decoy
watch); the ratio says what that costs per attempt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bashgym.trainers.environments.sandbox import probe_isolation, run_attempt
from bashgym.trainers.environments.terminal_tasks import TerminalTask, default_suite


def plain(task: TerminalTask) -> bool:
    """The peer: files, setup, command and verifier in a temporary directory, nothing else."""
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as private:
        for name, content in task.files.items():
            (Path(work) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(work) / name).write_text(content)
        for name, content in task.fixtures.items():
            (Path(private) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(private) / name).write_text(content)
        if task.setup:
            subprocess.run(["sh", "-c", task.setup], cwd=work, check=True)
        output = Path(private) / ".output"
        with output.open("wb") as out:
            subprocess.run(["bash", "-c", task.gold], cwd=work, stdout=out, timeout=task.timeout_s, check=False)
        env = {"PATH": os.environ["PATH"], "SANDBOX": work, "OUTPUT": str(output), "FIXTURES": private}
        return subprocess.run(["sh", "-c", task.verifier], cwd=private, env=env, check=False).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=44)
    args = parser.parse_args()
    tasks = default_suite().tasks[: args.tasks]
    isolation = probe_isolation()
    timings: dict[str, list[float]] = {"sandbox": [], "plain": []}
    for task in tasks:
        started = time.perf_counter()
        assert run_attempt(task, task.gold).passed, task.task_id
        timings["sandbox"].append(time.perf_counter() - started)
        started = time.perf_counter()
        assert plain(task), task.task_id
        timings["plain"].append(time.perf_counter() - started)
    print(f"isolation: {isolation.level} ({isolation.detail}); {len(tasks)} gold attempts each")
    for name, values in timings.items():
        median_ms, rate = statistics.median(values) * 1000, len(values) / sum(values)
        print(f"{name:8s} median {median_ms:7.1f} ms/attempt, {rate:6.1f} attempts/s")
    ratio = statistics.median(timings["sandbox"]) / statistics.median(timings["plain"])
    print(f"sandbox / plain (median): {ratio:.2f}x")


if __name__ == "__main__":
    main()
