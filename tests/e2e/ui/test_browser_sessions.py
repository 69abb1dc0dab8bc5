"""In headless Chromium: a deep link opened signed out comes back after sign-in, the session survives a daemon
restart, and the pages hold at 800 px and at a phone's 390 px (no sideways page scroll, no header broken mid-word).
Uses test_browser.py's fixture and helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.ui.test_browser import browser, run_with_points, shot, until  # noqa: F401 (browser: a fixture)
from tests.support.factories import campaign_spec
from tests.support.helpers import running_daemon

pytestmark = pytest.mark.slow
# Every header's width and height, its computed white-space, and whether the page scrolls sideways.
MEASURE = """
const heads = [...document.querySelectorAll('th')].map(th => {
  const style = getComputedStyle(th);
  return {text: th.textContent, height: th.getBoundingClientRect().height, lineHeight: parseFloat(style.lineHeight),
          whiteSpace: style.whiteSpace};
});
return {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, heads: heads};
"""


def test_a_deep_link_survives_sign_in_and_the_session_a_restart_and_pages_fit_narrow_windows(
    browser: Any,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with running_daemon(home) as daemon, daemon.client() as admin:
        run_id = run_with_points(admin, "nightly", 20)
        deep = f"{daemon.url}/ui/p/nightly/runs/{run_id}"
        browser.get(deep)
        assert "Sign in" in browser.title
        link = admin.post("/v1/ui/links").json()["url"]
        browser.get(link)
        until(lambda: browser.current_url == deep, "the deep link's page after signing in")
        assert run_id in browser.title
    with running_daemon(home) as daemon, daemon.client() as admin:
        browser.get(f"{daemon.url}/ui/p/nightly/runs/{run_id}")
        assert run_id in browser.title, "the session did not survive the restart"
        spec = campaign_spec(campaign_id="c-narrow", report_schedule=None, primary_metric="pass@1")
        assert admin.post("/v1/projects/nightly/campaigns", json=spec).status_code == 201
        proposal = {"primary_variable": "learning_rate", "value": 1e-4, "rationale": "a smaller step"}
        assert admin.post("/v1/projects/nightly/campaigns/c-narrow/propose", json=proposal).status_code == 201
        campaign = "/ui/p/nightly/campaigns/c-narrow"  # its iterations table has the most columns
        for width in (800, 390):
            browser.set_window_size(width, 900)
            for page in (f"/ui/p/nightly/runs/{run_id}", "/ui/p/nightly", "/ui", campaign):
                browser.get(f"{daemon.url}{page}")
                measured = browser.execute_script(MEASURE)
                assert measured["innerWidth"] <= width, measured["innerWidth"]
                assert measured["scrollWidth"] <= measured["innerWidth"], (width, page, measured["scrollWidth"])
                for head in measured["heads"]:
                    assert head["whiteSpace"] == "nowrap", (width, page, head)
                    assert head["height"] < 2 * head["lineHeight"] + 16, (width, page, head)  # one line, padded
            assert "Iterations and their decisions" in browser.page_source
            shot(browser, tmp_path, f"campaign-{width}px")
