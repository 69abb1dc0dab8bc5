"""The console script answers --version, the help of the program, a group or a command, and a TAB of completion
without importing the command registry (bench/cli_startup.py times them); anything else goes to the full CLI."""

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
        (["eval", "run", "--help"], 0, "(--run RUN | --model-version MODEL_VERSION | --gold)"),
        ([], 2, "usage: bashgym"),
        (["__complete", "bash", "2", "--", "bashgym", "campaign", "l"], 0, "list\n"),
    ],
)
def test_the_help_of_a_command_and_a_tab_are_answered_from_the_index(argv: list[str], code: int, shows: str) -> None:
    done = probe(*argv)
    assert done.returncode == code and shows in done.stdout, done
    assert done.stderr.strip() == "lean", done.stderr


@pytest.mark.parametrize("argv", [["run", "show", "r1", "--help"], ["nope", "--help"], ["run", "--json", "--help"]])
def test_a_line_with_values_or_unknown_words_goes_to_the_full_cli(argv: list[str]) -> None:
    done = probe(*argv)
    assert done.stderr.strip().splitlines()[-1] == "registry imported", done.stderr
