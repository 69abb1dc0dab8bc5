"""The cloud:nemo-customizer lane through the daemon's API, against loopback stand-ins of NeMo Customizer, its Entity
Store and its Data Store."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.ledger.store import Ledger

from tests.support.factories import sft_data, training_request
from tests.support.helpers import inprocess_daemon, wait_for_status
from tests.support.nemo_standin import NemoStandIn, nemo_standin

pytestmark = pytest.mark.anyio
TERMINAL = {"completed", "failed", "cancelled"}
CONFIG = "meta/llama-3.2-1b-instruct@v1.0.0+A100"
KEY = "nvapi-secret-key-value"
# What the factory sets for our own trainers and NeMo Customizer never receives (the lane refuses it when sent).
TRAINER_ONLY = ("max_steps", "gradient_accumulation_steps", "save_steps", "max_seq_length")


@pytest.fixture
def nemo() -> Iterator[NemoStandIn]:
    with nemo_standin(api_key=KEY, steps=6) as server:
        yield server


@pytest.fixture
async def api(ledger: Ledger, tmp_path: Path, nemo: NemoStandIn) -> AsyncIterator[httpx.AsyncClient]:
    async with inprocess_daemon(
        ledger,
        tmp_path / "home",
        {"NGC_API_KEY": KEY},
        nemo_base_url=nemo.url,
        nemo_datastore_url=nemo.datastore_url,
        nemo_poll_s=0.05,
    ) as client:
        yield client


def nemo_request(tmp_path: Path, data: Path | None = None, **overrides: Any) -> dict[str, Any]:
    # base_model is a Customizer config: the job trains NVIDIA's copy, not a file of ours.
    fields = {"compute_target": "cloud:nemo-customizer", "base_model": CONFIG, **overrides}
    body = training_request(tmp_path, data or sft_data(tmp_path), **fields)
    return {k: v for k, v in body.items() if k not in TRAINER_ONLY or k in overrides}


def dpo_data(tmp: Path, rows: int = 4) -> Path:
    path = tmp / "dpo.jsonl"
    lines = [
        {"prompt": f"List the files in dir{i}", "chosen": f"ls dir{i}", "rejected": f"cat dir{i}"} for i in range(rows)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def created_jobs(nemo: NemoStandIn) -> list[dict[str, Any]]:
    return [
        body for method, path, body in nemo.requests if (method, path) == ("POST", "/v1/customization/jobs") and body
    ]


async def test_a_job_is_submitted_on_the_uploaded_dataset_polled_and_its_output_model_recorded(
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

    # The validated rows went to the Data Store as chat rows, registered under the name the request gave.
    uploaded = nemo.uploaded("team/bash-traces")["training/training.jsonl"]
    source = (tmp_path / "sft.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in uploaded.decode().splitlines()] == [
        {"messages": json.loads(line)["messages"]} for line in source
    ]
    record = run["config"]["nemo_upload"]
    assert record["dataset_id"] == "team/bash-traces"
    assert record["sha256"] == hashlib.sha256(uploaded).hexdigest()
    assert nemo.datasets["team/bash-traces"]["custom_fields"] == {"bashgym_sha256": record["sha256"]}
    (created,) = created_jobs(nemo)
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
    assert KEY not in str(events) and KEY not in json.dumps(run)


async def test_a_dataset_without_a_name_is_named_by_the_digest_of_its_uploaded_bytes(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    info = (await api.post("/v1/training/start", json=nemo_request(tmp_path))).json()
    run = (await api.get(f"/v1/projects/{info['project_id']}/runs/{info['run_id']}")).json()
    record = run["config"]["nemo_upload"]
    assert record["dataset_id"] == f"default/bashgym-{record['sha256'][:12]}"
    held = nemo.uploaded(record["dataset_id"])["training/training.jsonl"]
    assert hashlib.sha256(held).hexdigest() == record["sha256"]
    (created,) = created_jobs(nemo)
    assert f"{created['dataset']['namespace']}/{created['dataset']['name']}" == record["dataset_id"]
    await api.post(f"/v1/projects/{info['project_id']}/runs/{info['run_id']}/stop")


async def test_a_dpo_launch_uploads_preference_rows_and_trains_all_weights(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    body = nemo_request(tmp_path, dpo_data(tmp_path), strategy="dpo", dpo_beta=0.2, use_lora=False)
    started = await api.post("/v1/training/start", json=body)
    assert started.status_code == 201, started.text
    info = started.json()
    run = await wait_for_status(api, info["project_id"], info["run_id"], TERMINAL)
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]

    (created,) = created_jobs(nemo)
    hyper = created["hyperparameters"]
    assert (hyper["training_type"], hyper["finetuning_type"], hyper["dpo"]) == (
        "dpo",
        "all_weights",
        {"ref_policy_kl_penalty": 0.2},
    )
    assert "lora" not in hyper
    rows = nemo.uploaded(run["config"]["nemo_upload"]["dataset_id"])["training/training.jsonl"].decode().splitlines()
    assert json.loads(rows[0]) == {
        "prompt": "List the files in dir0",
        "chosen_response": "ls dir0",
        "rejected_response": "cat dir0",
    }


async def test_plan_says_a_nemo_run_cannot_pause_and_pause_is_refused_naming_why(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    plan = (await api.post("/v1/training/plan", json=nemo_request(tmp_path))).json()
    assert plan["ready"] is True, plan["reasons"]
    pause = plan["lane_capabilities"]["pause"]
    assert pause["supported"] is False and "offers only cancel" in pause["reason"]
    assert plan["lane_capabilities"]["stop"]["supported"] is True
    assert plan["lane_preflight"]["facts"]["hyperparameters"]["training_type"] == "sft"
    assert nemo.requests == [] and nemo.datastore.state.requests == [], "plan sends nothing"

    nemo.steps = 100_000
    info = (await api.post("/v1/training/start", json=nemo_request(tmp_path))).json()
    project, run_id = info["project_id"], info["run_id"]
    early = await api.post(f"/v1/projects/{project}/runs/{run_id}/pause")  # queued or preparing: the same reason
    assert early.status_code == 409 and "cannot pause" in early.json()["error"]["message"], early.text
    await wait_for_status(api, project, run_id, {"running"})
    paused = await api.post(f"/v1/projects/{project}/runs/{run_id}/pause")
    assert paused.status_code == 409
    assert "cannot pause: its API offers only cancel" in paused.json()["error"]["message"]
    assert not any(path.endswith("/cancel") for _, path, _ in nemo.requests), "pause touched nothing"
    stopped = await api.post(f"/v1/projects/{project}/runs/{run_id}/stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "cancelled"
    assert ("POST", f"/v1/customization/jobs/{info['source_run_id']}/cancel") in [(m, p) for m, p, _ in nemo.requests]
    assert nemo.jobs[info["source_run_id"]]["status"] == "cancelled"


async def test_what_the_lane_cannot_run_is_refused_at_plan_and_launch_before_submission(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    grpo = {**nemo_request(tmp_path), "method": "grpo"}
    plan = (await api.post("/v1/training/plan", json=grpo)).json()
    assert plan["ready"] is False and plan["lane_capabilities"]["pause"]["supported"] is False
    assert any("runs sft and dpo" in reason for reason in plan["reasons"])
    launch = await api.post("/v1/training/start", json=grpo)
    assert launch.status_code == 422 and "it runs sft and dpo" in launch.json()["error"]["message"]
    local_model = await api.post("/v1/training/start", json=nemo_request(tmp_path, base_model=str(tmp_path)))
    assert local_model.status_code == 422 and "local path" in local_model.json()["error"]["message"]
    unread = await api.post("/v1/training/start", json=nemo_request(tmp_path, gradient_accumulation_steps=2))
    assert unread.status_code == 422 and "`gradient_accumulation_steps` is not sent" in unread.text
    assert nemo.requests == [] and nemo.datastore.state.requests == [], "nothing reached NeMo"


@pytest.mark.parametrize(("status", "setting"), [(500, "nemo_datastore_url"), (401, "nemo_api_key_env")])
async def test_a_failed_upload_refuses_the_launch_and_registers_no_run(
    api: httpx.AsyncClient, nemo: NemoStandIn, ledger: Ledger, tmp_path: Path, status: int, setting: str
) -> None:
    nemo.datastore.state.fail_with = status
    refused = await api.post("/v1/training/start", json=nemo_request(tmp_path))
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert "could not be published to NeMo" in error["message"] and setting in error["message"]
    assert "no run was registered" in error["hint"]
    assert KEY not in refused.text
    assert created_jobs(nemo) == [] and nemo.datasets == {}
    assert await ledger.active_runs() == []


async def test_a_named_dataset_holding_other_content_is_refused_untouched(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    nemo.seed_dataset("team/shared", [{"messages": [{"role": "assistant", "content": "theirs"}]}])
    refused = await api.post("/v1/training/start", json=nemo_request(tmp_path, nemo_dataset="team/shared"))
    assert refused.status_code == 422
    assert "already registers dataset team/shared with other content" in refused.json()["error"]["message"]
    assert nemo.datastore.state.repos["team/shared"].commits == [] and created_jobs(nemo) == []


async def test_a_failed_job_is_failed_with_the_reason_customizer_gave(
    api: httpx.AsyncClient, nemo: NemoStandIn, tmp_path: Path
) -> None:
    nemo.next_outcome = "failed"
    info = (await api.post("/v1/training/start", json=nemo_request(tmp_path))).json()
    run = await wait_for_status(api, info["project_id"], info["run_id"], TERMINAL)
    assert run["status"] == "failed"
    assert "CUDA out of memory" in run["attempts"][-1]["error_summary"]
    assert run["artifacts"] == []


async def test_the_lane_is_refused_when_the_daemon_has_no_customizer(ledger: Ledger, tmp_path: Path) -> None:
    async with inprocess_daemon(ledger, tmp_path / "home") as client:
        refused = await client.post("/v1/training/start", json=nemo_request(tmp_path))
    assert refused.status_code == 422
    assert "BASHGYM_NEMO_BASE_URL" in refused.json()["error"]["hint"]
