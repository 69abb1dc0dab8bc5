"""The campaign report's charts show the evidence: integer iterations, the CI as whiskers, the baseline band,
keep/discard markers, the held-out families apart, and budget spent against its limit over time."""

from __future__ import annotations

from typing import Any

import matplotlib
import pytest
from bashgym.daemon.campaigns.reports import _budget_chart, _metric_chart

matplotlib.use("Agg")
from matplotlib import pyplot as plt


def row(iteration: int, metric: float, **fields: Any) -> dict[str, Any]:
    return {
        "iteration": iteration, "kind": "candidate", "metric": metric, "holdout_metric": metric - 0.1,
        "samples": 88, "delta": None, "ci": None, "decision": None, **fields,
    }  # fmt: skip


SNAPSHOT = {
    "primary_metric": "pass@1",
    "iterations": [
        row(1, 0.2, kind="baseline", decision="baseline"),
        row(2, 0.5, delta=0.3, ci=[0.2, 0.4], decision="keep"),
        row(3, 0.45, delta=-0.05, ci=[-0.15, 0.05], decision="discard"),
        row(4, 0.6, delta=0.1, ci=[0.02, 0.18], decision="keep"),
        row(5, 0.62, delta=0.02, ci=[-0.04, 0.08], decision="discard"),
    ],
    "budget_entries": [
        {"kind": "limit", "runs": 4, "created_at": "2026-12-04T10:00:00Z"},
        {"kind": "settle", "runs": 1, "created_at": "2026-12-04T10:30:00Z"},
        {"kind": "settle", "runs": 1, "created_at": "2026-12-04T11:10:00Z"},
        {"kind": "amend", "runs": 2, "created_at": "2026-12-04T11:20:00Z"},
    ],
}


def test_the_metric_chart_draws_the_evidence() -> None:
    figure = _metric_chart(plt, SNAPSHOT)
    ax = figure.axes[0]
    ax.figure.canvas.draw()
    assert all(float(tick).is_integer() for tick in ax.get_xticks()), ax.get_xticks()
    labels = set(ax.get_legend_handles_labels()[1])
    assert {"baseline", "baseline 95% interval", "keep", "discard", "95% CI of the gain", "held-out families"} == labels
    whiskers = next(c for c in ax.containers if c.get_label() == "95% CI of the gain")
    segments = whiskers.lines[2][0].get_segments()
    # Iteration 2 (pass@1 0.5, gain 0.3 with CI [0.2, 0.4]) spans 0.4..0.6: the CI moved to the metric's level.
    assert [float(v) for point in segments[0] for v in point] == pytest.approx([2, 0.4, 2, 0.6])
    band = next(p for p in ax.patches if p.get_label() == "baseline 95% interval")
    assert band.get_y() == pytest.approx(0.2 - 1.96 * (0.2 * 0.8 / 88) ** 0.5)
    plt.close(figure)


def test_the_budget_chart_shows_runs_settled_against_the_limit_over_time() -> None:
    figure = _budget_chart(plt, SNAPSHOT)
    ax = figure.axes[0]
    spent, limit = (line for line in ax.get_lines())
    assert list(spent.get_ydata()) == [0, 1, 2, 2]
    assert list(limit.get_ydata()) == [4, 4, 4, 6]
    assert ax.get_xlabel() == "time"
    plt.close(figure)
