"""The `bashgym` console script: `--version` is answered before anything else is imported, `--help` (of the program,
a group or a command) and a TAB of completion from the command index (cli/command_index.py), without the command
modules (under 0.1 s against 0.5-0.8 s for the whole registry on the 2-core machine: bench/cli_startup.py);
anything else goes to main, which imports the one module that registers the command the line runs."""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv == ["--version"]:
        from bashgym.daemon.version import bashgym_version

        print(f"bashgym {bashgym_version()}")  # as argparse's version action prints it
        sys.exit(0)
    from bashgym.cli.command_index import quick_answer

    code = quick_answer(argv, dict(os.environ))
    if code is not None:
        sys.exit(code)
    from bashgym.cli.main import main as run_command

    run_command()
