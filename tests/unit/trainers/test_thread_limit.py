"""How many torch threads a local trainer or evaluator gets when several share the host's cores."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from bashgym.daemon.settings import load_settings, local_thread_limit
from bashgym.trainers.cores import limit_threads
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
    assert torch_threads_after(started.format("")) == torch_threads_after("pass"), "no --threads: torch's default"


def test_the_evaluator_takes_the_same_flags_before_torch_loads() -> None:
    # It sets the threads first, then fails on the missing directory, before it moves its output to a log.
    started = (
        "from bashgym.trainers.evaluate import main\n"
        "try: main(['/nonexistent', '--share-of', '{}'])\n"
        "except OSError: pass"
    )
    cpus = os.cpu_count() or 1
    assert torch_threads_after(started.format(cpus)) == "1"
    assert torch_threads_after(started.format(1)) == torch_threads_after("pass"), "one slot: torch's default"


def threads_set(threads: int | None, share_of: int | None, environ: dict[str, str], cpus: int) -> str | None:
    limit_threads(threads, share_of, environ, cpus)
    return environ.get("OMP_NUM_THREADS")


@pytest.mark.parametrize(("share_of", "cpus", "expected"), [(2, 16, "8"), (3, 16, "5"), (4, 2, "1"), (2, 1, "1")])
def test_a_device_with_several_slots_splits_its_own_cores(share_of: int, cpus: int, expected: str) -> None:
    # The daemon cannot know an SSH device's cores; the trainer there divides them by the device's slots.
    assert threads_set(None, share_of, {}, cpus) == expected


def test_a_device_s_own_limit_one_slot_and_an_explicit_number_win() -> None:
    assert threads_set(None, 2, {"OMP_NUM_THREADS": "6"}, 16) == "6", "the operator's limit on the host"
    assert threads_set(None, 2, {"OMP_NUM_THREADS": ""}, 16) == "8", "an empty value sets nothing"
    assert threads_set(None, 1, {}, 16) is None and threads_set(None, None, {}, 16) is None, "torch's default"
    assert threads_set(3, 2, {"OMP_NUM_THREADS": "6"}, 16) == "3"


def test_the_run_records_its_threads_and_whether_they_were_limited() -> None:
    shared = Machine(cuda=False, bf16_supported=False, memory_bytes=1, cpu_count=16, has_liger=False, threads=8)
    assert resolve_threads(shared).describe() == "auto -> 8 (8 of 16 CPUs: OMP_NUM_THREADS, or the daemon's share)"
    default = Machine(cuda=False, bf16_supported=False, memory_bytes=1, cpu_count=16, has_liger=False, threads=16)
    assert resolve_threads(default).describe() == "auto -> 16 (torch's default on 16 CPUs)"
