"""The compile benches stay runnable (slow): compile_cold_start.py's two modes and their ratio; packed_compile.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compile_cold_start.py"
PACKED = BENCH.with_name("packed_compile.py")
NO_COMPILER = shutil.which("g++") is None


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(NO_COMPILER, reason="inductor compiles C++ for the CPU and finds no g++ here")
def test_the_cold_start_bench_compiles_the_whole_model_and_each_layer_and_prints_the_ratio() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--steps", "1"], capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line.get("mode") for line in lines[:2]] == ["whole", "regional"]
    assert all(line["first_step_s"] > 0 and line["step_s"] > 0 and line["config"]["layers"] == 2 for line in lines[:2])
    assert lines[2]["regional_over_whole_first_step"] > 0 and lines[2]["regional_over_whole_step"] > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(NO_COMPILER, reason="inductor compiles C++ for the CPU and finds no g++ here")
def test_the_packed_compile_bench_compiles_the_varlen_path_once() -> None:
    done = subprocess.run(
        [sys.executable, str(PACKED), "--steps", "4", "--kernels", "varlen stand-in"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert line["kernel"] == "varlen stand-in" and line["steps"] == 4
    assert line["recompilations"] == 0 and line["graphs"] > 0, line
    assert line["compile"].endswith(" s, for rows of any length)") and line["wall_s"] > line["compile_s"] > 0
