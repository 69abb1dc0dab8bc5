"""Pause and stop requests arrive as signals and become flags; no heavy imports, so they install first."""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from typing import Any, Literal

TERM_PAUSES_ENV = "BASHGYM_TERM_PAUSES"  # "1": SIGTERM pauses (a Slurm job's batch script sets it)


@dataclass
class ControlFlags:
    """What was asked (`pause`, `stop`: set by a signal at any moment) and what training acted on at a step
    boundary (`acted_on`, set by ControlCallback): a run's outcome follows the latter, which every rank shares."""

    pause: bool = False
    stop: bool = False
    acted_on: Literal["pause", "stop"] | None = None
    # Under a scheduler (the Slurm lane, TERM_PAUSES_ENV), SIGTERM comes before a preemption, a requeue or the time
    # limit as well as a cancel: the trainer then keeps its checkpoint, and the scheduler's verdict says how the run
    # ended.
    term_pauses: bool = False

    def install(self) -> None:
        """SIGUSR1 asks to pause (checkpoint, then exit); SIGTERM asks to stop (status cancelled), or to pause
        where `term_pauses`."""
        signal.signal(signal.SIGUSR1, self._on_pause)
        signal.signal(signal.SIGTERM, self._on_pause if self.term_pauses else self._on_stop)

    def _on_pause(self, signum: int, frame: Any) -> None:
        self.pause = True

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stop = True


def end_with_parent(parent_pid: int) -> None:
    """End this process when `parent_pid`, its parent, ends (Linux: PR_SET_PDEATHSIG SIGKILL).

    A local evaluator is not re-attached after a daemon restart but run again, so it ends with the daemon rather
    than compete with its rerun; a training rank ends with its launcher, since torch starts every rank in a session
    of its own and a launcher killed outright would otherwise leave its ranks waiting on each other for good."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent was gone before the request above was made
        os._exit(1)
