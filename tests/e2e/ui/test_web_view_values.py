"""The run page's values as a reader meets them: figures rounded as the CLI rounds them (no 16-digit floats) in
tables rather than JSON, only the settings the run's method reads (all of them on request), and when the run
started, ended and how long it took."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
import pytest

from tests.e2e.ui.test_web_view_sessions import Clock, api, clock  # noqa: F401 (api, clock: fixtures)
from tests.support.factories import suite, tracking_context

pytestmark = pytest.mark.anyio
SFT_CONFIG = {"learning_rate": 0.0002, "lora_rank": 16, "use_lora": True, "dpo_beta": 0.1, "grpo_group_size": 8,
              "max_steps": 12000, "packing": "auto"}  # fmt: skip


async def test_the_run_page_shows_rounded_figures_lists_its_methods_settings_and_its_duration(
    api: httpx.AsyncClient,  # noqa: F811 (the fixture imported above)
    clock: Clock,  # noqa: F811
) -> None:
    client = api
    context = tracking_context(project_id="nightly")
    made = await client.post("/v1/runs", json={"method": "sft", "tracking_context": context, "config": SFT_CONFIG})
    run_id = made.json()["record"]["run_id"]
    attempt = f"{run_id}.a1"
    for status in ("preparing", "running"):
        moved = await client.post(
            f"/v1/projects/nightly/runs/{run_id}/transitions", json={"status": status, "attempt_id": attempt}
        )
        assert moved.status_code in {200, 201}, moved.text
    clock.now += timedelta(minutes=6, seconds=17)
    done = {"status": "completed", "attempt_id": attempt}
    assert (await client.post(f"/v1/projects/nightly/runs/{run_id}/transitions", json=done)).status_code in {200, 201}
    await client.post("/v1/projects/nightly/eval-suites", json=suite("s"))
    result = await client.post(
        "/v1/projects/nightly/eval-results",
        json={"suite_id": "s", "run_id": run_id, "metrics": {"pass_at_1": 0.5596590909090909, "timeout_rate": 0.0625}},
    )
    assert result.status_code == 201, result.text
    link = (await client.post("/v1/ui/links")).json()["url"].removeprefix("http://daemon")
    async with httpx.AsyncClient(transport=client._transport, base_url="http://daemon") as browser:
        assert (await browser.get(link)).status_code == 303
        page = (await browser.get(f"/ui/p/nightly/runs/{run_id}")).text
        every = (await browser.get(f"/ui/p/nightly/runs/{run_id}", params={"settings": "all"})).text
    assert not re.search(r"(?<![\d:])\d\.\d{6,}", page), "a float printed with every digit (a time's are fine)"
    # As `bashgym eval show` prints them (client.render.figure), in a table rather than JSON.
    assert '<th scope="row">pass_at_1</th><td>0.5597</td>' in page and "0.062" in page and '"pass_at_1"' not in page
    assert "<dt>duration</dt><dd>6 min 17 s</dd>" in page and "<dt>ended</dt>" in page
    settings = page[page.index('id="settings"') :]
    assert "learning_rate" in settings and "2.00e-04" in settings and "12,000" in settings
    assert "dpo_beta" not in settings and "grpo_group_size" not in settings  # DPO's and GRPO's, not SFT's
    assert "?settings=all" in settings
    everything = every[every.index('id="settings"') :]
    assert "dpo_beta" in everything and "grpo_group_size" in everything
