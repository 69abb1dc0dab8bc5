"""The cloud:nemo-customizer lane through the daemon's API, against a loopback NeMo Customizer stand-in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.ledger import Ledger

from tests.factories import sft_data, training_request
from tests.helpers import inprocess_daemon, wait_for_status
from tests.nemo_standin import NemoStandIn, nemo_standin

pytestmark = pytest.mark.anyio
TERMINAL = {"completed", "failed", "cancelled"}
CONFIG = "meta/llama-3.2-1b-instruct@v1.0.0+A100"
KEY = "nvapi-secret-key-value"


@pytest.fixture
def nemo() -> Iterator[NemoStandIn]:
    with nemo_standin(api_key=KEY, steps=6) as server:
        yield server


@pytest.fixture
async def api(ledger: Ledger, tmp_path: Path, nemo: NemoStandIn) -> AsyncIterator[httpx.AsyncClient]:
    async with inprocess_daemon(
        ledger, tmp_path / "home", {"NGC_API_KEY": KEY}, nemo_base_url=nemo.url, nemo_poll_s=0.05
    ) as client:
        yield client


def nemo_request(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    # base_model is a Customizer config: the job trains NVIDIA's copy, not a file of ours.
    body = training_request(tmp_path, sft_data(tmp_path), compute_target="cloud:nemo-customizer", **overrides)
    return {**body, "base_model": overrides.get("base_model", CONFIG)}


async def test_a_job_is_submitted_polled_into_the_ledger_and_its_output_model_recorded(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    started = await api.post(
        "/v1/training/start", json=nemo_request(tmp_path, num_epochs=2, nemo_dataset="team/bash-traces")
    )
    assert started.status_code == 201, started.text
    info = started.json()
    assert info["lane"] == "nemo" and info["source_run_id"].startswith("cust-")
    run = await wait_for_status(api, info["project_id"], info["run_id"], TERMINAL)
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
    assert (run["source_system"], run["source_run_id"]) == ("nemo-customizer", info["source_run_id"])

    created = next(body for method, path, body in nemo.requests if method == "POST" and path.endswith("/jobs"))
    assert created is not None
    assert created["config"] == CONFIG and created["dataset"] == {"namespace": "team", "name": "bash-traces"}
    assert created["hyperparameters"]["training_type"] == "sft"
    assert created["hyperparameters"]["epochs"] == 2 and created["hyperparameters"]["finetuning_type"] == "lora"

    assert run["metric_summary"]["train.loss"]["count"] == 6
    assert run["metric_summary"]["train.loss"]["latest"] == run["metric_summary"]["train.loss"]["min"], "it fell"
    (artifact,) = run["artifacts"]
    assert artifact["kind"] == "model_reference" and artifact["uri"].startswith("nemo-customizer://models/")
    events = (await api.get(f"/v1/projects/{info['project_id']}/events", params={"limit": 500})).json()["events"]
    kinds = [e["event_type"] for e in events if e["run_id"] == info["run_id"]]
    assert kinds.index("run.queued") < kinds.index("run.started") < kinds.index("run.completed")
    assert "run.remote_log" in kinds
    assert KEY not in str(events)


async def test_a_failed_job_is_failed_with_the_reason_customizer_gave(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    nemo.next_outcome = "failed"
    info = (await api.post("/v1/training/start", json=nemo_request(tmp_path))).json()
    run = await wait_for_status(api, info["project_id"], info["run_id"], TERMINAL)
    assert run["status"] == "failed"
    assert "CUDA out of memory" in run["attempts"][-1]["error_summary"]
    assert run["artifacts"] == []


async def test_stop_cancels_the_job_and_pause_is_refused(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    nemo.steps = 100_000
    info = (await api.post("/v1/training/start", json=nemo_request(tmp_path))).json()
    project, run_id = info["project_id"], info["run_id"]
    await wait_for_status(api, project, run_id, {"running"})
    paused = await api.post(f"/v1/projects/{project}/runs/{run_id}/pause")
    assert paused.status_code == 409 and "cannot pause" in paused.json()["error"]["message"]
    stopped = await api.post(f"/v1/projects/{project}/runs/{run_id}/stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "cancelled"
    assert ("POST", f"/v1/customization/jobs/{info['source_run_id']}/cancel") in [(m, p) for m, p, _ in nemo.requests]
    assert nemo.jobs[info["source_run_id"]]["status"] == "cancelled"


async def test_what_customizer_cannot_run_is_refused_before_submission(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    dpo = await api.post("/v1/training/start", json={**nemo_request(tmp_path), "strategy": "dpo"})
    assert dpo.status_code == 422 and "sft only" in dpo.json()["error"]["message"]
    local_model = await api.post("/v1/training/start", json=nemo_request(tmp_path, base_model=str(tmp_path)))
    assert local_model.status_code == 422 and "local path" in local_model.json()["error"]["message"]
    assert nemo.requests == [], "nothing reached Customizer"
    plan = (await api.post("/v1/training/plan", json=nemo_request(tmp_path))).json()
    assert plan["lane_preflight"]["ready"] is True


async def test_the_lane_is_refused_when_the_daemon_has_no_customizer(ledger: Ledger, tmp_path: Path) -> None:
    async with inprocess_daemon(ledger, tmp_path / "home") as client:
        refused = await client.post("/v1/training/start", json=nemo_request(tmp_path))
    assert refused.status_code == 422
    assert "BASHGYM_NEMO_BASE_URL" in refused.json()["error"]["hint"]
