"""The console script answers --version, the help of the program and of a group, and a TAB of completion without
importing the command registry (bench/cli_startup.py times them); a command's own help and anything else go to the
full CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bashgym.daemon.version import bashgym_version

PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('registry imported' if 'bashgym.cli.main' in sys.modules else 'lean',"
    " file=sys.stderr))\n"
    "from bashgym.cli.entry import main\n"
    "main()\n"
)


def probe(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=False)


def test_version_is_answered_before_the_commands_are_imported() -> None:
    done = probe("--version")
    assert done.returncode == 0 and done.stdout == f"bashgym {bashgym_version()}\n", done
    assert done.stderr.strip() == "lean", done.stderr


@pytest.mark.parametrize(
    ("argv", "code", "shows"),
    [
        (["--help"], 0, "exit codes:"),
        (["-h"], 0, "first steps:"),
        (["run", "--help"], 0, "usage: bashgym run [-h] COMMAND"),
        (["campaign", "schedule", "-h"], 0, "usage: bashgym campaign schedule"),
        ([], 2, "usage: bashgym"),
        (["__complete", "bash", "2", "--", "bashgym", "campaign", "l"], 0, "list\n"),
    ],
)
def test_the_help_of_a_group_and_a_tab_are_answered_from_the_index(argv: list[str], code: int, shows: str) -> None:
    done = probe(*argv)
    assert done.returncode == code and shows in done.stdout, done
    assert done.stderr.strip() == "lean", done.stderr


@pytest.mark.parametrize("argv", [["run", "list", "--help"], ["nope", "--help"], ["run", "--json", "--help"]])
def test_a_commands_own_help_and_anything_unknown_go_to_the_full_cli(argv: list[str]) -> None:
    done = probe(*argv)
    assert done.stderr.strip().splitlines()[-1] == "registry imported", done.stderr
