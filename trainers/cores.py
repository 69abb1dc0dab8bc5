"""The torch CPU threads of a trainer or evaluator, set before torch loads (it reads OMP_NUM_THREADS once).

Runs sharing a host's cores must split them: torch gives every process a thread per core, and two tiny runs
side by side on 2 cores took 82 ms a step instead of 17, each waiting on the other's threads.
"""

from __future__ import annotations

import argparse
from collections.abc import MutableMapping

THREADS_ENV = "OMP_NUM_THREADS"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, help="torch CPU threads (the local daemon's share of its host's cores)")
    parser.add_argument(
        "--share-of",
        type=int,
        metavar="N",
        help="take this host's cores split N ways (an SSH device with N slots), unless its OMP_NUM_THREADS is set",
    )


def limit_threads(
    threads: int | None, share_of: int | None, environ: MutableMapping[str, str], cpu_count: int | None
) -> None:
    """--threads as given; else --share-of N: cores // N, where the host's own OMP_NUM_THREADS does not already
    decide (an operator's limit wins). What this process starts (verifier sandboxes) inherits the limit."""
    if threads:
        environ[THREADS_ENV] = str(threads)
    elif share_of and share_of > 1 and not environ.get(THREADS_ENV):
        environ[THREADS_ENV] = str(max(1, (cpu_count or 1) // share_of))
