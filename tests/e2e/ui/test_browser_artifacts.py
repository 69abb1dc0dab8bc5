"""A run's artifact downloaded from its page in a real headless Chromium (issue 54's acceptance): the link on the
run page saves a file whose sha256 is the one the ledger recorded."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.ui.test_browser import CHROMIUM, DRIVER, shot, sign_in, until
from tests.support.factories import tracking_context
from tests.support.helpers import running_daemon

pytestmark = pytest.mark.slow
ADAPTER = bytes(range(256)) * 1000


@pytest.fixture
def downloads(tmp_path: Path) -> Path:
    return tmp_path / "downloads"


@pytest.fixture
def browser(downloads: Path) -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (make setup installs it)")
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium and chromium-driver here: .ci/run and make setup install Debian's where they can")
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    try:
        yield driver
    finally:
        driver.quit()


def test_an_artifact_downloaded_from_the_run_page_has_its_recorded_sha256(
    browser: Any, downloads: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    with running_daemon(tmp_path / "home") as daemon, daemon.client() as admin:
        answer = admin.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()})
        run_id = str(answer.json()["record"]["run_id"])
        final = daemon.home / "runs" / run_id / "final"
        final.mkdir(parents=True)
        (final / "adapter_model.safetensors").write_bytes(ADAPTER)
        recorded = hashlib.sha256(ADAPTER).hexdigest()
        body = {"run_id": run_id, "kind": "adapter", "uri": f"bashgym://runs/{run_id}/final/adapter_model.safetensors",
                "sha256": recorded, "size_bytes": len(ADAPTER)}  # fmt: skip
        assert admin.post("/v1/projects/nightly/artifacts", json=body).status_code == 201
        sign_in(browser, daemon)
        browser.get(f"{daemon.url}/ui/p/nightly/runs/{run_id}")
        shot(browser, tmp_path, "ui-run-artifacts")
        assert recorded in browser.page_source
        browser.find_element(By.LINK_TEXT, "final/adapter_model.safetensors").click()
        saved = downloads / "adapter_model.safetensors"
        until(lambda: saved.is_file() and saved.stat().st_size == len(ADAPTER), "the downloaded file", timeout_s=30)
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == recorded
