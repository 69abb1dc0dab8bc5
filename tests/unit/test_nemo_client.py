"""The NeMo Customizer client against the loopback stand-in: job lifecycle, and errors a user can act on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from bashgym.daemon.nemo import TERMINAL_STATUSES, NemoCustomizer, NemoError, job_body

from tests.nemo_standin import NemoStandIn, nemo_standin

pytestmark = pytest.mark.anyio

KEY = "k-standin-secret"


@pytest.fixture
def nemo() -> Iterator[NemoStandIn]:
    with nemo_standin(api_key=KEY, steps=6) as standin:
        yield standin


def make_body(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "config": "meta/llama-3.2-1b-instruct@v1.0.0+A100",
        "dataset_namespace": "bashgym",
        "dataset_name": "shell-sft",
        "finetuning_type": "lora",
        "epochs": 2,
        "batch_size": 8,
        "learning_rate": 1e-4,
        "adapter_dim": 16,
        "adapter_dropout": 0.05,
        "name": "nightly-sft",
        "description": "nightly campaign",
        "output_model": None,
        **overrides,
    }
    return job_body(**fields)


async def poll_until(
    client: NemoCustomizer, job_id: str, wanted: set[str], *, max_polls: int = 20
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for _ in range(max_polls):
        seen.append(await client.job_status(job_id))
        if seen[-1]["status"] in wanted:
            return seen
    raise AssertionError(f"job {job_id} never reached {wanted}: {[s['status'] for s in seen]}")


def test_job_body_carries_a_lora_block_only_for_lora() -> None:
    lora = make_body(output_model="bashgym/shell@v1")
    assert lora == {
        "name": "nightly-sft",
        "description": "nightly campaign",
        "config": "meta/llama-3.2-1b-instruct@v1.0.0+A100",
        "dataset": {"name": "shell-sft", "namespace": "bashgym"},
        "hyperparameters": {
            "training_type": "sft",
            "finetuning_type": "lora",
            "epochs": 2,
            "batch_size": 8,
            "learning_rate": 1e-4,
            "lora": {"adapter_dim": 16, "adapter_dropout": 0.05},
        },
        "output_model": "bashgym/shell@v1",
    }
    full = make_body(finetuning_type="all_weights")
    assert "lora" not in full["hyperparameters"]
    assert "output_model" not in full
    with pytest.raises(ValueError, match="all_weights"):
        make_body(finetuning_type="qlora")


async def test_a_job_runs_from_created_to_completed_with_falling_loss(nemo: NemoStandIn) -> None:
    async with NemoCustomizer(nemo.url, KEY) as client:
        created = await client.create_job(make_body())
        assert created["id"].startswith("cust-")
        assert created["status"] == "created"
        seen = await poll_until(client, created["id"], set(TERMINAL_STATUSES))

    assert [s["status"] for s in seen] == ["pending"] + ["running"] * 5 + ["completed"]
    final = seen[-1]
    assert final["steps_completed"] == 6
    assert final["epochs_completed"] == 2
    assert final["percentage_done"] == 100.0
    assert final["output_model"]
    train = [s["train_loss"] for s in seen if s["train_loss"] is not None]
    assert len(train) == 6
    assert train == sorted(train, reverse=True)
    assert len(set(train)) == len(train)
    val = [p["value"] for p in final["metrics"]["metrics"]["val_loss"]]
    assert len(val) == 3
    assert val == sorted(val, reverse=True)
    assert all({"updated_at", "message"} <= set(log) for log in final["status_logs"])
    assert nemo.requests[0] == ("POST", "/v1/customization/jobs", make_body())
    assert nemo.jobs[created["id"]]["status"] == "completed"


async def test_a_failed_job_says_why_in_its_status_logs(nemo: NemoStandIn) -> None:
    nemo.next_outcome = "failed"
    async with NemoCustomizer(nemo.url, KEY) as client:
        failing = await client.create_job(make_body())
        healthy = await client.create_job(make_body())
        seen = await poll_until(client, failing["id"], set(TERMINAL_STATUSES))
        other = await poll_until(client, healthy["id"], set(TERMINAL_STATUSES))

    final = seen[-1]
    assert final["status"] == "failed"
    assert final["output_model"] is None
    assert "failed at step 2" in final["status_logs"][-1]["message"]
    assert other[-1]["status"] == "completed"


async def test_cancel_stops_a_running_job_and_a_second_cancel_is_refused(nemo: NemoStandIn) -> None:
    async with NemoCustomizer(nemo.url, KEY) as client:
        job = await client.create_job(make_body())
        await poll_until(client, job["id"], {"running"})
        cancelled = await client.cancel_job(job["id"])
        assert cancelled["status"] == "cancelled"
        assert (await client.job_status(job["id"]))["status"] == "cancelled"
        with pytest.raises(NemoError) as refused:
            await client.cancel_job(job["id"])

    assert refused.value.status_code == 409
    assert "already cancelled" in str(refused.value)


async def test_a_wrong_key_names_the_setting_and_never_the_key(nemo: NemoStandIn) -> None:
    wrong = "sk-wrong-key-5f2a9c"
    async with NemoCustomizer(nemo.url, wrong) as client:
        with pytest.raises(NemoError) as rejected:
            await client.create_job(make_body())

    assert rejected.value.status_code == 401
    assert "nemo_api_key_env" in str(rejected.value)
    assert wrong not in str(rejected.value)
    assert KEY not in str(rejected.value)


async def test_a_closed_port_is_reported_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with NemoCustomizer(url, KEY, timeout_s=5) as client:
        with pytest.raises(NemoError) as unreachable:
            await client.job_status("cust-0")

    message = str(unreachable.value)
    assert f"NeMo Customizer at {url} is unreachable" in message
    assert "nemo_base_url" in message
    assert KEY not in message
    assert unreachable.value.status_code is None


async def test_a_refused_body_passes_the_server_detail_through(nemo: NemoStandIn) -> None:
    body = make_body()
    body["hyperparameters"]["training_type"] = "dpo"
    async with NemoCustomizer(nemo.url, KEY) as client:
        with pytest.raises(NemoError) as refused:
            await client.create_job(body)

    assert refused.value.status_code == 422
    assert "training_type must be 'sft'" in str(refused.value)


async def test_an_unknown_job_names_the_path(nemo: NemoStandIn) -> None:
    async with NemoCustomizer(nemo.url, KEY) as client:
        with pytest.raises(NemoError) as missing:
            await client.job_status("cust-nope")

    assert missing.value.status_code == 404
    assert "/v1/customization/jobs/cust-nope/status" in str(missing.value)


async def test_an_answer_that_is_not_a_json_object_is_an_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>proxy login</html>"))
    async with NemoCustomizer("http://nemo.invalid", KEY, transport=transport) as client:
        with pytest.raises(NemoError, match="other than a JSON object"):
            await client.job_status("cust-1")


async def test_a_server_error_is_reported_with_truncated_text() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(503, text="x" * 2000))
    async with NemoCustomizer("http://nemo.invalid", KEY, transport=transport) as client:
        with pytest.raises(NemoError) as failed:
            await client.job_status("cust-1")

    assert failed.value.status_code == 503
    assert "answered HTTP 503" in str(failed.value)
    assert len(str(failed.value)) < 800
