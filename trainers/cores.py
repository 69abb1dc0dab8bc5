"""The torch CPU threads of a trainer or evaluator, set before torch loads (it reads OMP_NUM_THREADS once).

Runs sharing a host's cores must split them: torch gives every process a thread per core, and two tiny runs
side by side on 2 cores took 82 ms a step instead of 17, each waiting on the other's threads. The same holds for
other work on the host: the demo beside a load of 4-8 on 2 cores trained on 2 threads for 39 minutes. Without an
explicit number, a run takes the cores its affinity allows less those the load it sees at start keeps busy.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, MutableMapping

THREADS_ENV = "OMP_NUM_THREADS"
LOADAVG = "/proc/loadavg"
LOAD_SAMPLES = 5  # reads of the runnable count, LOAD_SAMPLE_S apart: one read catches a burst
LOAD_SAMPLE_S = 0.02


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, help="torch CPU threads (the local daemon's share of its host's cores)")
    parser.add_argument(
        "--share-of",
        type=int,
        metavar="N",
        help="take this host's cores split N ways (an SSH device with N slots), unless its OMP_NUM_THREADS is set",
    )


def limit_threads(
    threads: int | None,
    share_of: int | None,
    environ: MutableMapping[str, str],
    cpu_count: int | None,
    *,
    busy: Callable[[], float] | None = None,
) -> None:
    """--threads as given; else, where the host's own OMP_NUM_THREADS does not already decide (an operator's limit
    wins), the cores the load leaves free, at most cores // N with --share-of N. What this process starts
    (verifier sandboxes) inherits the limit. `busy` says how many cores other work keeps busy (busy_cores)."""
    if threads:
        environ[THREADS_ENV] = str(threads)
        return
    if environ.get(THREADS_ENV):
        return
    cores = cpu_count or 1
    share = cores // share_of if share_of and share_of > 1 else cores
    environ[THREADS_ENV] = str(min(max(1, share), threads_for_load(cores, (busy or busy_cores)())))


def threads_for_load(cores: int, busy: float) -> int:
    """The cores that `busy` cores of other work leave free, rounded to the nearest, at least 1."""
    return max(1, min(cores, math.floor(cores - busy + 0.5)))


def available_cores() -> int:
    """The cores this process may run on: its affinity (a container's or taskset's share), else the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on macOS or Windows
        return os.cpu_count() or 1


def busy_cores(*, sleep: Callable[[float], None] = time.sleep) -> float:
    """How many cores other work keeps busy now: the 1-minute load, unless fewer tasks are runnable right now.

    The 1-minute load lags: the demo's own evaluation, ended a moment before its training starts, still adds
    about 1.5 to it. The runnable count of /proc/loadavg (this process's own one taken off) is what runs now;
    the smaller of the two errs towards more threads only when the load has just gone."""
    try:
        minute = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: assume the cores are free
        return 0.0
    now = _runnable_now(sleep)
    return minute if now is None else min(minute, now)


def _runnable_now(sleep: Callable[[float], None]) -> float | None:
    """The mean count of other runnable tasks over a few reads of /proc/loadavg; None without it."""
    counts = []
    for n in range(LOAD_SAMPLES):
        if n:
            sleep(LOAD_SAMPLE_S)
        try:
            with open(LOADAVG) as handle:
                running = int(handle.read().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):  # not Linux's /proc/loadavg: the 1-minute load alone
            return None
        counts.append(max(0, running - 1))  # this process, reading, is one of them
    return sum(counts) / len(counts)
