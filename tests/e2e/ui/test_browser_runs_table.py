"""Issue 54's runs table in a real headless Chromium: sort by a metric from its header, search with the filter
grammar, see a refused filter named in the page, and the chosen columns kept for the project by the browser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.ui.test_browser import browser, shot, sign_in, until  # noqa: F401  (browser is a fixture)
from tests.support.factories import tracking_context
from tests.support.helpers import running_daemon

pytestmark = pytest.mark.slow


def add_run(client: httpx.Client, loss: float, rate: float) -> str:
    body = {"method": "sft", "tracking_context": tracking_context(), "config": {"learning_rate": rate}}
    run_id = str(client.post("/v1/runs", json=body).json()["record"]["run_id"])
    points = [{"metric": "train.loss", "step": 0, "value": loss}]
    body = {"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": points}
    client.post("/v1/projects/nightly/metrics", json=body).raise_for_status()
    return run_id


def shown_runs(driver: Any, made: set[str]) -> list[str]:
    from selenium.webdriver.common.by import By

    cells = driver.find_elements(By.CSS_SELECTOR, "form.runs-table tbody tr td:nth-child(2) a")
    return [c.text for c in cells if c.text in made]


def test_sort_by_a_metric_search_with_the_grammar_and_keep_the_columns(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    with running_daemon(tmp_path / "home") as daemon:
        with daemon.client() as client:
            made = [add_run(client, 0.8, 1e-5), add_run(client, 0.25, 3e-4), add_run(client, 0.5, 2e-5)]
        sign_in(browser, daemon)
        browser.get(f"{daemon.url}/ui/p/nightly")
        columns = browser.find_element(By.NAME, "columns")
        columns.send_keys("metrics.train.loss, params.learning_rate")
        columns.submit()
        header = until(lambda: browser.find_elements(By.LINK_TEXT, "metrics.train.loss"), "the metric's column")
        header[0].click()  # descending first
        until(lambda: "sort=metrics.train.loss+desc" in browser.current_url, "the page sorted by the header")
        assert shown_runs(browser, set(made)) == [made[0], made[2], made[1]]
        browser.find_element(By.PARTIAL_LINK_TEXT, "metrics.train.loss ▼").click()  # and the other way
        until(lambda: shown_runs(browser, set(made)) == [made[1], made[2], made[0]], "ascending by the loss")
        search = browser.find_element(By.NAME, "filter")
        search.send_keys("params.learning_rate < 1e-4 and metrics.train.loss > 0.3")
        search.submit()
        until(lambda: shown_runs(browser, set(made)) == [made[2], made[0]], "the runs the filter keeps, still sorted")
        shot(browser, tmp_path, "runs-table-filtered")
        search = browser.find_element(By.NAME, "filter")
        search.clear()
        search.send_keys("metrics.train.loss >")
        search.submit()
        alert = until(lambda: browser.find_elements(By.CSS_SELECTOR, "p.error[role=alert]"), "the refused filter")
        assert "a value after metrics.train.loss >" in alert[0].text
        # A new visit names no columns: the browser fills in the ones chosen for this project.
        browser.get(f"{daemon.url}/ui/p/nightly")
        until(lambda: "columns=" in browser.current_url, "the kept columns")
        assert browser.find_elements(By.LINK_TEXT, "params.learning_rate")
