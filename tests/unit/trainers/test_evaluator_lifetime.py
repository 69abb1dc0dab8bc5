"""A local evaluator ends with the daemon that started it: evaluations are run again after a restart, never
re-attached, so an orphan would only compete with its own rerun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = (
    "import os, time; from bashgym.trainers.signals import end_with_parent; "
    "end_with_parent(os.getppid()); print('armed', flush=True); time.sleep(120)"
)
PARENT = (
    "import subprocess, sys, time; "
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdout=subprocess.PIPE, text=True); "
    "assert child.stdout.readline().strip() == 'armed'; print(child.pid, flush=True); time.sleep(120)"
)


def is_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_an_evaluator_dies_with_its_daemon() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    evaluator = int(parent.stdout.readline())
    assert is_alive(evaluator)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while is_alive(evaluator) and time.monotonic() < deadline:
        time.sleep(0.05)
    parent.stdout.close()
    alive = is_alive(evaluator)
    if alive:
        os.kill(evaluator, signal.SIGKILL)
    assert not alive, "the evaluator outlived the daemon that started it"
