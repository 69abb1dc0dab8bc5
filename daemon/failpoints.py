"""Test-only crash points: a named place in the daemon (or the CLI) where it SIGKILLs itself, so a crash
test kills the process at exactly that point instead of racing a timer. Armed by one setting,
BASHGYM_FAILPOINT; unset (the default) every point is a no-op."""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("bashgym.failpoints")


def reach(armed: str, point: str) -> None:
    """SIGKILL this process when `point` is among the armed points (comma-separated); otherwise nothing."""
    if point not in armed.split(","):
        return
    log.warning("Failpoint %s reached: killing process %d (BASHGYM_FAILPOINT is set; tests only)", point, os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)  # a real kill: no finally, no atexit, no flush
