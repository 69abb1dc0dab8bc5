"""`python -u -m bashgym.trainers <run_dir> [--resume]`: run one training request in this process."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import IO

from bashgym.trainers import cores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bashgym.trainers")
    parser.add_argument("run_dir", type=Path, help="run directory holding request.json")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    cores.add_arguments(parser)
    args = parser.parse_args(argv)
    cores.limit_threads(args.threads, args.share_of, os.environ, cores.available_cores())  # before torch is imported
    run_dir: Path = args.run_dir.resolve()
    if not (run_dir / "request.json").is_file():
        print(f"error: {run_dir}/request.json does not exist.", file=sys.stderr)
        return 2
    # The process's one read of the environment; the Hub token is looked up there by name.
    environ = dict(os.environ)
    from bashgym.trainers.contracts.topology import LAUNCHER_PID_ENV, RankInfo, exit_rank
    from bashgym.trainers.signals import TERM_PAUSES_ENV, ControlFlags, end_with_parent

    rank = RankInfo.from_env(environ)
    if environ.get(LAUNCHER_PID_ENV, "").isdigit():
        end_with_parent(int(environ[LAUNCHER_PID_ENV]))  # a rank of a scaled-out run ends with its launcher
    # The main process logs to training.log and speaks the protocol; another rank keeps a log of its own.
    log_name = "training.log" if rank.is_main else f"rank-{rank.rank}.log"
    protocol: IO[str] | None = _protocol_to_stdout_logs_to_file(run_dir / log_name)
    if protocol is not None and not rank.is_main:
        protocol.close()  # only the main process speaks to the supervisor
        protocol = None
    # Signals first: torch takes seconds to import, and a stop sent meanwhile must still end `cancelled`.
    flags = ControlFlags(term_pauses=environ.get(TERM_PAUSES_ENV) == "1")
    flags.install()
    from bashgym.trainers import failpoints
    from bashgym.trainers.contracts.rundir import EXIT_CANCELLED, EXIT_PAUSED, RunDirectory
    from bashgym.trainers.runner import run_training

    failpoints.arm(environ.get("BASHGYM_FAILPOINT", ""), rank.rank)
    run = RunDirectory(run_dir, protocol, rank)
    code = run_training(run, resume=args.resume, environ=environ, flags=flags)
    if not rank.is_distributed:
        return code
    if protocol is not None:
        protocol.flush()
    # torch's launcher takes any nonzero exit for a failure and kills the ranks still saving; a rank that paused
    # or stopped as agreed exits 0, and the launcher reads the outcome from run_state.json.
    exit_rank(0 if code in {EXIT_PAUSED, EXIT_CANCELLED} else code)


def _protocol_to_stdout_logs_to_file(log_path: Path) -> IO[str]:
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
