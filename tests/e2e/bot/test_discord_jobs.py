"""/jobs in Discord against a real daemon following a real (stand-in) provider fine-tune: the list shows the job, show
its upstream id and state (never its request), follow its latest observations, and cancel asks to confirm, then
cancels upstream; a person whose grant lacks training.stop is refused before any prompt, the capability named."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.bot.test_discord_bot import World, running_bot, text_of, world
from tests.support.discord_standin import ALICE_ID, BOB_ID, EPHEMERAL
from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.finetune_standin import FineTuneStandIn
from tests.support.helpers import cli_async

pytestmark = pytest.mark.anyio
KEY = "sk-provider-secret-value"
MODEL = "gpt-4o-mini-2024-07-18"
OBJECTIVE = "an objective only the request holds"


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FineTuneStandIn]:
    """The provider stand-in, configured (through the environment the daemon process inherits) as `acme`."""
    with FineTuneStandIn(api_key=KEY, models=(MODEL,)) as server:
        monkeypatch.setenv(
            "BASHGYM_PROVIDERS", json.dumps({"acme": {"base_url": server.url + "/v1", "api_key_env": "ACME_KEY"}})
        )
        monkeypatch.setenv("BASHGYM_EXTERNAL_POLL_S", "0.05")
        monkeypatch.setenv("ACME_KEY", KEY)
        yield server


async def submit(w: World) -> dict[str, Any]:
    context = tracking_context(objective=OBJECTIVE)
    request = training_request(w.tmp, sft_data(w.tmp, rows=4), base_model=MODEL, tracking_context=context)
    request = {k: v for k, v in request.items() if k in {"method", "base_model", "dataset_path", "tracking_context"}}
    async with w.admin() as admin:
        answer = await admin.post("/v1/jobs/providers/acme", json={"request": request, "cost_ceiling_usd": 25.0})
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert job["state"] == "submitted", job
    return dict(job)


async def wait_job(w: World, job: dict[str, Any], done: Any) -> dict[str, Any]:
    async with w.admin() as admin, asyncio.timeout(30):
        while True:
            shown = (await admin.get(f"/v1/projects/{job['project_id']}/jobs/{job['job_id']}")).json()
            if done(shown):
                return dict(shown)
            await asyncio.sleep(0.05)


@pytest.mark.timeout(300)
async def test_jobs_are_listed_shown_followed_and_cancelled_after_a_confirmation(
    tmp_path: Path, provider: FineTuneStandIn
) -> None:
    async with world(tmp_path) as w, running_bot(w):
        missing = await w.slash("jobs cancel", job="ext-nope")
        assert missing["flags"] & EPHEMERAL and not missing.get("components")
        assert "No external job 'ext-nope'" in text_of(missing) and "/jobs list" in text_of(missing)

        job = await submit(w)
        job_id, upstream = job["job_id"], job["upstream_job_id"]

        listed = text_of(await w.slash("jobs list", project="nightly"))
        assert job_id[:28] in listed and "submitted" in listed and "managed" in listed
        assert "(none)" in text_of(await w.slash("jobs list", state="completed"))

        shown = await w.slash("jobs show", job=job_id)
        assert f"External job {job_id}: submitted" in text_of(shown)
        assert f"upstream_job_id: {upstream}" in text_of(shown) and "provider: acme" in text_of(shown)
        assert OBJECTIVE not in text_of(shown) and "tracking_context" not in text_of(shown), "never the request"

        provider.advance(upstream, "running", metrics={"step": 1, "train_loss": 1.5})
        await wait_job(w, job, lambda j: j["compute_started"] and j["state"] == "running")
        followed = text_of(await w.slash("jobs follow", job=job_id, project="nightly"))
        assert f"External job {job_id}: running" in followed
        assert "compute: started" in followed and "[metric] Step 1" in followed, followed

        # Bob may read and launch in nightly (researcher) but not stop someone else's training.
        env = w.daemon.env()
        granted = await cli_async(
            env, "authority", "grant", "--discord-user", str(BOB_ID), "--profile", "researcher", "--project", "nightly"
        )
        assert granted.code == 0, granted.stderr
        refused = await w.slash("jobs cancel", user_id=BOB_ID, job=job_id)
        assert refused["flags"] & EPHEMERAL and not refused.get("components"), "refused before any prompt"
        assert f"discord:{BOB_ID} lacks the capability training.stop" in text_of(refused)
        assert provider.job(upstream)["status"] == "running"

        prompt = await w.slash("jobs cancel", job=job_id)
        assert f"Cancel external job {job_id}?" in text_of(prompt) and prompt.get("components")
        assert provider.job(upstream)["status"] == "running", "nothing is sent before Confirm"
        pressed = await w.standin.click(prompt, "confirm", user_id=ALICE_ID)
        await w.standin.wait_until(lambda: pressed.followup_ids or None, timeout_s=30, what="the first answer")
        ended = await w.standin.wait_until(
            lambda: "cancelled" in text_of(w.standin.message(pressed.followup_ids[0])) or None,
            timeout_s=60,
            what="the answer edited once the job ended",
        )
        assert ended
        final = text_of(w.standin.message(pressed.followup_ids[0]))
        assert f"External job {job_id} cancelled" in final and f"cancel_requested_by: discord:{ALICE_ID}" in final
        assert provider.job(upstream)["status"] == "cancelled"
        async with w.admin() as admin:
            run = (await admin.get(f"/v1/projects/nightly/runs/{job['run_id']}")).json()
        assert run["status"] == "cancelled"
