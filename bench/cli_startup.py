"""Wall time of the `bashgym` console script's quick answers against `python -c pass` in the same run.

Target (issue 52): `--version`, `--help` and a TAB of completion under 0.15 s on a quiet machine. A command that
runs pays for its own module's imports too (no target: the figure to watch, as the suite runs the CLI hundreds of
times).
Run: python bench/cli_startup.py [--repeat 10]   (with the venv's python: it runs the installed `bashgym`)
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.15


def median_s(command: list[str], repeat: int) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds of `command` run to its end, `repeat` times after one warm-up
    (the page cache). CPU is the figure that holds on a shared, busy machine."""
    subprocess.run(command, capture_output=True, check=False)
    times, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    repeat = parser.parse_args().repeat
    script = shutil.which("bashgym", path=str(Path(sys.executable).parent))
    if script is None:
        sys.exit(f"no bashgym script beside {sys.executable}: pip install -e . into this venv first")
    peer, peer_cpu = median_s([sys.executable, "-c", "pass"], repeat)
    tab = [script, "__complete"]  # what the completion scripts run at each TAB
    cases = {
        "bashgym --version": [script, "--version"],
        "bashgym --help": [script, "--help"],
        "bashgym campaign --help": [script, "campaign", "--help"],
        "TAB after `bashgym tr`": [*tab, "bash", "1", "--", "bashgym", "tr"],
        "TAB after `eval run --split `": [*tab, "zsh", "4", "--", "bashgym", "eval", "run", "--split", ""],
        "bashgym eval run --help": [script, "eval", "run", "--help"],
    }
    commands = {
        # Commands that run: the first fails on a usage rule, the second gets to its handler and its client (a
        # port where no daemon listens: exit 8). Both import the module that defines the command.
        "project list --bogus (exit 2)": [script, "project", "list", "--bogus"],
        "project list, no daemon (exit 8)": [script, "project", "list", "--json", "--api", "http://127.0.0.1:9"],
        "training start --bogus (exit 2)": [script, "training", "start", "--bogus"],
    }
    print(f"python -c pass: {peer:.3f} s, {peer_cpu:.3f} s CPU (medians of {repeat})")
    print(f"{'command':<34} {'median':>8} {'x python':>9} {'CPU':>7}  target < {TARGET_S} s")
    for name, command in [*cases.items(), *commands.items()]:
        took, cpu = median_s(command, repeat)
        verdict = "(a command: no target)" if name in commands else "ok" if took < TARGET_S else "over"
        print(f"{name:<34} {took:>7.3f}s {took / peer:>8.1f}x {cpu:>6.3f}s  {verdict}")


if __name__ == "__main__":
    main()
