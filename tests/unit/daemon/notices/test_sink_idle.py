"""A sink waits quietly while the ledger grows with events it does not take (another project's), and two
workspaces' sinks of one name keep their own places."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from bashgym.client.specs import Actor, ProjectSpec
from bashgym.daemon.notices.sinks import SinkForwarder
from bashgym.ledger.store import Ledger

pytestmark = pytest.mark.anyio


async def test_a_sink_does_not_reread_the_ledger_over_events_of_other_projects(ledger: Ledger, actor: Actor) -> None:
    for project in ("watched", "busy"):
        await ledger.create_project(actor, "default", ProjectSpec(project_id=project, name=project))
    await ledger.add_sink(
        actor, "default", name="wiki", url="http://127.0.0.1:9/", secret_env="S", project_id="watched", types=[]
    )
    reads: list[int] = []
    page = ledger.events_page_json

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs["after_cursor"])
        return await page(*args, **kwargs)

    ledger.events_page_json = counted  # type: ignore[method-assign]
    async with SinkForwarder(ledger, {"S": "secret"}) as forwarder:
        await forwarder.sync()
        await asyncio.sleep(0.2)  # started at the head: one look, nothing to send
        for i in range(20):  # events the sink does not take
            await ledger.create_project(actor, "default", ProjectSpec(project_id=f"other{i}", name="other"))
        await asyncio.sleep(1.0)
    # One read at the start and at most one per write that woke it; a spinning loop reads thousands of times.
    assert 1 <= len(reads) <= 22, len(reads)
    assert forwarder.status[("default", "wiki")]["delivered"] == 0


@pytest.fixture
def receiver() -> Iterator[tuple[str, dict[str, list[dict[str, Any]]]]]:
    """An endpoint on 127.0.0.1 that takes every batch, kept by the path it was posted to."""
    got: dict[str, list[dict[str, Any]]] = {}

    class Take(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.setdefault(self.path, []).extend(body["events"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Take)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


async def test_sinks_of_one_name_in_two_workspaces_each_deliver_all_of_their_own(
    ledger: Ledger, actor: Actor, receiver: tuple[str, dict[str, list[dict[str, Any]]]]
) -> None:
    url, got = receiver
    for ws in ("default", "ws2"):
        await ledger.add_sink(actor, ws, name="wiki", url=f"{url}/{ws}", secret_env="S", project_id=None, types=[])
    async with SinkForwarder(ledger, {"S": "secret"}) as forwarder:
        await forwarder.sync()
        await asyncio.sleep(0.3)  # each starts at the head
        for i in range(6):  # interleaved: a shared cursor let one sink's acknowledgement skip the other's events
            for ws in ("default", "ws2"):
                await ledger.create_project(actor, ws, ProjectSpec(project_id=f"p{i}", name=f"p{i}"))
        for _ in range(100):
            if all(len(got.get(f"/{ws}", [])) >= 6 for ws in ("default", "ws2")):
                break
            await asyncio.sleep(0.05)
    for ws in ("default", "ws2"):
        assert {e["workspace_id"] for e in got[f"/{ws}"]} == {ws}
        assert len(got[f"/{ws}"]) == 6, (ws, [e["project_id"] for e in got[f"/{ws}"]])
        assert forwarder.status[(ws, "wiki")]["delivered"] == 6
    assert (await ledger.get_consumer_cursor("sink.wiki"))["updated_at"]
    assert (await ledger.get_consumer_cursor("sink:ws2.wiki"))["updated_at"]
