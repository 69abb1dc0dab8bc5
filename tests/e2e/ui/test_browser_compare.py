"""Issue 54's compare page in a real headless Chromium: three runs with different learning rates drawn as one point
each in the param-against-metric scatter and as lines in the parallel coordinates, a y axis whose 12,500 label fits
its axis (it was clipped to "2,500"), and the page's alignment control redrawing the curves on wall time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.ui.test_browser import browser, shot, sign_in, until  # noqa: F401  (browser is a fixture)
from tests.support.factories import tracking_context
from tests.support.helpers import running_daemon

pytestmark = pytest.mark.slow
RATES = (1e-5, 3e-4, 2e-3)

# The y axis's width and its widest tick label's, both measured by uPlot's own canvas in the axis's font.
AXIS_FIT = """
const u = document.querySelector("figure.chart").uplot, axis = u.axes[1];
u.ctx.font = axis.font[0];
const labels = axis._values || [];
const widest = Math.max(...labels.map((v) => u.ctx.measureText(String(v)).width)) / (window.devicePixelRatio || 1);
return { labels: labels.map(String), widest: widest, size: axis._size, ticks: axis.ticks.size + axis.gap };
"""


def add_run(client: httpx.Client, rate: float, top: float) -> str:
    body = {"method": "sft", "tracking_context": tracking_context(), "config": {"learning_rate": rate}}
    run_id = str(client.post("/v1/runs", json=body).json()["record"]["run_id"])
    points = [
        {"metric": "train.loss", "step": s, "value": top / (s + 1), "time": 1_767_225_600.0 + 5 * s} for s in range(20)
    ]
    body = {"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": points}
    client.post("/v1/projects/nightly/metrics", json=body).raise_for_status()
    return run_id


def test_compare_draws_a_point_a_run_fits_long_axis_labels_and_aligns_on_wall_time(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with running_daemon(tmp_path / "home") as daemon:
        with daemon.client() as client:
            runs = [add_run(client, rate, top) for rate, top in zip(RATES, (12_500.0, 9_000.0, 4_000.0), strict=True)]
        sign_in(browser, daemon)
        browser.get(f"{daemon.url}/ui/p/nightly/compare?" + "&".join(f"run={r}" for r in runs))
        points = until(lambda: browser.find_elements(By.CSS_SELECTOR, "figure.scatter circle.point"), "the scatter")
        assert sorted(p.get_attribute("data-run") for p in points) == sorted(runs)
        lines = browser.find_elements(By.CSS_SELECTOR, "figure.parallel polyline.line")
        assert sorted(line.get_attribute("data-run") for line in lines) == sorted(runs)

        until(lambda: browser.find_elements(By.CSS_SELECTOR, "figure.chart canvas"), "the curves drawn")
        fit = until(lambda: browser.execute_script(AXIS_FIT), "the y axis laid out")
        assert "12,500" in fit["labels"], fit
        assert fit["widest"] + fit["ticks"] <= fit["size"], fit
        shot(browser, tmp_path, "ui-compare-params")

        legend = lambda: browser.find_element(By.CSS_SELECTOR, "figure.chart .u-legend").text  # noqa: E731
        Select(browser.find_element(By.CSS_SELECTOR, ".align-all select")).select_by_value("wall")
        assert until(lambda: "wall clock" in legend(), "the curves redrawn on the wall-clock axis")
        chart_axis = Select(browser.find_element(By.CSS_SELECTOR, "figure.chart .controls select"))
        assert chart_axis.first_selected_option.get_attribute("value") == "wall"
        Select(browser.find_element(By.CSS_SELECTOR, ".align-all select")).select_by_value("relstep")
        assert until(lambda: "steps since the run's first" in legend(), "the curves redrawn on relative steps")
