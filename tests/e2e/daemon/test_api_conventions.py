"""Conventions every route follows: error shape, correlation ids, idempotency keys, body limits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.helpers import RunningDaemon, running_daemon


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    home: Path = tmp_path_factory.mktemp("conventions")
    with running_daemon(home, env={"BASHGYM_MAX_BODY_BYTES": "65536"}) as running:
        yield running


@pytest.fixture
def client(shared_daemon: RunningDaemon) -> Iterator[httpx.Client]:
    with shared_daemon.client() as c:
        yield c


def test_a_given_correlation_id_is_echoed_and_a_missing_one_generated(client: httpx.Client) -> None:
    echoed = client.get("/v1/projects", headers={"X-Correlation-Id": "cor-abc-123"})
    assert echoed.headers["x-correlation-id"] == "cor-abc-123"
    generated = client.get("/v1/projects")
    assert generated.headers["x-correlation-id"].startswith("cor-")


def test_the_correlation_id_is_recorded_on_the_event(client: httpx.Client) -> None:
    client.post("/v1/projects", json={"project_id": "corr", "name": "Corr"}, headers={"X-Correlation-Id": "cor-xyz"})
    events = client.get("/v1/projects/corr/events").json()["events"]
    assert [e["correlation_id"] for e in events] == ["cor-xyz"]


def test_same_idempotency_key_and_body_replays_the_stored_answer(client: httpx.Client) -> None:
    headers = {"Idempotency-Key": "key-replay-1"}
    body = {"project_id": "idem", "name": "Idempotent"}
    first = client.post("/v1/projects", json=body, headers=headers)
    second = client.post("/v1/projects", json=body, headers=headers)
    assert first.status_code == 201
    assert second.status_code == 201
    assert second.headers.get("idempotent-replayed") == "true"
    assert second.json() == {**first.json(), "replayed": True}  # the same answer, saying it changed nothing
    assert len(client.get("/v1/projects/idem/events").json()["events"]) == 1


def test_the_same_key_sent_twice_at_once_is_carried_out_once(
    shared_daemon: RunningDaemon, client: httpx.Client
) -> None:
    client.post("/v1/projects", json={"project_id": "race", "name": "Race"})
    headers = {"Authorization": f"Bearer {shared_daemon.token}", "Idempotency-Key": "race-retry-0"}

    async def twice() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=shared_daemon.url, headers=headers, timeout=30) as racing:
            send = [racing.post("/v1/projects/race/annotations", json={"text": "note 0"}) for _ in range(4)]
            return list(await asyncio.gather(*send))

    answers = asyncio.run(twice())
    assert [a.status_code for a in answers] == [201] * 4
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == 3
    events = client.get("/v1/projects/race/events").json()["events"]
    assert [e["event_type"] for e in events].count("annotation.added") == 1


def test_same_idempotency_key_with_another_body_is_409(client: httpx.Client) -> None:
    headers = {"Idempotency-Key": "key-conflict-1"}
    client.post("/v1/projects", json={"project_id": "ik1", "name": "One"}, headers=headers)
    reused = client.post("/v1/projects", json={"project_id": "ik2", "name": "Two"}, headers=headers)
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert client.get("/v1/projects/ik2").status_code == 404


def test_an_unknown_field_is_422_with_the_closest_valid_name(client: httpx.Client) -> None:
    answer = client.post("/v1/projects", json={"project_id": "typo", "nmae": "x", "name": "Typo"})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] == "invalid_request"
    assert "did you mean `name`?" in error["message"]


def test_malformed_json_is_422_saying_so(client: httpx.Client) -> None:
    answer = client.post("/v1/projects", content=b'{"project_id": "x",', headers={"Content-Type": "application/json"})
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_json"


def test_an_oversized_body_is_413(client: httpx.Client) -> None:
    answer = client.post("/v1/projects", json={"project_id": "big", "name": "x" * 100_000})
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"


def test_an_unknown_route_is_a_loud_404_naming_the_path(client: httpx.Client) -> None:
    answer = client.get("/v1/no-such-thing")
    assert answer.status_code == 404
    assert "/v1/no-such-thing" in answer.json()["error"]["message"]


def test_a_replayed_ledger_write_says_replayed(client: httpx.Client) -> None:
    body = {"project_id": "again", "name": "Again"}
    assert client.post("/v1/projects", json=body).json()["replayed"] is False
    second = client.post("/v1/projects", json=body)
    assert second.status_code == 200
    assert second.json()["replayed"] is True


def test_the_openapi_document_lives_under_v1_and_documents_the_error_shape(shared_daemon: RunningDaemon) -> None:
    document = httpx.get(f"{shared_daemon.url}/v1/openapi.json").json()
    assert "ErrorResponse" in document["components"]["schemas"]
    assert "401" in document["paths"]["/v1/projects"]["post"]["responses"]


def test_the_openapi_document_declares_what_writes_answer_and_resolves_every_body(
    shared_daemon: RunningDaemon,
) -> None:
    """Found by bench/fuzz_api.py: replays (200), revocations (201) and the metrics body's models were missing."""
    document = httpx.get(f"{shared_daemon.url}/v1/openapi.json").json()
    paths = document["paths"]
    assert {"200", "201"} <= set(paths["/v1/projects"]["post"]["responses"])
    assert {"200", "201"} <= set(paths["/v1/auth/tokens/{token_id}/revoke"]["post"]["responses"])
    assert "#/$defs/" not in str(paths["/v1/projects/{project}/metrics"]["post"]["requestBody"])
    assert "MetricPoint" in document["components"]["schemas"]
