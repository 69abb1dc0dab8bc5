"""A running trainer that stops reporting gets one `no_progress` anomaly event, after the configured silence."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bashgym.client.specs import Actor, RunRegistration
from bashgym.daemon.lanes.supervisor import RunHandle, Supervisor
from bashgym.ledger.store import Ledger

from tests.support.factories import tracking_context

pytestmark = pytest.mark.anyio


async def test_a_silent_running_trainer_is_reported_once(ledger: Ledger, actor: Actor, tmp_path: Path) -> None:
    run = (
        await ledger.register_run(actor, "default", RunRegistration(method="sft", tracking_context=tracking_context()))
    ).record
    handle = RunHandle("default", run["project_id"], run["run_id"], f"{run['run_id']}.a1", tmp_path, "sft")
    supervisor = Supervisor(handle, ledger, actor, sys.executable, grace_s=1.0)
    supervisor._is_running = True

    await supervisor.check_progress(limit_s=60)  # just started: not silent long enough
    supervisor._last_progress -= 120
    await supervisor.check_progress(limit_s=60)
    await supervisor.check_progress(limit_s=60)

    anomalies = await ledger.run_event_payloads("default", handle.project, handle.run_id, "run.anomaly")
    assert [a["kind"] for a in anomalies] == ["no_progress"]
    assert "2 minutes" in anomalies[0]["detail"]
