"""The fine-tuning stand-in behaves like OpenAI's fine-tuning API to the real `openai` client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.support.finetune_standin import FineTuneStandIn

pytestmark = pytest.mark.timeout(30)

MODEL = "gpt-4o-mini-2024-07-18"
ROWS = [
    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]} for i in range(3)
]
TRAIN = "".join(json.dumps(row) + "\n" for row in ROWS).encode()


@pytest.fixture
def ft() -> Iterator[FineTuneStandIn]:
    with FineTuneStandIn(api_key="sk-test", models=(MODEL, "meta-llama/Llama-3.2-1B-Instruct")) as standin:
        yield standin


def client(ft: FineTuneStandIn, *, api_key: str = "sk-test", max_retries: int = 0) -> OpenAI:
    return OpenAI(base_url=ft.url + "/v1", api_key=api_key, max_retries=max_retries)


def upload(c: OpenAI, content: bytes = TRAIN, purpose: str = "fine-tune") -> str:
    return c.files.create(file=("train.jsonl", content), purpose=purpose).id  # type: ignore[arg-type]


def test_upload_keeps_bytes_and_purpose(ft: FineTuneStandIn) -> None:
    content = TRAIN + '{"messages": [], "note": "caf\u00e9"}\r\n'.encode()
    with client(ft) as c:
        uploaded = c.files.create(file=("train.jsonl", content), purpose="fine-tune")
        assert (uploaded.object, uploaded.purpose, uploaded.filename, uploaded.bytes) == (
            "file",
            "fine-tune",
            "train.jsonl",
            len(content),
        )
        assert uploaded.id.startswith("file-")
        assert c.files.retrieve(uploaded.id).id == uploaded.id
        assert c.files.content(uploaded.id).content == content
    stored = ft.state.files[uploaded.id]
    assert (stored.content, stored.purpose) == (content, "fine-tune")
    assert ft.state.requests[0] == ("POST", "/v1/files", True)


def test_job_life_from_create_to_succeeded(ft: FineTuneStandIn) -> None:
    with client(ft) as c:
        file_id = upload(c)
        job = c.fine_tuning.jobs.create(
            model=MODEL,
            training_file=file_id,
            suffix="gym",
            seed=7,
            metadata={"run": "r1", "lane": "sft"},
            hyperparameters={"n_epochs": 2, "batch_size": 4},
        )
        assert (job.object, job.status, job.model, job.training_file, job.seed) == (
            "fine_tuning.job",
            "validating_files",
            MODEL,
            file_id,
            7,
        )
        assert job.id.startswith("ftjob-") and job.metadata == {"run": "r1", "lane": "sft"}
        assert (job.hyperparameters.n_epochs, job.hyperparameters.batch_size) == (2, 4)
        assert job.hyperparameters.learning_rate_multiplier == "auto"
        assert job.method is not None and job.method.type == "supervised"
        assert job.fine_tuned_model is None and job.finished_at is None and job.error is None

        other = c.fine_tuning.jobs.create(model=MODEL, training_file=file_id, metadata={"run": "r2"})
        assert c.fine_tuning.jobs.retrieve(job.id).status == "validating_files"
        assert [j.id for j in c.fine_tuning.jobs.list()] == [other.id, job.id]  # newest first
        assert [j.id for j in c.fine_tuning.jobs.list(metadata={"run": "r1"})] == [job.id]
        assert ft.state.queries[-1] == {"metadata[run]": ["r1"]}

        ft.advance(job.id, "queued")
        ft.advance(job.id, "running", metrics={"step": 1, "total_steps": 2, "train_loss": 1.25})
        running = c.fine_tuning.jobs.retrieve(job.id)
        assert running.status == "running" and running.hyperparameters.learning_rate_multiplier == 1.8
        ft.advance(job.id, "running", metrics={"step": 2, "total_steps": 2, "train_loss": 0.5})
        ft.advance(job.id, "succeeded", trained_tokens=1234)

        done = c.fine_tuning.jobs.retrieve(job.id)
        assert done.status == "succeeded" and done.trained_tokens == 1234
        assert done.fine_tuned_model == f"ft:{MODEL}:gym:{job.id[-8:]}"
        assert done.finished_at is not None and len(done.result_files) == 1
        assert c.files.content(done.result_files[0]).text.splitlines()[0] == "step,total_steps,train_loss"

        events = list(c.fine_tuning.jobs.list_events(job.id))  # newest first
        metrics = [e for e in events if e.type == "metrics"]
        assert [e.data for e in metrics] == [
            {"step": 2, "total_steps": 2, "train_loss": 0.5},
            {"step": 1, "total_steps": 2, "train_loss": 1.25},
        ]
        assert events[0].message == "The job has successfully completed"
        assert events[-1].message == f"Created fine-tuning job: {job.id}"
        assert all(e.object == "fine_tuning.job.event" and e.level == "info" for e in events)


def test_events_page_newest_first_with_after_and_limit(ft: FineTuneStandIn) -> None:
    with client(ft) as c:
        job = c.fine_tuning.jobs.create(model=MODEL, training_file=upload(c))
        ft.advance(job.id, "queued")
        ft.advance(job.id, "running")
        for step in range(1, 4):
            ft.advance(job.id, "running", metrics={"step": step, "train_loss": 1.0 / step})
        everything = [e["id"] for e in reversed(ft.events(job.id))]
        assert len(everything) == 7

        first = c.fine_tuning.jobs.list_events(job.id, limit=3)
        assert [e.id for e in first.data] == everything[:3] and first.has_more is True
        second = c.fine_tuning.jobs.list_events(job.id, limit=3, after=first.data[-1].id)
        assert [e.id for e in second.data] == everything[3:6] and second.has_more is True
        last = c.fine_tuning.jobs.list_events(job.id, limit=3, after=second.data[-1].id)
        assert [e.id for e in last.data] == everything[6:] and last.has_more is False
        assert not last.has_next_page()

        # The client's auto-paging sends after=<last id of the page> and stops on has_more false.
        before = len(ft.state.requests)
        assert [e.id for e in c.fine_tuning.jobs.list_events(job.id, limit=2)] == everything
        assert len(ft.state.requests) - before == 4
        assert ft.state.queries[-1] == {"limit": ["2"], "after": [everything[5]]}


def test_cancel_a_running_job_and_refuse_a_finished_one(ft: FineTuneStandIn) -> None:
    with client(ft) as c:
        file_id = upload(c)
        running = c.fine_tuning.jobs.create(model=MODEL, training_file=file_id)
        ft.advance(running.id, "running")
        cancelled = c.fine_tuning.jobs.cancel(running.id)
        assert cancelled.status == "cancelled" and cancelled.finished_at is not None
        assert c.fine_tuning.jobs.list_events(running.id, limit=1).data[0].message == "Fine-tuning job cancelled"

        finished = c.fine_tuning.jobs.create(model=MODEL, training_file=file_id)
        ft.advance(finished.id, "succeeded")
        with pytest.raises(openai.BadRequestError) as refused:
            c.fine_tuning.jobs.cancel(finished.id)
        assert refused.value.status_code == 400 and "already succeeded" in refused.value.message
        with pytest.raises(openai.BadRequestError):
            c.fine_tuning.jobs.cancel(running.id)
        assert c.fine_tuning.jobs.retrieve(finished.id).status == "succeeded"
        with pytest.raises(ValueError, match="cannot move"):
            ft.advance(running.id, "running")


def test_a_file_that_is_not_jsonl_of_objects_fails_validation(ft: FineTuneStandIn) -> None:
    with client(ft) as c:
        job = c.fine_tuning.jobs.create(model=MODEL, training_file=upload(c, b'{"ok": 1}\n[1, 2]\n'))
        assert job.status == "validating_files"  # checked in the background, as OpenAI does
        after = ft.advance(job.id, "queued")
        assert after["status"] == "failed"
        failed = c.fine_tuning.jobs.retrieve(job.id)
        assert failed.status == "failed" and failed.error is not None
        assert (failed.error.code, failed.error.param) == ("invalid_training_file", "training_file")
        assert "Line 2" in failed.error.message
        newest = c.fine_tuning.jobs.list_events(job.id, limit=1).data[0]
        assert newest.level == "error" and newest.message == failed.error.message


def test_refusals_answer_in_openai_shape(ft: FineTuneStandIn) -> None:
    with client(ft, api_key="sk-wrong-key") as wrong, pytest.raises(openai.AuthenticationError) as denied:
        wrong.fine_tuning.jobs.list()
    assert denied.value.status_code == 401 and denied.value.code == "invalid_api_key"
    assert ft.state.requests[-1] == ("GET", "/v1/fine_tuning/jobs", True)
    bare = httpx.get(ft.url + "/v1/fine_tuning/jobs")
    assert bare.status_code == 401 and ft.state.requests[-1].has_auth is False
    assert set(bare.json()["error"]) == {"message", "type", "param", "code"}

    with client(ft) as c:
        file_id = upload(c)
        with pytest.raises(openai.BadRequestError) as unknown:
            c.fine_tuning.jobs.create(model="gpt-9-imaginary", training_file=file_id)
        assert "gpt-9-imaginary" in unknown.value.message and unknown.value.param == "model"
        with pytest.raises(openai.BadRequestError) as missing:
            c.fine_tuning.jobs.create(model=MODEL, training_file="file-nope")
        assert missing.value.param == "training_file"
        with pytest.raises(openai.BadRequestError) as purpose:
            c.fine_tuning.jobs.create(model=MODEL, training_file=upload(c, purpose="batch"))
        assert purpose.value.param == "training_file"
        with pytest.raises(openai.NotFoundError):
            c.fine_tuning.jobs.retrieve("ftjob-nope")
    assert ft.state.jobs == {}


def test_two_429s_then_success_with_retries(ft: FineTuneStandIn) -> None:
    ft.fail_next(429, 2, retry_after=0)
    started = time.monotonic()
    with client(ft, max_retries=3) as c:
        page = c.fine_tuning.jobs.list()
    assert page.data == [] and time.monotonic() - started < 1.0  # retry-after-ms: 1, not 0.5 s backoff
    assert [r.path for r in ft.state.requests] == ["/v1/fine_tuning/jobs"] * 3


def test_503_without_retries_raises(ft: FineTuneStandIn) -> None:
    ft.fail_next(503)
    with client(ft, max_retries=0) as c, pytest.raises(openai.InternalServerError) as down:
        c.fine_tuning.jobs.list()
    assert down.value.status_code == 503 and len(ft.state.requests) == 1
    with client(ft, max_retries=0) as c:
        assert c.fine_tuning.jobs.list().data == []  # the fault was for one request only


def test_429_retries_run_out(ft: FineTuneStandIn) -> None:
    ft.fail_next(429, 5, retry_after=0.01)
    with client(ft, max_retries=1) as c, pytest.raises(openai.RateLimitError) as limited:
        c.fine_tuning.jobs.list()
    assert limited.value.response.headers["retry-after-ms"] == "10"
    assert len(ft.state.requests) == 2 and len(ft.state.faults) == 3


@pytest.mark.anyio
async def test_the_async_client_works_too(ft: FineTuneStandIn) -> None:
    async with AsyncOpenAI(base_url=ft.url + "/v1", api_key="sk-test", max_retries=0) as c:
        file_id = (await c.files.create(file=("t.jsonl", TRAIN), purpose="fine-tune")).id
        job = await c.fine_tuning.jobs.create(model=MODEL, training_file=file_id, method={"type": "dpo"})
        assert job.method is not None and job.method.type == "dpo"
        ft.advance(job.id, "succeeded")
        assert (await c.fine_tuning.jobs.retrieve(job.id)).status == "succeeded"
        assert len([e async for e in c.fine_tuning.jobs.list_events(job.id, limit=2)]) == 4
