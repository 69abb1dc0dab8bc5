"""The NeMo client against the loopback stand-ins: dataset upload and registration, the job lifecycle, and errors a
user can act on."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.daemon.lanes.nemo import TERMINAL_STATUSES, NemoCustomizer, NemoError
from bashgym.daemon.lanes.nemo_data import customizer_dataset, customizer_rows, job_body, job_hyperparameters
from bashgym.trainers.contracts.fields import request_from_recipe
from bashgym.trainers.contracts.request import InvalidRequest, TrainingRequest

from tests.support.nemo_standin import NemoStandIn, nemo_standin

pytestmark = pytest.mark.anyio

KEY = "k-standin-secret"
DATASET = "bashgym/shell-sft"
SFT_ROWS = [{"messages": [{"role": "user", "content": "count lines"}, {"role": "assistant", "content": "wc -l f"}]}]


@pytest.fixture
def nemo() -> Iterator[NemoStandIn]:
    with nemo_standin(api_key=KEY, steps=6) as standin:
        standin.seed_dataset(DATASET, SFT_ROWS)
        yield standin


def client_of(nemo: NemoStandIn, key: str | None = KEY) -> NemoCustomizer:
    return NemoCustomizer(nemo.url, key, datastore_url=nemo.datastore_url)


def request(**fields: Any) -> TrainingRequest:
    return request_from_recipe(
        {
            "strategy": "sft",
            "base_model": "meta/llama-3.2-1b-instruct@v1.0.0+A100",
            "dataset_path": "/data/train.jsonl",
            "compute_target": "cloud:nemo-customizer",
            **fields,
        }
    )


def make_body(**hyperparameters: Any) -> dict[str, Any]:
    return job_body(
        config="meta/llama-3.2-1b-instruct@v1.0.0+A100",
        dataset_namespace="bashgym",
        dataset_name="shell-sft",
        hyperparameters={
            **job_hyperparameters(request(num_epochs=2, batch_size=8, learning_rate=1e-4)),
            **hyperparameters,
        },
        name="nightly-sft",
        description="nightly campaign",
        output_model=None,
    )


async def poll_until(
    client: NemoCustomizer, job_id: str, wanted: set[str], *, max_polls: int = 20
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for _ in range(max_polls):
        seen.append(await client.job_status(job_id))
        if seen[-1]["status"] in wanted:
            return seen
    raise AssertionError(f"job {job_id} never reached {wanted}: {[s['status'] for s in seen]}")


def test_hyperparameters_follow_the_method_and_the_adapter() -> None:
    assert job_hyperparameters(request(num_epochs=2, batch_size=8, learning_rate=1e-4)) == {
        "training_type": "sft",
        "finetuning_type": "lora",
        "epochs": 2,
        "batch_size": 8,
        "learning_rate": 1e-4,
        "lora": {"adapter_dim": 16, "adapter_dropout": 0.05},
    }
    full = job_hyperparameters(request(use_lora=False))
    assert full["finetuning_type"] == "all_weights" and "lora" not in full
    dpo = job_hyperparameters(request(strategy="dpo", dpo_beta=0.3, use_lora=False))
    assert (dpo["training_type"], dpo["dpo"], "lora" in dpo) == ("dpo", {"ref_policy_kl_penalty": 0.3}, False)
    # What the request sets goes; what it leaves out stays the Customizer's default.
    sent = job_hyperparameters(request(lora_alpha=64, seed=7, max_steps=30))
    assert (sent["lora"]["alpha"], sent["seed"], sent["max_steps"]) == (64, 7, 30)
    assert {"seed", "max_steps"}.isdisjoint(job_hyperparameters(request()))
    with pytest.raises(ValueError, match="all_weights"):
        make_body(finetuning_type="qlora")
    with pytest.raises(ValueError, match="lora block goes only with finetuning_type 'lora'"):
        make_body(finetuning_type="all_weights")


def test_a_field_the_customizer_never_sees_is_refused_when_sent() -> None:
    with pytest.raises(InvalidRequest, match="`gradient_accumulation_steps` is not sent to NeMo Customizer"):
        request(gradient_accumulation_steps=4)
    with pytest.raises(InvalidRequest, match="`max_seq_length` is not sent to NeMo Customizer"):
        request(max_seq_length=512)
    assert request(compile="auto", packing="auto").lane == "nemo"  # "auto" leaves the choice to whoever trains


def test_rows_take_the_format_the_customizer_documents_for_the_method(tmp_path: Path) -> None:
    sft = b'{"messages": [{"role": "user", "content": "a"}], "id": 3}\n\n{"text": "plain"}\n'
    assert [json.loads(line) for line in customizer_rows("sft", sft).splitlines()] == [
        {"messages": [{"role": "user", "content": "a"}]},
        {"prompt": "", "completion": "plain"},
    ]
    dpo = b'{"prompt": "q", "chosen": "good", "rejected": "bad", "meta": 1}\n'
    assert json.loads(customizer_rows("dpo", dpo)) == {
        "prompt": "q",
        "chosen_response": "good",
        "rejected_response": "bad",
    }
    data = tmp_path / "train.jsonl"
    data.write_bytes(sft)
    named = customizer_dataset(request(dataset_path=str(data)), namespace="team")
    digest = hashlib.sha256(customizer_rows("sft", sft)).hexdigest()
    assert (named.dataset_id, named.record()["sha256"]) == (f"team/bashgym-{digest[:12]}", digest)
    assert customizer_dataset(request(dataset_path=str(data), nemo_dataset="a/b"), namespace="team").dataset_id == "a/b"


async def test_a_dataset_is_uploaded_registered_and_published_again_unchanged(
    nemo: NemoStandIn, tmp_path: Path
) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(SFT_ROWS[0]) + "\n")
    dataset = customizer_dataset(request(dataset_path=str(data)), namespace="team")
    async with client_of(nemo) as client:
        await client.publish_dataset(dataset, description="d")
        await client.publish_dataset(dataset, description="d")  # the same bytes again: accepted

    held = nemo.uploaded(dataset.dataset_id)
    assert hashlib.sha256(held["training/training.jsonl"]).hexdigest() == dataset.record()["sha256"]
    entity = nemo.datasets[dataset.dataset_id]
    assert entity["files_url"] == f"hf://datasets/{dataset.dataset_id}"
    assert entity["custom_fields"] == {"bashgym_sha256": dataset.record()["sha256"]}
    assert KEY in nemo.datastore.state.tokens_seen


async def test_a_foreign_dataset_of_the_same_name_is_never_overwritten(nemo: NemoStandIn, tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "assistant", "content": "ours"}]}) + "\n")
    before = nemo.uploaded(DATASET)
    dataset = customizer_dataset(request(dataset_path=str(data), nemo_dataset=DATASET), namespace="x")
    async with client_of(nemo) as client:
        with pytest.raises(NemoError, match=f"already registers dataset {DATASET} with other content"):
            await client.publish_dataset(dataset, description="d")

    assert nemo.uploaded(DATASET) == before
    assert nemo.datastore.state.repos[DATASET].commits == []


@pytest.mark.parametrize(
    ("status", "setting"), [(500, "nemo_datastore_url"), (401, "nemo_api_key_env"), (403, "nemo_api_key_env")]
)
async def test_a_failed_upload_names_the_setting_and_never_the_key(
    nemo: NemoStandIn, tmp_path: Path, status: int, setting: str
) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(SFT_ROWS[0]) + "\n")
    nemo.datastore.state.fail_with = status
    async with client_of(nemo) as client:
        with pytest.raises(NemoError) as failed:
            await client.publish_dataset(
                customizer_dataset(request(dataset_path=str(data)), namespace="t"), description=""
            )

    assert failed.value.status_code == status
    assert f"NeMo Data Store at {nemo.datastore_url}" in str(failed.value) and setting in str(failed.value)
    assert KEY not in str(failed.value)
    assert nemo.datasets.keys() == {DATASET}, "nothing was registered"


async def test_a_job_runs_from_created_to_completed_with_falling_loss(nemo: NemoStandIn) -> None:
    async with client_of(nemo) as client:
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
    async with client_of(nemo) as client:
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
    async with client_of(nemo) as client:
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
    async with client_of(nemo, wrong) as client:
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


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"training_type": "grpo"}, "training_type must be one of sft, dpo here"),
        ({"dpo": {"ref_policy_kl_penalty": 0.1}}, "hyperparameters.dpo"),
        ({"warmup_ratio": 0.1}, "unknown fields ['warmup_ratio']"),
    ],
)
async def test_a_refused_body_passes_the_server_detail_through(
    nemo: NemoStandIn, change: dict[str, Any], detail: str
) -> None:
    async with client_of(nemo) as client:
        with pytest.raises(NemoError) as refused:
            await client.create_job(make_body(**change))

    assert refused.value.status_code == 422
    assert detail in str(refused.value)


async def test_a_job_on_data_never_uploaded_or_in_another_format_is_refused(nemo: NemoStandIn) -> None:
    body = make_body()
    async with client_of(nemo) as client:
        with pytest.raises(NemoError) as missing:
            await client.create_job({**body, "dataset": {"namespace": "bashgym", "name": "nowhere"}})
        with pytest.raises(NemoError) as wrong_format:
            await client.create_job(make_body(training_type="dpo", dpo={"ref_policy_kl_penalty": 0.1}))

    assert missing.value.status_code == 404 and "not registered in the Entity Store" in str(missing.value)
    assert wrong_format.value.status_code == 422
    assert "a dpo row needs prompt, chosen_response and rejected_response" in str(wrong_format.value)


async def test_an_unknown_job_names_the_path(nemo: NemoStandIn) -> None:
    async with client_of(nemo) as client:
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
