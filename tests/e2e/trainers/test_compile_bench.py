"""The compile benches stay runnable (slow): compile_cold_start.py's two modes and their ratio; packed_compile.py."""

from __future__ import annotations

import shutil

import pytest

from tests.support.helpers import run_bench

NO_COMPILER = shutil.which("g++") is None


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(NO_COMPILER, reason="inductor compiles C++ for the CPU and finds no g++ here")
def test_the_cold_start_bench_compiles_the_whole_model_and_each_layer_and_prints_the_ratio() -> None:
    lines = run_bench("compile_cold_start.py", "--tiny", "--steps", "1")
    assert [line.get("mode") for line in lines[:2]] == ["whole", "regional"]
    assert all(line["first_step_s"] > 0 and line["step_s"] > 0 and line["config"]["layers"] == 2 for line in lines[:2])
    assert lines[2]["regional_over_whole_first_step"] > 0 and lines[2]["regional_over_whole_step"] > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(NO_COMPILER, reason="inductor compiles C++ for the CPU and finds no g++ here")
def test_the_packed_compile_bench_compiles_the_varlen_path_once() -> None:
    (line,) = run_bench("packed_compile.py", "--steps", "4", "--kernels", "varlen stand-in")
    assert line["kernel"] == "varlen stand-in" and line["steps"] == 4
    assert line["recompilations"] == 0 and line["graphs"] > 0, line
    assert line["compile"].endswith(" s, for rows of any length)") and line["wall_s"] > line["compile_s"] > 0
