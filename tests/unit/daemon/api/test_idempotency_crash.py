"""An Idempotency-Key is recorded in the same transaction as the request's write, so a crash between the
write and its stored answer never lets the retry carry the request out a second time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bashgym.ledger.store import Ledger

from tests.support.helpers import inprocess_daemon

pytestmark = pytest.mark.anyio


class DaemonStopped(BaseException):
    """Stands for the process dying: nothing after this point runs."""


async def test_a_retry_after_a_crash_between_write_and_answer_is_not_carried_out_twice(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {"Idempotency-Key": "register-once"}
    body = {"method": "sft"}  # no run id: each carried-out registration would mint a new run

    async def crash(**fields: Any) -> None:
        raise DaemonStopped

    async with inprocess_daemon(ledger, tmp_path / "home") as api:
        with monkeypatch.context() as patch:
            patch.setattr(ledger, "store_idempotent", crash)
            with pytest.raises(DaemonStopped):
                await api.post("/v1/runs", json=body, headers=headers)
        cursor = ledger.last_cursor
        retry = await api.post("/v1/runs", json=body, headers=headers)
        other = await api.post("/v1/runs", json={"method": "dpo"}, headers=headers)
        runs = (await api.get("/v1/projects/unassigned/runs")).json()
    assert retry.status_code == 409, retry.text
    error = retry.json()["error"]
    assert error["code"] == "idempotent_request_unanswered"
    assert f"up to event {cursor}" in error["message"] and "not be carried out twice" in error["hint"]
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert len(runs) == 1 and ledger.last_cursor == cursor


async def test_a_request_that_wrote_nothing_leaves_its_key_free(ledger: Ledger, tmp_path: Path) -> None:
    headers = {"Idempotency-Key": "refused-first"}
    async with inprocess_daemon(ledger, tmp_path / "home") as api:
        refused = await api.post("/v1/runs", json={"method": "sft", "is_simulation": "maybe"}, headers=headers)
        accepted = await api.post("/v1/runs", json={"method": "sft"}, headers=headers)
        replayed = await api.post("/v1/runs", json={"method": "sft"}, headers=headers)
    assert refused.status_code == 422
    assert accepted.status_code == 201 and replayed.status_code == 201
    assert replayed.headers["idempotent-replayed"] == "true"
    assert replayed.json() == {**accepted.json(), "replayed": True}  # the same answer, saying it changed nothing
