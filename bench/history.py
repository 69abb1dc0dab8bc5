"""The benchmarks' memory: each run appends its figures to bench/results.jsonl, one JSON line, with the commit it
measured, the machine, how busy the machine was, and each figure's anchor (the peer's figure from the same run, as
MLflow's beside ours) so that `make bench-report` (bench/report.py) can print every figure's history and its ratio to
the previous commit's, and a regression shows the day it lands.

A line says what produced it: `benchmark` and its `settings` (the arguments that change a figure), `commit` (and
`dirty` when the tree had uncommitted changes: a figure of code that is in no commit), `machine` and `load` (the
1-minute load average before and after: a figure measured beside other work is not compared as if quiet).

`BASHGYM_BENCH_RESULTS` names another file (tests write to their own), or `off` to record nothing.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import platform
import sqlite3
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

RESULTS = Path(__file__).with_name("results.jsonl")
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    """One measured figure; `better` says which way is an improvement. `anchor` is the peer's figure for the same
    thing from the same run (`anchor_name` says whose), or None where no peer measured it."""

    value: float
    unit: str
    better: Literal["lower", "higher"]
    anchor: float | None = None
    anchor_name: str | None = None


def results_path() -> Path | None:
    """Where figures go: bench/results.jsonl, the file BASHGYM_BENCH_RESULTS names, or None for `off`."""
    chosen = os.environ.get("BASHGYM_BENCH_RESULTS", "")
    if chosen == "off":
        return None
    return Path(chosen) if chosen else RESULTS


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


@dataclass(frozen=True)
class Start:
    """What a benchmark measures, taken as it starts: the commit checked out then (a checkout during a long run must
    not relabel its figures) and the load before it."""

    commit: str | None
    dirty: bool
    load: float


def begin() -> Start:
    head, dirty = commit()
    return Start(head, dirty, load_average())


def commit() -> tuple[str | None, bool]:
    """The commit checked out in this repository, and whether the tree differs from it (tracked files)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, False
    return head, bool(changed)


def machine() -> dict[str, Any]:
    """What the figures were measured on: enough to tell two machines apart, nothing that names a person."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "memory_gib": memory_gib,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }


def record(
    benchmark: str,
    figures: dict[str, Figure],
    *,
    settings: dict[str, Any],
    start: Start,
    path: Path | None = None,
) -> dict[str, Any] | None:
    """Append one run's figures (see the module's docstring); answer the line written, None when recording is off."""
    target = path or results_path()
    if target is None:
        return None
    line = {
        "benchmark": benchmark,
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": start.commit,
        "dirty": start.dirty,
        "machine": machine(),
        "load": {"before": start.load, "after": load_average()},
        "settings": settings,
        "figures": {name: asdict(figure) for name, figure in figures.items()},
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # two benchmarks finishing at once each write whole lines
        handle.write(json.dumps(line, sort_keys=True) + "\n")
    return line


def read(path: Path) -> list[dict[str, Any]]:
    """Every line of a results file, oldest first; a line that is not JSON (a run cut mid-write) is skipped."""
    if not path.is_file():
        return []
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            found = json.loads(raw)
        except ValueError:
            continue
        if isinstance(found, dict) and isinstance(found.get("figures"), dict):
            lines.append(found)
    return lines
