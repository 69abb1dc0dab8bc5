"""`bashgym mcp` as a long-running agent uses it: a cancelled wait leaves its run running, and the skills and
RunCards are resources."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon
from tests.support.mcp_client import PROJECT, call, seeded_daemon, session

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, dict[str, Any]]]:
    with seeded_daemon(tmp_path_factory.mktemp("mcp")) as made:
        yield made


async def test_cancelling_a_waiting_call_stops_the_waiting_never_the_run(
    seeded: tuple[RunningDaemon, dict[str, Any]], tmp_path: Path
) -> None:
    import anyio
    from bashgym.trainers.tiny import build_tiny

    from tests.support.helpers import wait_for_run

    daemon, made = seeded
    context = tracking_context(project_id=PROJECT, project_display_name="Agents")
    request = training_request(
        build_tiny(tmp_path / "tiny"), sft_data(tmp_path), tracking_context=context, max_steps=30
    )
    arguments = {"request": request, "idempotency_key": "agent-cancel-1", "wait": True}
    async with session(daemon, made["tokens"]["researcher"]) as opened:
        with anyio.CancelScope() as waiting:

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                waiting.cancel()  # the agent gives up waiting at the first progress it sees

            with anyio.fail_after(120):
                await opened.call_tool("start_training", arguments, progress_callback=on_progress)
        assert waiting.cancelled_caught
        _, still = await call(opened, "whoami", {})  # the session is fine after the cancellation
        assert still["actor_id"] == "researcher-agent"
        _, again = await call(opened, "start_training", {**arguments, "wait": False})
    with daemon.client() as client:
        run = wait_for_run(client, PROJECT, again["run_id"], {"completed", "failed", "cancelled"}, timeout_s=240)
    assert run["status"] == "completed", run["attempts"][-1]


async def test_the_skills_and_runcards_are_resources(seeded: tuple[RunningDaemon, dict[str, Any]]) -> None:
    daemon, made = seeded
    async with session(daemon, made["tokens"]["viewer"]) as opened:
        uris = {str(r.uri) for r in (await opened.list_resources()).resources}
        assert {"bashgym://skills/bashgym/SKILL.md", "bashgym://skills/training/SKILL.md"} <= uris
        router = (await opened.read_resource("bashgym://skills/bashgym/SKILL.md")).contents[0]
        assert "get_experiment_context" in router.text  # type: ignore[union-attr]
        cards = (await opened.read_resource(f"bashgym://projects/{PROJECT}/runs/{made['run']}/runcards")).contents[0]
        assert "runcards" in json.loads(cards.text)  # type: ignore[union-attr]
        with pytest.raises(Exception, match="No project"):
            await opened.read_resource("bashgym://projects/elsewhere/runs/run-x/runcards")
