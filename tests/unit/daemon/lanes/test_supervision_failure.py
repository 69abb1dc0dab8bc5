"""One run's failed supervision is that run's failure: the run says why, and every other run and the
daemon go on (the supervisors share one TaskGroup, where an escaped error used to end them all)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bashgym.client.errors import Conflict
from bashgym.client.specs import Actor, RunRegistration
from bashgym.daemon.lanes.supervisor import RunHandle, Supervisor
from bashgym.daemon.settings import load_settings
from bashgym.daemon.training import TrainingService
from bashgym.ledger.store import Ledger

pytestmark = pytest.mark.anyio


class BrokenSupervisor(Supervisor):
    """A local supervisor whose following fails the way a refused metric batch does."""

    stopped = False

    async def run(self, *, resume: bool) -> str:
        raise Conflict("Recorded metric points never change.")

    async def stop(self) -> None:
        BrokenSupervisor.stopped = True


async def test_a_failed_supervision_fails_its_run_and_leaves_the_service_running(
    ledger: Ledger, actor: Actor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings({}, home=str(tmp_path / "home"))
    runs = [(await ledger.register_run(actor, "default", RunRegistration(method="sft"))).record for _ in range(2)]
    handles = [
        RunHandle("default", "unassigned", r["run_id"], f"{r['run_id']}.a1", tmp_path / r["run_id"], "sft")
        for r in runs
    ]
    for handle in handles:
        handle.run_dir.mkdir()
    async with TrainingService(settings, ledger) as service:
        monkeypatch.setattr(
            service, "_supervisor", lambda handle, actor: BrokenSupervisor(handle, ledger, actor, "python", 1.0)
        )
        service._launch(handles[0], actor, resume=False)
        await asyncio.sleep(0.5)
        service._launch(handles[1], actor, resume=False)  # the service still takes work
        await asyncio.sleep(0.5)
        records = [await ledger.get_run("default", "unassigned", h.run_id) for h in handles]
    assert BrokenSupervisor.stopped
    for record in records:
        assert record["status"] == "failed"
        reason = record["attempts"][-1]["status_reason"]
        assert "supervision of this run failed (Conflict: Recorded metric points never change." in reason
        assert "its trainer was stopped" in reason and "ref " in reason
