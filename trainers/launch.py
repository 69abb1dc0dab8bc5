"""`python -u -m bashgym.trainers.launch RUN_DIR [--resume] [--machine-rank K --main-address HOST --main-port P]`

One machine's share of a scaled-out run. It writes accelerate_config.yaml into the run directory and runs
`accelerate launch --config_file accelerate_config.yaml -m bashgym.trainers RUN_DIR` in this process, so that
accelerate's launcher (torch distributed's elastic agent) starts this machine's ranks and its failure report
arrives as data rather than as text to scrape.

stdout stays the protocol stream the ranks inherit (only the main rank writes to it); this process's own output
goes to launcher.log. Signals: SIGTERM reaches the ranks through torch's launcher (they stop together at a step
boundary); SIGUSR1, which torch does not pass on, is forwarded here, so a pause works as for one trainer. The exit
code is a trainer's: 0 completed, 75 paused, 76 cancelled, 1 failed; after a failure, launch.json names the rank.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

from bashgym.trainers.contracts.rundir import EXIT_CANCELLED, EXIT_COMPLETED, EXIT_FAILED, EXIT_PAUSED, RunDirectory
from bashgym.trainers.contracts.topology import (
    CONFIG_NAME,
    LAUNCH_RECORD,
    LAUNCHER_PID_ENV,
    DistributedRefused,
    accelerate_config,
    check_strategy,
    root_cause,
)

STOPPED = {EXIT_PAUSED: "paused", EXIT_CANCELLED: "cancelled"}
OUTCOME = {"paused": EXIT_PAUSED, "cancelled": EXIT_CANCELLED}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bashgym.trainers.launch")
    parser.add_argument("run_dir", type=Path, help="run directory holding request.json")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--machine-rank", type=int, default=0, help="this machine's rank in a multi-machine run")
    parser.add_argument("--main-address", default="127.0.0.1", help="where the other machines reach machine 0")
    parser.add_argument("--main-port", type=int, default=0, help="rendezvous port on machine 0 (0: any free one)")
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir.resolve()
    if not (run_dir / "request.json").is_file():
        print(f"error: {run_dir}/request.json does not exist.", file=sys.stderr)
        return 2
    protocol = _own_output_to(run_dir / "launcher.log")
    run = RunDirectory(run_dir, protocol)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    signal.signal(signal.SIGUSR1, _forward_to_ranks)
    try:
        config = _write_config(run_dir, args.machine_rank, args.main_address, args.main_port)
    except Exception as exc:  # refused before any rank exists: reported as a trainer would report it
        traceback.print_exc()
        return _fail(run, f"{type(exc).__name__}: {exc}", machine_rank=args.machine_rank)
    command = ["--config_file", str(config), "--module", "bashgym.trainers", str(run_dir)]
    command += ["--resume"] if args.resume else []
    print(f"accelerate launch {' '.join(command)}", flush=True)
    return _launch(run, command, args.machine_rank)


def _own_output_to(log_path: Path) -> IO[str]:
    """This process's prints and warnings go to launcher.log; fd 1 stays the pipe the ranks inherit."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(log_fd, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    return protocol


def _write_config(run_dir: Path, machine_rank: int, main_address: str, main_port: int) -> Path:
    import torch
    import yaml
    from bashgym.trainers.contracts.request import TrainingRequest
    from bashgym.trainers.speed import Machine, resolve_mixed_precision

    request = TrainingRequest.model_validate_json((run_dir / "request.json").read_text())
    machine = Machine.detect()
    check_strategy(request, cuda=machine.cuda)
    per_machine = request.num_processes // request.num_machines
    if machine.cuda and per_machine > torch.cuda.device_count():
        raise DistributedRefused(
            f"{per_machine} processes per machine need as many GPUs, and this machine has "
            f"{torch.cuda.device_count()}; lower num_processes or add machines."
        )
    config = accelerate_config(
        request,
        mixed_precision=resolve_mixed_precision(request, machine),
        machine_rank=machine_rank,
        main_address=main_address,
        main_port=main_port,
    )
    path = run_dir / CONFIG_NAME
    header = "# Written by bashgym.trainers.launch for this run; `accelerate launch --config_file` reads it.\n"
    path.write_text(header + yaml.safe_dump(config, sort_keys=False))
    return path


def _launch(run: RunDirectory, command: list[str], machine_rank: int) -> int:
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        launch_command(launch_command_parser().parse_args(command))
    except ChildFailedError as exc:
        return _after_failure(run, exc.failures, machine_rank)
    except SignalException as exc:
        return _after_signal(run, exc.sigval)
    except SystemExit as exc:
        # accelerate 1.16 and later catch torch's SignalException themselves and exit 128 + the signal's number.
        signum = _signal_of_exit(exc.code)
        if signum is None:
            raise
        return _after_signal(run, signum)
    # Every rank exited 0, also when they paused or stopped together; rank 0's state says which (another
    # machine has none, and its outcome is machine 0's).
    return OUTCOME.get(str(run.read_state().get("status")), EXIT_COMPLETED)


def _after_signal(run: RunDirectory, signum: signal.Signals) -> int:
    """Asked to stop: torch's launcher passed the signal on to the ranks and waited for them to end."""
    print(f"launcher: {signum.name}; the ranks were stopped", flush=True)
    return OUTCOME.get(str(run.read_state().get("status")), EXIT_CANCELLED)


def _signal_of_exit(code: object) -> signal.Signals | None:
    """The signal a launcher's exit code `128 + N` reports, or None for any other exit."""
    if not isinstance(code, int) or code <= 128:
        return None
    try:
        return signal.Signals(code - 128)
    except ValueError:
        return None


def _after_failure(run: RunDirectory, failures: dict[int, Any], machine_rank: int) -> int:
    """Every rank paused, or every rank cancelled, is the run's outcome; anything else failed, naming the rank."""
    codes = {failure.exitcode for failure in failures.values()}
    if len(codes) == 1 and (code := codes.pop()) in STOPPED:
        return int(code)
    ranks = [_describe(run, rank, failure, machine_rank) for rank, failure in sorted(failures.items())]
    first = root_cause(ranks)
    return _fail(run, first["summary"], machine_rank=machine_rank, ranks=ranks, first_rank=first["rank"])


def _describe(run: RunDirectory, rank: int, failure: Any, machine_rank: int) -> dict[str, Any]:
    state = _read_json(run.rank_state_path(rank)) if rank else run.read_state()
    error = str(state.get("error", "")) if state.get("status") == "failed" else ""
    where = f"rank {rank} (machine {machine_rank}, local rank {failure.local_rank}, pid {failure.pid})"
    if failure.exitcode < 0:
        how = f"was killed by {failure.signal_name()}"
    else:
        how = f"failed with exit code {failure.exitcode}" + (f": {error}" if error else "")
    return {
        "rank": rank,
        "machine_rank": machine_rank,
        "local_rank": failure.local_rank,
        "pid": failure.pid,
        "exitcode": failure.exitcode,
        "signal": failure.signal_name() if failure.exitcode < 0 else None,
        "error": error,
        "time": float(state.get("updated_at") or failure.timestamp),
        "summary": f"{where} {how}",
    }


def _fail(run: RunDirectory, summary: str, *, machine_rank: int, **record: Any) -> int:
    text = f"{summary}; the run's other ranks were stopped." if record.get("ranks") else summary
    payload = {"machine_rank": machine_rank, "time": round(time.time(), 3), "summary": text, **record}
    (run.root / LAUNCH_RECORD).write_text(json.dumps(payload, indent=2))
    if machine_rank == 0:
        run.write_state("failed", error=text[:2000])
        run.emit("failed", error=text[:2000], error_type="RankFailed" if record.get("ranks") else "LaunchRefused")
    print(f"launcher: {text}", flush=True)
    return EXIT_FAILED


def _forward_to_ranks(signum: int, frame: Any) -> None:
    """Pass a pause on to this launcher's children, the ranks."""
    for pid in _children(os.getpid()):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[-1].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
