"""The report scheduler: rebuilt from the ledger at start, and a slot missed while down is sent once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bashgym.client.specs import Actor, ProjectSpec
from bashgym.daemon.campaigns.scheduler import ReportScheduler
from bashgym.ledger.campaign_specs import CampaignSpec
from bashgym.ledger.store import Ledger

pytestmark = pytest.mark.anyio


async def reports_sent(ledger: Ledger) -> int:
    page = await ledger.events_page("default", "nightly", after_cursor=0, limit=1000)
    return sum(1 for e in page.events if e.event_type == "report.recorded")


async def test_two_slots_missed_during_downtime_give_exactly_one_report(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    spec = CampaignSpec.model_validate(
        {
            "campaign_id": "bash-q4",
            "title": "T",
            "objective": "O",
            "suite_id": "bash-tasks-v1",
            "starting_model_version_id": "m",
            "dataset_version_ids": ["d"],
            "report_schedule": {"cron": "0 9 * * *", "timezone": "Europe/Paris"},
        }
    )
    await ledger.create_campaign(actor, "default", "nightly", spec)
    down_since = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    await ledger.mark_schedule_fired(actor, "default", "nightly", "bash-q4.report", down_since.isoformat())
    now = down_since + timedelta(days=2, hours=1)  # past the 09:00 Paris slots of the 28th and the 29th

    async with ReportScheduler(ledger, tmp_path / "reports", clock=lambda: now) as scheduler:
        assert scheduler.running and "bash-q4.report" in {job["id"] for job in scheduler.jobs()}
        assert await reports_sent(ledger) == 1
        (schedule,) = await ledger.list_schedules()
        assert schedule["last_fired_at"] == now.isoformat()

    async with ReportScheduler(ledger, tmp_path / "reports", clock=lambda: now + timedelta(hours=1)):
        assert await reports_sent(ledger) == 1, "no slot passed since the catch-up report"

    later = now + timedelta(days=1)
    async with ReportScheduler(ledger, tmp_path / "reports", clock=lambda: later):
        assert await reports_sent(ledger) == 2
