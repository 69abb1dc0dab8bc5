"""Test-only crash points of a trainer: a named place where it SIGKILLs itself. The daemon's own
module lives in daemon/ (trainers import nothing from it); a trainer is armed from the
BASHGYM_FAILPOINT its supervisor passed on in its environment, once, at start.

`name` fires the first time the point is reached, `name@N` the N-th time; in a scaled-out run `name:rankR`
(or `name:rankR@N`) arms it in global rank R only, so a test can kill one rank of several."""

from __future__ import annotations

import os
import signal
import sys

_armed: dict[str, int] = {}  # point -> reaches left before the kill


def arm(spec: str, rank: int = 0) -> None:
    """Arm the trainer points named in `spec` (comma-separated, as BASHGYM_FAILPOINT holds them)."""
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, count = part.partition("@")
        name, _, only = name.partition(":rank")
        if name.startswith("trainer.") and (not only or int(only) == rank):
            _armed[name] = int(count or 1)


def reach(point: str) -> None:
    """SIGKILL this process when `point` is armed and reached its count; otherwise nothing."""
    if point not in _armed:
        return
    _armed[point] -= 1
    if _armed[point] > 0:
        return
    print(f"Failpoint {point} reached: killing process {os.getpid()} (tests only)", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # a real kill: nothing after it runs
