"""Run tests one at a time, each in a fresh pytest process, to show none leans on another having run first.

    python -m tests.support.alone --sample 40 --seed 7    # 40 tests drawn at random (the seed repeats a draw)
    python -m tests.support.alone tests/e2e/evidence      # every test under a path

Prints each test that fails alone and exits 1 if any did. Slow tests are left out (make test-slow runs them).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time


def collect(paths: list[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "not slow", "-p", "no:randomly", *paths],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line for line in done.stdout.splitlines() if "::" in line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.alone", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", default=["tests"])
    parser.add_argument("--sample", type=int, help="run this many tests drawn at random instead of all")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tests = collect(args.paths)
    if args.sample is not None:
        tests = sorted(random.Random(args.seed).sample(tests, min(args.sample, len(tests))))
    failed = []
    for i, test in enumerate(tests, 1):
        started = time.monotonic()
        code = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider", test],
            capture_output=True, text=True,
        ).returncode  # fmt: skip
        print(f"[{i}/{len(tests)}] {'ok  ' if code == 0 else 'FAIL'} {time.monotonic() - started:5.1f} s  {test}")
        if code != 0:
            failed.append(test)
    print(f"{len(tests) - len(failed)} of {len(tests)} pass alone")
    for test in failed:
        print(f"failed alone: {test}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
