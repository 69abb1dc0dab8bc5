"""Wall time of the `bashgym` console script's quick answers against `python -c pass` in the same run.

Target (issue 52): `--version`, `--help` and a TAB of completion under 0.15 s on a quiet machine.
Run: python bench/cli_startup.py [--repeat 10]   (with the venv's python: it runs the installed `bashgym`)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.15


def median_s(command: list[str], repeat: int) -> float:
    """Median wall seconds of `command` run to its end, `repeat` times after one warm-up (the page cache)."""
    subprocess.run(command, capture_output=True, check=False)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    repeat = parser.parse_args().repeat
    script = shutil.which("bashgym", path=str(Path(sys.executable).parent))
    if script is None:
        sys.exit(f"no bashgym script beside {sys.executable}: pip install -e . into this venv first")
    peer = median_s([sys.executable, "-c", "pass"], repeat)
    tab = [script, "__complete"]  # what the completion scripts run at each TAB
    cases = {
        "bashgym --version": [script, "--version"],
        "bashgym --help": [script, "--help"],
        "bashgym campaign --help": [script, "campaign", "--help"],
        "TAB after `bashgym tr`": [*tab, "bash", "1", "--", "bashgym", "tr"],
        "TAB after `eval run --split `": [*tab, "zsh", "4", "--", "bashgym", "eval", "run", "--split", ""],
        "bashgym eval run --help": [script, "eval", "run", "--help"],
    }
    print(f"python -c pass: {peer:.3f} s (median of {repeat})")
    print(f"{'command':<32} {'median':>8} {'x python':>9}  target < {TARGET_S} s")
    for name, command in cases.items():
        took = median_s(command, repeat)
        verdict = "ok" if took < TARGET_S else "over"
        print(f"{name:<32} {took:>7.3f}s {took / peer:>8.1f}x  {verdict}")


if __name__ == "__main__":
    main()
