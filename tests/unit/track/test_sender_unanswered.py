"""A batch the daemon carried out but was killed before answering (its key's record says so: 409
`idempotent_request_unanswered`, daemon/api/middleware.py) is delivered: the sender goes on, never resends it under a
new key (which would write the points twice), and never fails the script's exit. Opening a run needs its answer."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from bashgym.client.errors import ApiError
from bashgym.client.http import DaemonClient
from bashgym.track.sender import Sender

# The daemon's answer (tests/unit/daemon/api/test_idempotency_crash.py makes it for real).
UNANSWERED = {"error": {"code": "idempotent_request_unanswered", "message": "carried out, never answered", "hint": ""}}


def sender_answering(tmp_path: Path, seen: list[str]) -> Sender:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Idempotency-Key"])
        return httpx.Response(409, json=UNANSWERED)

    client = DaemonClient("http://127.0.0.1:9", None)
    client._http = httpx.AsyncClient(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(answer))
    return Sender(client, spool=tmp_path / "run.jsonl", interval_s=0.05, heartbeat_s=60)


def test_an_unanswered_batch_counts_as_delivered_once_and_opening_a_run_still_needs_its_answer(
    tmp_path: Path,
) -> None:
    seen: list[str] = []
    sender = sender_answering(tmp_path, seen)
    try:
        done = sender.call(sender.retried("POST", "/v1/x/metrics", body={"points": []}, idempotency_key="k1"))
        assert done is None and seen == ["k1"], "carried out once: not retried, not resent under another key"
        with pytest.raises(ApiError) as refused:
            sender.call(sender.retried("POST", "/v1/tracked-runs", body={}, needs_answer=True))
        assert refused.value.code == "idempotent_request_unanswered" and len(seen) == 2
    finally:
        sender.shutdown()
