"""`python -u -m bashgym.trainers <run_dir> [--resume]`: run one training request in this process."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bashgym.trainers")
    parser.add_argument("run_dir", type=Path, help="run directory holding request.json")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir.resolve()
    if not (run_dir / "request.json").is_file():
        print(f"error: {run_dir}/request.json does not exist.", file=sys.stderr)
        return 2
    protocol = _protocol_to_stdout_logs_to_file(run_dir / "training.log")
    # Signals first: torch takes seconds to import, and a stop sent meanwhile must still end `cancelled`.
    from bashgym.trainers.signals import ControlFlags

    flags = ControlFlags()
    flags.install()
    from bashgym.trainers import failpoints
    from bashgym.trainers.rundir import RunDirectory
    from bashgym.trainers.runner import run_training

    # The process's one read of the environment; the Hub token is looked up there by name.
    environ = dict(os.environ)
    failpoints.arm(environ.get("BASHGYM_FAILPOINT", ""))
    return run_training(RunDirectory(run_dir, protocol), resume=args.resume, environ=environ, flags=flags)


def _protocol_to_stdout_logs_to_file(log_path: Path):  # type: ignore[no-untyped-def]
    """Keep the real stdout for protocol lines only; everything else printed goes to training.log."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    return protocol


if __name__ == "__main__":
    sys.exit(main())
