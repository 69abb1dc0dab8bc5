"""The benchmarks' memory (bench/history.py) and its report (bench/report.py, `make bench-report`): a run's figures
are appended with what produced them, and a figure that got worse than the previous commit's by more than the
threshold is called a regression, only when both were measured alike (same machine, neither busy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))
import history  # noqa: E402
import report  # noqa: E402

QUIET = {"before": 0.1, "after": 0.2}
MACHINE = {"cpus": 2, "cpu_model": "AMD EPYC", "memory_gib": 23.5, "python": "3.11", "sqlite": "3.40"}


def line(commit: str, value: float, *, better: str = "lower", load: dict[str, float] = QUIET, **machine: Any) -> str:
    figure = {"value": value, "unit": "ms", "better": better, "anchor": 40.0, "anchor_name": "mlflow"}
    return json.dumps({"benchmark": "ui_bench", "at": f"2026-12-0{len(commit) % 9}T10:00:00+00:00", "commit": commit,
                       "dirty": False, "machine": {**MACHINE, **machine}, "load": load, "settings": {},
                       "figures": {"page_ms": figure}})  # fmt: skip


def rows(*lines: str) -> list[report.Row]:
    found = report.history([json.loads(raw) for raw in lines])
    return report.compared(found["ui_bench"]["page_ms"], threshold=0.10)


def test_a_run_is_appended_with_its_commit_machine_load_settings_and_anchor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.jsonl"
    monkeypatch.setenv("BASHGYM_BENCH_RESULTS", str(target))
    figure = history.Figure(3.5, unit="ms", better="lower", anchor=255.0, anchor_name="mlflow")
    start = history.Start(commit="c0ffee" * 6 + "c0ff", dirty=False, load=0.3)
    history.record("ui_bench", {"project_page_ms": figure}, settings={"runs": 100_000}, start=start)
    history.record("ui_bench", {"project_page_ms": figure}, settings={"runs": 100_000}, start=start)
    written = history.read(target)
    assert len(written) == 2 and written[0]["figures"]["project_page_ms"]["anchor"] == 255.0
    first = written[0]
    assert (first["commit"], first["dirty"]) == (start.commit, False) and first["machine"]["cpus"] >= 1
    begun = history.begin()  # this checkout's commit, as a benchmark takes it when it starts
    assert begun.commit is not None and len(begun.commit) == 40 and isinstance(begun.dirty, bool)
    assert first["settings"] == {"runs": 100_000} and first["load"]["before"] == 0.3
    monkeypatch.setenv("BASHGYM_BENCH_RESULTS", "off")
    assert history.record("ui_bench", {"project_page_ms": figure}, settings={}, start=start) is None
    assert len(history.read(target)) == 2


def test_a_worse_figure_than_the_previous_commits_is_a_regression_and_a_small_change_is_not() -> None:
    a, b, c = rows(line("aaaaaaaaa1", 10.0), line("bbbbbbbbb2", 10.5), line("ccccccccc3", 12.0))
    assert a.ratio is None and b.ratio == pytest.approx(1.05) and not b.regression
    assert c.ratio == pytest.approx(12.0 / 10.5) and c.regression
    _, faster = rows(line("aaaaaaaaa1", 10.0), line("bbbbbbbbb2", 5.0))
    assert not faster.regression
    _, fewer = rows(line("aaaaaaaaa1", 100.0, better="higher"), line("bbbbbbbbb2", 80.0, better="higher"))
    assert fewer.regression


def test_figures_not_made_alike_are_not_compared() -> None:
    _, busy = rows(line("aaaaaaaaa1", 10.0), line("bbbbbbbbb2", 20.0, load={"before": 5.0, "after": 5.0}))
    assert not busy.regression and "busy" in busy.note
    _, elsewhere = rows(line("aaaaaaaaa1", 10.0), line("bbbbbbbbb2", 20.0, cpus=16))
    assert not elsewhere.regression and "other machine" in elsewhere.note


def test_a_commit_measured_twice_counts_once_by_its_latest_run() -> None:
    found = rows(line("aaaaaaaaa1", 10.0), line("bbbbbbbbb2", 30.0), line("bbbbbbbbb2", 10.2))
    assert [r.value for r in found] == [10.0, 10.2] and not found[-1].regression


def test_the_report_prints_each_history_and_exits_1_under_strict_on_a_regression(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join([line("aaaaaaaaa1", 10.0), "{cut mid-write", line("bbbbbbbbb2", 12.0)]) + "\n")
    script = [sys.executable, str(BENCH / "report.py"), "--file", str(results)]
    shown = subprocess.run(script, capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "page_ms (ms, lower is better)" in shown.stdout and "REGRESSION" in shown.stdout
    assert "x1.200" in shown.stdout and "mlflow 40: ours x3.3 as good" in shown.stdout
    strict = subprocess.run([*script, "--strict"], capture_output=True, text=True, check=False)
    assert strict.returncode == 1
    empty = subprocess.run([*script[:2], "--file", str(tmp_path / "none.jsonl")], capture_output=True, text=True)
    assert empty.returncode == 0 and "No benchmark figures" in empty.stdout
