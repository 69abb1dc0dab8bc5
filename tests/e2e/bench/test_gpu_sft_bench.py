"""bench/gpu_sft.py stays runnable: its CPU check measures both trainers and prints their ratio (slow: ~40 s)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.factories import make_wheel
from tests.support.helpers import BENCH_DIR, run_bench

SESSION = BENCH_DIR / "gpu_session.sh"


def run_session(out: Path, wheels: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """bench/gpu_session.sh as the device runs it, its `python3` this interpreter."""
    env = {**os.environ, "OUT": str(out), "WHEELS": str(wheels)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return subprocess.run(
        ["bash", str(SESSION), *args], capture_output=True, text=True, timeout=280, cwd=BENCH_DIR.parent, env=env
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_tiny_cpu_check_measures_trl_and_bashgym_and_prints_the_ratio() -> None:
    lines = run_bench("gpu_sft.py", "--tiny", "--variable-lengths", "--methods", "full")
    runs = {line["trainer"]: line for line in lines if "trainer" in line}
    assert set(runs) == {"trl", "bashgym"}
    assert all(run["tokens"] > 0 and run["tokens_per_s"] > 0 for run in runs.values())
    assert runs["bashgym"]["speed"]["compile"] == "auto -> off (no GPU)"
    # What a GPU run reads from these, a CPU run has none of: no compiled graph, no CUDA sync debug mode.
    assert all((r["compiled_graphs"], r["graph_breaks"], r["host_waits"]) == (0, {}, None) for r in runs.values())
    assert any("bashgym_over_trl_tokens_per_s" in line for line in lines)
    # Before timing variable lengths it proves packed attention agrees with attention per sequence.
    (check,) = [line for line in lines if line.get("check") == "packed_attention"]
    assert check["agrees"] and check["sequences"] > 1, check


def test_the_evaluator_placement_check_says_where_auto_put_the_model_and_that_it_measures_the_same() -> None:
    (check,) = run_bench("gpu_eval_check.py")
    assert check["check"] == "eval_placement" and check["rows"] == 24
    assert check["placement"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert check["agrees"] and check["heldout_loss"]["auto"] > 0, check


def test_the_device_session_refuses_to_start_without_its_wheels(tmp_path: Path) -> None:
    proc = run_session(tmp_path / "out", tmp_path / "none", "--tiny")
    assert proc.returncode == 2
    assert f"no wheels in {tmp_path / 'none'}: download them first" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_device_session_measures_both_methods_on_both_lengths_into_out(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "packaging", "0.1")  # this interpreter has all it needs: the wheel is kept out
    proc = run_session(tmp_path / "out", wheels, "--tiny")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, variable in (("gpu_sft", False), ("gpu_sft_variable", True)):
        lines = [json.loads(line) for line in (tmp_path / "out" / f"{name}.jsonl").read_text().splitlines()]
        for method in ("full", "lora"):
            assert f"{name} {method}: exit 0 after" in proc.stdout
            assert (tmp_path / "out" / f"{name}_{method}.log").stat().st_size > 0
            runs = [line for line in lines if line.get("method") == method and "trainer" in line]
            assert sorted(run["trainer"] for run in runs) == ["bashgym", "trl"]
            assert all(run["variable_lengths"] is variable for run in runs)
            assert any("bashgym_over_trl_tokens_per_s" in line and line["method"] == method for line in lines)
        wheel_lines = [line for line in lines if line.get("check") == "wheels"]
        assert len(wheel_lines) == 2 and all(line["installed"] == [] for line in wheel_lines)
        assert wheel_lines[0]["host_kept"][0].startswith("packaging ")
    # Liger's kernels need CUDA: the run with Liger forced on beside torch.compile is the GPU's alone.
    assert "liger beside compile: not run, Liger needs a CUDA GPU" in proc.stdout
    assert "eval placement: exit 0" in proc.stdout
    placed = [json.loads(line) for line in (tmp_path / "out" / "gpu_sft.jsonl").read_text().splitlines()]
    assert [line["agrees"] for line in placed if line.get("check") == "eval_placement"] == [True]
    assert torch.__version__ in (tmp_path / "out" / "device.txt").read_text(), "the host's versions are recorded"
    # The time left over measured the compile cold start; eight files in all, the most a device call returns.
    assert len(list((tmp_path / "out").iterdir())) == 8
    if shutil.which("g++"):  # inductor compiles C++ for the CPU
        cold_start = (tmp_path / "out" / "compile_cold_start.jsonl").read_text().splitlines()
        assert [json.loads(line).get("mode") for line in cold_start] == ["whole", "regional", None]
