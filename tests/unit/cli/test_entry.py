"""The console script answers --version without importing the command registry (bench/cli_startup.py times it)."""

from __future__ import annotations

import subprocess
import sys

from bashgym.daemon.version import bashgym_version

PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('registry imported' if 'bashgym.cli.main' in sys.modules else 'lean',"
    " file=sys.stderr))\n"
    "from bashgym.cli.entry import main\n"
    "main()\n"
)


def test_version_is_answered_before_the_commands_are_imported() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout == f"bashgym {bashgym_version()}\n", done
    assert done.stderr.strip() == "lean", done.stderr


def test_anything_else_goes_to_the_full_cli() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "COMMAND" in done.stdout, done
    assert done.stderr.strip() == "registry imported", done.stderr
