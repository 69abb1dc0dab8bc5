"""The `bashgym` console script: `--version` is answered before the command modules are imported (about 0.05 s
against 0.4 s for the whole registry on the 2-core machine: bench/cli_startup.py); anything else goes to main."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from bashgym.daemon.version import bashgym_version

        print(f"bashgym {bashgym_version()}")  # as argparse's version action prints it
        sys.exit(0)
    from bashgym.cli.main import main as run_command

    run_command()
