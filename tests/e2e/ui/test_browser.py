"""The web view in a real headless Chromium (Debian's chromium and chromium-driver, driven by Selenium; nothing
downloads a browser): sign in through the one-time link, see a run in the runs table and its points in its chart,
overlay two runs, watch a live run's chart grow, and see nothing of another project from a second token.
Screenshots of each page go to the test's folder (and, with BASHGYM_UI_SCREENSHOTS=DIR, to DIR: README's come from
there)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, eventually, running_daemon

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (make setup installs it)")
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium and chromium-driver here: .ci/run and make setup install Debian's where they can")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def run_with_points(client: httpx.Client, project: str, points: int, *, timed: bool = False) -> str:
    context = tracking_context(project_id=project)
    answer = client.post("/v1/runs", json={"method": "sft", "tracking_context": context})
    run_id = str(answer.json()["record"]["run_id"])
    add_points(client, project, run_id, range(points), timed=timed)
    return run_id


def add_points(client: httpx.Client, project: str, run_id: str, steps: range, *, timed: bool = False) -> None:
    points: list[dict[str, Any]] = [{"metric": "train.loss", "step": s, "value": 1.0 / (s + 1)} for s in steps]
    for point in points if timed else []:
        point["time"] = 1_767_225_600.0 + 2.0 * point["step"]  # a point every 2 s from 2026-01-01
    body = {"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": points}
    client.post(f"/v1/projects/{project}/metrics", json=body).raise_for_status()


def until(check: Any, what: str, timeout_s: float = 20) -> Any:
    return eventually(what, check, timeout_s)


def shot(driver: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("BASHGYM_UI_SCREENSHOTS"):
        target = Path(os.environ["BASHGYM_UI_SCREENSHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)


def sign_in(driver: Any, daemon: RunningDaemon, token: str | None = None) -> None:
    with daemon.client(token) as client:
        link = client.post("/v1/ui/links").json()["url"]
    driver.delete_all_cookies()
    driver.get(link)
    until(lambda: driver.current_url.endswith("/ui"), "the projects page after signing in")


def note_points(driver: Any) -> int:
    from selenium.webdriver.common.by import By

    notes = driver.find_elements(By.CSS_SELECTOR, "figure.chart .note")
    text = notes[0].text if notes else ""
    return int(text.split()[0]) if text[:1].isdigit() else -1


def test_signed_in_pages_show_runs_curves_and_comparisons_and_nothing_of_another_project(
    browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with running_daemon(tmp_path / "home") as daemon, daemon.client() as admin:
        first, second = run_with_points(admin, "nightly", 300, timed=True), run_with_points(admin, "nightly", 200)
        hidden = run_with_points(admin, "secret", 10)
        sign_in(browser, daemon)
        shot(browser, tmp_path, "ui-projects")
        browser.find_element(By.LINK_TEXT, "nightly").click()
        until(lambda: first in browser.page_source, "the run in the runs table")
        shot(browser, tmp_path, "ui-runs")

        browser.get(f"{daemon.url}/ui/p/nightly/runs/{first}")
        until(lambda: browser.find_elements(By.CSS_SELECTOR, "figure.chart canvas"), "the chart drawn")
        assert until(lambda: note_points(browser) == 300, "the run's 300 points in its chart")
        shot(browser, tmp_path, "ui-run")
        Select(browser.find_element(By.CSS_SELECTOR, "figure.chart select")).select_by_value("wall")
        legend = lambda: " ".join(e.text for e in browser.find_elements(By.CSS_SELECTOR, ".u-legend .u-series"))  # noqa: E731
        assert until(lambda: "wall clock" in legend(), "the wall-clock axis in the legend")
        assert "no recorded time" not in browser.find_element(By.CSS_SELECTOR, "figure.chart .note").text
        shot(browser, tmp_path, "ui-run-wall-clock")

        browser.get(f"{daemon.url}/ui/p/nightly/compare?run={first}&run={second}")
        until(lambda: browser.find_elements(By.CSS_SELECTOR, "figure.chart canvas"), "the overlay drawn")
        legend = until(lambda: browser.find_elements(By.CSS_SELECTOR, ".u-legend .u-series"), "the legend")
        labels = " ".join(item.text for item in legend)
        assert first in labels and second in labels
        assert note_points(browser) == 500
        shot(browser, tmp_path, "ui-compare")
        Select(browser.find_element(By.CSS_SELECTOR, "figure.chart select")).select_by_value("elapsed")
        note = browser.find_element(By.CSS_SELECTOR, "figure.chart .note")
        assert until(lambda: "200 shown have no recorded time" in note.text, "the untimed run's points left off")

        scoped = {"actor_id": "rita", "profile": "researcher", "project_id": "secret"}
        issued = admin.post("/v1/auth/tokens", json=scoped)
        sign_in(browser, daemon, issued.json()["token"])
        assert "nightly" not in browser.find_element(By.TAG_NAME, "main").text
        browser.get(f"{daemon.url}/ui/p/nightly/runs/{first}")
        main = browser.find_element(By.TAG_NAME, "main").text
        assert "Not yours to read" in browser.page_source and first not in main
        browser.get(f"{daemon.url}/ui/p/secret/runs/{hidden}")
        assert hidden in browser.page_source


def test_a_live_runs_chart_grows_as_points_arrive(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with running_daemon(tmp_path / "home") as daemon, daemon.client() as admin:
        run_id = run_with_points(admin, "nightly", 10)
        admin.post(f"/v1/projects/nightly/runs/{run_id}/transitions", json={"status": "running"}).raise_for_status()
        sign_in(browser, daemon)
        browser.get(f"{daemon.url}/ui/p/nightly/runs/{run_id}")
        until(lambda: browser.find_elements(By.CSS_SELECTOR, "figure.chart canvas"), "the chart drawn")
        until(lambda: note_points(browser) == 10, "the first 10 points")
        writer = threading.Thread(target=add_points, args=(admin, "nightly", run_id, range(10, 20)))
        writer.start()
        writer.join()
        # The page hears of the points on its event stream and redraws; no reload, no series polling.
        until(lambda: note_points(browser) == 20, "the new points drawn on the live chart", timeout_s=10)
        shot(browser, tmp_path, "ui-live")


def test_a_runs_system_series_are_drawn_in_a_section_of_their_own(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with running_daemon(tmp_path / "home") as daemon, daemon.client() as admin:
        run_id = run_with_points(admin, "nightly", 20)
        system = [{"metric": "system.cpu_percent", "step": s, "value": 50.0 + s} for s in range(0, 20, 5)]
        body = {"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": system}
        admin.post("/v1/projects/nightly/metrics", json=body).raise_for_status()
        sign_in(browser, daemon)
        browser.get(f"{daemon.url}/ui/p/nightly/runs/{run_id}")
        until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "figure.chart canvas")) >= 2, "both charts drawn")
        headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
        assert headings.index("Metrics") < headings.index("System"), headings
        # The System heading's next figure is the system series', drawn from its 4 points.
        figure = browser.find_element(By.XPATH, "//h2[text()='System']/following-sibling::figure[1]")
        assert figure.find_element(By.TAG_NAME, "figcaption").text == "system.cpu_percent"
        assert until(lambda: figure.find_element(By.CSS_SELECTOR, ".note").text.startswith("4 "), "its 4 points")
        shot(browser, tmp_path, "ui-run-system")
