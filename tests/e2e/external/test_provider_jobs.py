"""Managed provider fine-tunes through the daemon's API, against a loopback stand-in of the OpenAI-compatible
fine-tuning API driven by the real `openai` client: submit, poll, events as observations, the provider's model id as
the result, cancellation with its actor, failures, and a provider that answers 429 and 5xx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.ledger.store import Ledger

from tests.support.factories import sft_data, training_request
from tests.support.finetune_standin import FineTuneStandIn
from tests.support.helpers import inprocess_daemon, wait_for_status
from tests.support.helpers import wait_external_job as wait_job

pytestmark = pytest.mark.anyio
KEY = "sk-provider-secret-value"
MODEL = "gpt-4o-mini-2024-07-18"


@pytest.fixture
def provider() -> Iterator[FineTuneStandIn]:
    with FineTuneStandIn(api_key=KEY, models=(MODEL,)) as server:
        yield server


@pytest.fixture
async def api(ledger: Ledger, tmp_path: Path, provider: FineTuneStandIn) -> AsyncIterator[httpx.AsyncClient]:
    providers = {"acme": {"base_url": provider.url + "/v1", "api_key_env": "ACME_KEY"}}
    async with inprocess_daemon(
        ledger, tmp_path / "home", {"ACME_KEY": KEY}, providers=providers, external_poll_s=0.05
    ) as client:
        yield client


def submission(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    request = training_request(tmp_path, sft_data(tmp_path, rows=4), base_model=MODEL)
    request = {k: v for k, v in request.items() if k in {"method", "base_model", "dataset_path", "tracking_context"}}
    return {"request": request, "hyperparameters": {"n_epochs": 2}, "cost_ceiling_usd": 25.0, **overrides}


async def observations(api: httpx.AsyncClient, job: dict[str, Any]) -> list[dict[str, Any]]:
    page = await api.get(f"/v1/projects/{job['project_id']}/jobs/{job['job_id']}/observations")
    return list(page.json()["observations"])


async def test_a_fine_tune_is_uploaded_submitted_polled_and_its_model_recorded(
    api: httpx.AsyncClient, provider: FineTuneStandIn, tmp_path: Path
) -> None:
    answer = await api.post("/v1/jobs/providers/acme", json=submission(tmp_path, suffix="nightly"))
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert job["state"] == "submitted" and job["surface"] == "managed" and job["provider"] == "acme"
    upstream = job["upstream_job_id"]
    created = provider.job(upstream)
    # What the provider received: our rows in its chat format, the job's identity in metadata, our seed.
    assert created["metadata"] == {"bashgym_job": job["job_id"]} and created["user_provided_suffix"] == "nightly"
    sent = provider.state.files[created["training_file"]].content.decode().splitlines()
    assert json.loads(sent[0])["messages"][1] == {"role": "assistant", "content": "wc -l notes0.txt"}
    run = (await api.get(f"/v1/projects/nightly/runs/{job['run_id']}")).json()
    assert run["status"] == "preparing" and run["config"]["compute_target"] == "managed:acme"

    provider.advance(upstream, "running")
    await wait_job(api, job, {"running"})
    run = (await api.get(f"/v1/projects/nightly/runs/{job['run_id']}")).json()
    assert run["status"] == "preparing", "a provider saying running is no proof that compute started"
    provider.advance(upstream, "running", metrics={"step": 1, "train_loss": 1.5})
    await wait_for_status(api, "nightly", job["run_id"], {"running"}, timeout_s=30)
    provider.advance(upstream, "succeeded")
    done = await wait_job(api, job, {"completed"})
    run = await wait_for_status(api, "nightly", job["run_id"], {"completed"}, timeout_s=30)

    assert done["result"]["fine_tuned_model"] == provider.job(upstream)["fine_tuned_model"]
    assert done["compute_started"] is True
    assert [a["kind"] for a in run["artifacts"]] == ["model_reference"]
    assert run["artifacts"][0]["uri"] == f"managed://acme/{done['result']['fine_tuned_model']}"
    assert run["metric_summary"]["train.loss"]["latest"] == 1.5
    kinds = [item["kind"] for item in await observations(api, job)]
    assert kinds[0] == "receipt" and "metric" in kinds and "result" in kinds
    assert kinds.count("state") >= 2
    assert len([r for r in provider.state.requests if r.method == "POST" and r.path == "/v1/fine_tuning/jobs"]) == 1


async def test_a_failed_fine_tune_fails_its_run_with_the_providers_reason(
    api: httpx.AsyncClient, provider: FineTuneStandIn, tmp_path: Path
) -> None:
    job = (await api.post("/v1/jobs/providers/acme", json=submission(tmp_path))).json()
    provider.advance(job["upstream_job_id"], "failed", error="the training file has too few examples")
    shown = await wait_job(api, job, {"failed"})
    run = await wait_for_status(api, "nightly", job["run_id"], {"failed"}, timeout_s=30)
    assert "too few examples" in shown["reason"]
    assert "too few examples" in json.dumps(run["attempts"]), run


async def test_a_cancel_is_recorded_with_its_actor_and_the_provider_cancels(
    api: httpx.AsyncClient, provider: FineTuneStandIn, tmp_path: Path
) -> None:
    job = (await api.post("/v1/jobs/providers/acme", json=submission(tmp_path))).json()
    provider.advance(job["upstream_job_id"], "running")
    answer = await api.post(f"/v1/projects/nightly/jobs/{job['job_id']}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json()["cancel_requested_by"] == "admin"
    await wait_job(api, job, {"cancelled"})
    await wait_for_status(api, "nightly", job["run_id"], {"cancelled"}, timeout_s=30)
    assert provider.job(job["upstream_job_id"])["status"] == "cancelled"
    cancels = [o for o in await observations(api, job) if o["kind"] == "cancel"]
    assert cancels and cancels[0]["observed_by"] == "admin"
    again = await api.post(f"/v1/projects/nightly/jobs/{job['job_id']}/cancel")
    assert again.status_code == 409 and "nothing to cancel" in again.json()["error"]["message"]


async def test_stopping_the_run_cancels_the_upstream_job(
    api: httpx.AsyncClient, provider: FineTuneStandIn, tmp_path: Path
) -> None:
    job = (await api.post("/v1/jobs/providers/acme", json=submission(tmp_path))).json()
    answer = await api.post(f"/v1/projects/nightly/runs/{job['run_id']}/stop")
    assert answer.status_code == 200, answer.text
    assert answer.json()["external_job"]["cancel_requested_by"] == "admin"
    await wait_for_status(api, "nightly", job["run_id"], {"cancelled"}, timeout_s=30)
    assert provider.job(job["upstream_job_id"])["status"] == "cancelled"


async def test_a_provider_answering_429_then_5xx_is_retried_and_followed_without_a_second_job(
    api: httpx.AsyncClient, provider: FineTuneStandIn, tmp_path: Path
) -> None:
    provider.fail_next(429, 2, retry_after=0.01)
    job = (await api.post("/v1/jobs/providers/acme", json=submission(tmp_path))).json()
    assert job["state"] == "submitted", job
    provider.fail_next(503, 3, retry_after=0.01)
    provider.advance(job["upstream_job_id"], "succeeded")
    await wait_job(api, job, {"completed"})
    assert len([r for r in provider.state.requests if r.path == "/v1/fine_tuning/jobs" and r.method == "POST"]) == 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"request": {"method": "grpo"}}, "sft or dpo"),
        ({"provider": "nobody"}, "No provider 'nobody'"),
        ({"key": ""}, "key is not set"),
        ({"request": {"dataset_path": "/etc/shadow"}}, "dataset"),
    ],
)
async def test_what_the_provider_cannot_take_is_refused_before_anything_is_submitted(
    ledger: Ledger, tmp_path: Path, provider: FineTuneStandIn, change: dict[str, Any], expected: str
) -> None:
    providers = {"acme": {"base_url": provider.url + "/v1", "api_key_env": "ACME_KEY"}}
    environ = {"ACME_KEY": change.get("key", KEY)}
    async with inprocess_daemon(ledger, tmp_path / "home", environ, providers=providers) as api:
        body = submission(tmp_path)
        body["request"].update(change.get("request", {}))
        answer = await api.post(f"/v1/jobs/providers/{change.get('provider', 'acme')}", json=body)
        assert answer.status_code in {403, 404, 422}, answer.text
        assert expected in answer.text
        assert (await api.get("/v1/jobs")).json()["jobs"] == []
    assert not [r for r in provider.state.requests if r.path == "/v1/fine_tuning/jobs"]
