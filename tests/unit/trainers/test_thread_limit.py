"""How many torch threads a local trainer or evaluator gets when several share the host's cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bashgym.daemon.settings import load_settings, local_thread_limit
from bashgym.trainers import cores
from bashgym.trainers.cores import busy_cores, limit_threads
from bashgym.trainers.speed import Machine, resolve_threads


def limit(environ: dict[str, str], cpus: int, **settings: object) -> int | None:
    return local_thread_limit(load_settings({}, home="/nonexistent", **settings), environ, cpus)


def test_one_local_slot_leaves_torch_its_default() -> None:
    assert limit({}, 16) is None


@pytest.mark.parametrize(("slots", "cpus", "threads"), [(2, 2, 1), (2, 16, 8), (3, 16, 5), (4, 2, 1)])
def test_several_local_slots_split_the_cores(slots: int, cpus: int, threads: int) -> None:
    assert limit({}, cpus, local_slots=slots) == threads


def test_the_daemons_own_omp_num_threads_is_inherited_as_it_is() -> None:
    assert limit({"OMP_NUM_THREADS": "6"}, 16, local_slots=2) is None


def test_an_explicit_setting_wins_over_everything() -> None:
    assert limit({"OMP_NUM_THREADS": "6"}, 16, trainer_threads=3) == 3
    assert limit({}, 16, local_slots=4, trainer_threads=12) == 12


def torch_threads_after(code: str) -> str:
    """torch's threads in a fresh process without the suite's own OMP_NUM_THREADS, once `code` has run."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    program = f"{code}; import torch; print(torch.get_num_threads())"
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env).stdout.strip()


def test_the_trainer_takes_its_share_on_the_command_line_before_torch_loads() -> None:
    started = "from bashgym.trainers.__main__ import main; main(['/nonexistent'{}])"
    assert torch_threads_after(started.format(", '--threads', '1'")) == "1"
    # Without --threads, the cores the load leaves free: whatever the load of the moment, 1 to all of them.
    assert 1 <= int(torch_threads_after(started.format(""))) <= len(os.sched_getaffinity(0))


def test_the_evaluator_takes_the_same_flags_before_torch_loads() -> None:
    # It sets the threads first, then fails on the missing directory, before it moves its output to a log.
    started = (
        "from bashgym.trainers.evaluate import main\n"
        "try: main(['/nonexistent', '--share-of', '{}'])\n"
        "except OSError: pass"
    )
    cpus = os.cpu_count() or 1
    assert torch_threads_after(started.format(cpus)) == "1"
    assert 1 <= int(torch_threads_after(started.format(1))) <= cpus, "one slot: the cores the load leaves free"


def threads_set(
    threads: int | None, share_of: int | None, environ: dict[str, str], cpus: int, *, busy: float = 0.0
) -> str | None:
    limit_threads(threads, share_of, environ, cpus, busy=lambda: busy)
    return environ.get("OMP_NUM_THREADS")


@pytest.mark.parametrize(("share_of", "cpus", "expected"), [(2, 16, "8"), (3, 16, "5"), (4, 2, "1"), (2, 1, "1")])
def test_a_device_with_several_slots_splits_its_own_cores(share_of: int, cpus: int, expected: str) -> None:
    # The daemon cannot know an SSH device's cores; the trainer there divides them by the device's slots.
    assert threads_set(None, share_of, {}, cpus) == expected


def test_a_device_s_own_limit_and_an_explicit_number_win_over_the_load() -> None:
    assert threads_set(None, 2, {"OMP_NUM_THREADS": "6"}, 16, busy=15) == "6", "the operator's limit on the host"
    assert threads_set(None, 2, {"OMP_NUM_THREADS": ""}, 16) == "8", "an empty value sets nothing"
    assert threads_set(3, 2, {"OMP_NUM_THREADS": "6"}, 16, busy=15) == "3"
    assert threads_set(2, None, {}, 2, busy=6.0) == "2", "BASHGYM_TRAINER_THREADS (--threads) beside a busy host"


@pytest.mark.parametrize(
    ("cpus", "busy", "share_of", "expected"),
    [
        (2, 0.0, None, "2"),  # an idle host: every core
        (2, 0.4, None, "2"),
        (2, 0.6, None, "1"),  # most of a core taken: the rest is not worth a second thread
        (2, 6.0, None, "1"),  # issue 52's load of 4-8 on 2 cores: one thread, never none
        (16, 5.2, None, "11"),
        (16, 5.2, 2, "8"),  # a device's share caps what the load leaves
        (16, 12.0, 2, "4"),
    ],
)
def test_a_run_takes_the_cores_the_load_leaves_free(
    cpus: int, busy: float, share_of: int | None, expected: str
) -> None:
    assert threads_set(None, share_of, {}, cpus, busy=busy) == expected


def test_the_cores_the_load_keeps_busy_are_the_smaller_of_the_minute_and_the_moment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loadavg = tmp_path / "loadavg"
    monkeypatch.setattr(cores, "LOADAVG", str(loadavg))
    monkeypatch.setattr(os, "getloadavg", lambda: (1.8, 1.0, 0.5))
    loadavg.write_text("1.80 1.00 0.50 1/300 4242\n")  # only this process runs: the demo's evaluation just ended
    assert busy_cores(sleep=lambda s: None) == 0.0
    loadavg.write_text("1.80 1.00 0.50 6/300 4242\n")  # five others runnable now, 1.8 over the minute
    assert busy_cores(sleep=lambda s: None) == 1.8
    loadavg.write_text("no runnable count here\n")  # not Linux's format: the minute's load alone
    assert busy_cores(sleep=lambda s: None) == 1.8


def test_the_run_records_its_threads_and_whether_they_were_limited() -> None:
    shared = Machine(cuda=False, bf16_supported=False, memory_bytes=1, cpu_count=16, has_liger=False, threads=8)
    assert resolve_threads(shared).describe() == (
        "auto -> 8 (8 of 16 CPUs: OMP_NUM_THREADS, the daemon's share, or the load at start)"
    )
    default = Machine(cuda=False, bf16_supported=False, memory_bytes=1, cpu_count=16, has_liger=False, threads=16)
    assert resolve_threads(default).describe() == "auto -> 16 (torch's default on 16 CPUs)"
