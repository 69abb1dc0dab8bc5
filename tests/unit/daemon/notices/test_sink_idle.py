"""A sink waits quietly while the ledger grows with events it does not take (another project's)."""

from __future__ import annotations

import asyncio
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
    assert forwarder.status["wiki"]["delivered"] == 0
