"""The daemon's environment holds its secrets: no process of its user reads /proc/PID/environ (it is not dumpable)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PR_GET_DUMPABLE = 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc are Linux's")
def test_keep_environment_private_makes_the_process_not_dumpable() -> None:
    code = (
        "import ctypes\n"
        "from bashgym.daemon.host_paths import keep_environment_private\n"
        f"before = ctypes.CDLL(None).prctl({PR_GET_DUMPABLE}, 0, 0, 0, 0)\n"
        "keep_environment_private()\n"
        f"print(before, ctypes.CDLL(None).prctl({PR_GET_DUMPABLE}, 0, 0, 0, 0))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["1", "0"]
