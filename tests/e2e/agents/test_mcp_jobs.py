"""External jobs as an agent meets them over MCP, against a real daemon following a (stand-in) provider fine-tune:
listed and shown with their last observations for a reader, cancelled only on a confirmation by a token that holds
training.stop, and never offered for cancelling to one that does not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.finetune_standin import FineTuneStandIn
from tests.support.helpers import RunningDaemon, running_daemon
from tests.support.mcp_client import call, session

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]
KEY = "sk-provider-secret-value"
MODEL = "gpt-4o-mini-2024-07-18"


@pytest.fixture
def provider() -> Iterator[FineTuneStandIn]:
    with FineTuneStandIn(api_key=KEY, models=(MODEL,)) as server:
        yield server


@pytest.fixture
def daemon(tmp_path: Path, provider: FineTuneStandIn) -> Iterator[RunningDaemon]:
    env = {
        "BASHGYM_PROVIDERS": json.dumps({"acme": {"base_url": provider.url + "/v1", "api_key_env": "ACME_KEY"}}),
        "BASHGYM_EXTERNAL_POLL_S": "0.05",
        "ACME_KEY": KEY,
    }
    with running_daemon(tmp_path / "home", env=env) as running:
        yield running


def submitted(daemon: RunningDaemon, tmp_path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A provider job in project nightly, and a token of each profile."""
    request = training_request(
        tmp_path, sft_data(tmp_path, rows=4), base_model=MODEL, tracking_context=tracking_context()
    )
    request = {k: v for k, v in request.items() if k in {"method", "base_model", "dataset_path", "tracking_context"}}
    with daemon.client() as client:
        answer = client.post("/v1/jobs/providers/acme", json={"request": request, "cost_ceiling_usd": 25.0})
        assert answer.status_code == 201, answer.text
        tokens = {}
        for profile in ("viewer", "admin"):
            issued = client.post("/v1/auth/tokens", json={"actor_id": f"{profile}-agent", "profile": profile})
            assert issued.status_code == 201, issued.text
            tokens[profile] = issued.json()["token"]
    return answer.json(), tokens


def wait_state(daemon: RunningDaemon, job: dict[str, Any], state: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    with daemon.client() as client:
        while time.monotonic() < deadline:
            shown = client.get(f"/v1/projects/{job['project_id']}/jobs/{job['job_id']}").json()
            if shown["state"] == state:
                return dict(shown)
            time.sleep(0.05)
    raise AssertionError(f"job {job['job_id']} never reached {state}")


async def test_a_reader_lists_and_shows_jobs_and_an_admin_cancels_one_once_confirmed(
    daemon: RunningDaemon, provider: FineTuneStandIn, tmp_path: Path
) -> None:
    job, tokens = submitted(daemon, tmp_path)
    job_id, upstream = job["job_id"], job["upstream_job_id"]

    async with session(daemon, tokens["viewer"]) as opened:
        tools = {tool.name: tool for tool in (await opened.list_tools()).tools}
        assert {"list_external_jobs", "show_external_job"} <= set(tools) and "cancel_external_job" not in tools
        assert tools["show_external_job"].annotations.read_only_hint is True  # type: ignore[union-attr]
        failed, listed = await call(opened, "list_external_jobs", {"project": "nightly", "state": "submitted"})
        assert not failed, listed
        assert [(j["job_id"], j["upstream_job_id"]) for j in listed["jobs"]] == [(job_id, upstream)]
        _, none = await call(opened, "list_external_jobs", {"state": "completed"})
        assert none["jobs"] == []
        failed, shown = await call(opened, "show_external_job", {"job_id": job_id})  # its project found from the id
        assert not failed, shown
        assert (shown["state"], shown["upstream_job_id"], shown["compute_started"]) == ("submitted", upstream, False)
        assert shown["observations"][0]["kind"] == "receipt"
        failed, said = await call(opened, "show_external_job", {"job_id": "ext-nope"})
        assert failed and "No external job 'ext-nope'" in said and "list_external_jobs" in said

    async with session(daemon, tokens["admin"]) as opened:
        tool = next(t for t in (await opened.list_tools()).tools if t.name == "cancel_external_job")
        assert tool.annotations.destructive_hint is True  # type: ignore[union-attr]
        failed, said = await call(opened, "cancel_external_job", {"job_id": job_id, "project": "nightly"})
        assert failed and "confirm: true" in said and "Nothing was done" in said
        assert provider.job(upstream)["status"] != "cancelled"
        failed, cancelled = await call(opened, "cancel_external_job", {"job_id": job_id, "confirm": True})
        assert not failed, cancelled
        assert cancelled["cancel_requested_by"] == "admin-agent"
    ended = wait_state(daemon, job, "cancelled")
    assert provider.job(upstream)["status"] == "cancelled" and ended["cancel_requested_by"] == "admin-agent"
