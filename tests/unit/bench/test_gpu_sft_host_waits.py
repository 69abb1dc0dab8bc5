"""bench/gpu_sft.py's count of host waits: torch's CUDA sync debug mode warns once per synchronising call; the bench
counts those warnings over its sampled warm-up steps only. No GPU here, so torch's switch is recorded instead."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[3] / "bench" / "gpu_sft.py"


def load_bench() -> object:
    spec = importlib.util.spec_from_file_location("gpu_sft_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_host_waits_counts_synchronising_calls_in_the_sampled_steps_only(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_bench()
    modes: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    waits = bench.HostWaits(sampled=range(4, 6))  # type: ignore[attr-defined]
    reads_per_step = {1: 9, 2: 9, 3: 9, 4: 2, 5: 1, 6: 9}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the bench's own recording must catch what it counts
        for step, reads in reads_per_step.items():
            waits.begin(step)
            if step in (4, 5):
                for _ in range(reads):
                    warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
                warnings.warn("an unrelated warning", UserWarning, stacklevel=1)
            waits.end()
    record = waits.record()
    assert record["per_step"] == [2, 1]
    assert sum(record["where"].values()) == 3
    assert all(where.startswith("test_gpu_sft_host_waits.py:") for where in record["where"])
    assert modes == ["warn", "default", "warn", "default"], "sync debug mode is on for the sampled steps alone"


def test_host_waits_says_nothing_without_a_gpu() -> None:
    bench = load_bench()
    waits = bench.HostWaits(sampled=range(1, 3))  # type: ignore[attr-defined]
    waits.begin(1)
    waits.end()
    assert waits.record() is None
