"""The campaign scheduler: APScheduler fires report schedules that live in the ledger.

APScheduler holds no state of its own: at start (and every minute after) the jobs are rebuilt from
the ledger's `schedules`, and a slot missed while the daemon was down is sent once at start,
coalesced, never once per missed slot. The clock is injectable so tests can move time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from bashgym.client.specs import Actor
from bashgym.daemon.campaigns.reports import campaign_report
from bashgym.ledger.store import Ledger

log = logging.getLogger("bashgym.scheduler")
SYNC_S = 60
SKIPPED = frozenset({"cancelled", "failed"})  # campaigns that report nothing more
ACTOR = Actor(actor_id="system:scheduler", credential_kind="system", capability="campaign.control")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ReportScheduler:
    def __init__(self, ledger: Ledger, reports_dir: Path, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self.ledger = ledger
        self.reports_dir = reports_dir
        self.clock = clock
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self._known: dict[str, str] = {}  # schedule_id -> "cron|timezone" it was added with

    async def __aenter__(self) -> ReportScheduler:
        await self.catch_up()
        await self.sync()
        self.scheduler.add_job(self.sync, "interval", seconds=SYNC_S, id="sync-schedules", coalesce=True)
        self.scheduler.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.scheduler.shutdown(wait=False)

    @property
    def running(self) -> bool:
        return bool(self.scheduler.running)

    async def catch_up(self) -> int:
        """Send one report for every schedule whose slot passed while the daemon was down; return how many."""
        now, sent = self.clock(), 0
        for schedule in await self.ledger.list_schedules():
            since = datetime.fromisoformat((schedule["last_fired_at"] or schedule["created_at"]).replace("Z", "+00:00"))
            trigger = CronTrigger.from_crontab(schedule["cron"], timezone=schedule["timezone"])
            slot = trigger.get_next_fire_time(None, since + timedelta(microseconds=1))
            if slot is not None and slot <= now and await self._fire(schedule):
                sent += 1
        return sent

    async def sync(self) -> None:
        """Add or replace a job for every schedule in the ledger."""
        for schedule in await self.ledger.list_schedules():
            key = f"{schedule['cron']}|{schedule['timezone']}"
            if self._known.get(schedule["schedule_id"]) == key:
                continue
            trigger = CronTrigger.from_crontab(schedule["cron"], timezone=schedule["timezone"])
            self.scheduler.add_job(
                self._fire,
                trigger,
                args=[schedule],
                id=schedule["schedule_id"],
                replace_existing=True,
                coalesce=True,
                max_instances=1,
            )
            self._known[schedule["schedule_id"]] = key

    def jobs(self) -> list[dict[str, Any]]:
        return [{"id": job.id, "next_run_time": job.next_run_time} for job in self.scheduler.get_jobs()]

    async def _fire(self, schedule: dict[str, Any]) -> bool:
        ws, project, campaign_id = schedule["workspace_id"], schedule["project_id"], schedule["campaign_id"]
        try:
            campaign = await self.ledger.get_campaign(ws, project, campaign_id)
            if campaign["status"] in SKIPPED:
                return False
            manifest = await campaign_report(
                self.ledger, self.reports_dir, ACTOR, ws, project, campaign_id, formats={"md", "json", "png"}
            )
            at = self.clock().isoformat()
            await self.ledger.mark_schedule_fired(ACTOR, ws, project, schedule["schedule_id"], at)
            log.info("Report %s of campaign %s sent", manifest["report_id"], campaign_id)
            return True
        except Exception:  # one failing report must not stop the scheduler
            log.exception("Scheduled report of campaign %s failed", campaign_id)
            return False
