"""`Ledger`: opens the database, queues writes through one connection, reads through a small pool."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from bashgym.client.errors import InvalidInput, LedgerUnavailable
from bashgym.client.specs import (
    Actor,
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BudgetEntrySpec,
    ComparisonSpec,
    DatasetVersionSpec,
    DecisionSpec,
    DeviceGroupSpec,
    DeviceSpec,
    EnvironmentSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    EventPage,
    ExperimentSpec,
    MetricBatch,
    ModelVersionSpec,
    PreflightVerdict,
    ProjectSpec,
    ReportSpec,
    RunRegistration,
    RunTransition,
    WriteResult,
)
from bashgym.client.states import TERMINAL
from bashgym.ledger import (
    access,
    blob_holders,
    campaigns,
    channels,
    device_groups,
    devices,
    evidence,
    integrity,
    leases,
    lineage,
    queries,
    runcards,
    runs,
    sinks,
)
from bashgym.ledger.campaign_specs import CampaignSpec
from bashgym.ledger.db import ConnectionThread, ReaderPool, open_connection, write_transaction
from bashgym.ledger.migrations import migrate
from bashgym.ledger.tx import ChainHead, Tx, utc_iso

T = TypeVar("T")
Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Ledger:
    """The authoritative record. All writes go through one connection: SQLite allows one writer at a
    time, and queueing here is cheaper than retrying "database is locked" from every caller."""

    def __init__(
        self, path: Path, writer: ConnectionThread, readers: ReaderPool, head: ChainHead, clock: Clock
    ) -> None:
        self.path = path
        self._writer = writer
        self._readers = readers
        self._head = head
        self._clock = clock
        self._appended = asyncio.Condition()
        # Token rows by hash and Discord grants by subject. Every authority write goes through this
        # object and clears both, so nothing cached is stale: a revocation applies on the next request.
        self._tokens: dict[str, dict[str, Any] | None] = {}
        self._grants: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        self._known_rows: dict[tuple[str, ...], dict[str, Any]] = {}

    @classmethod
    async def open(cls, path: Path, *, synchronous: str = "FULL", readers: int = 2, clock: Clock = _utc_now) -> Ledger:
        """Open (creating if needed), check integrity, apply pending migrations and load the chain head."""
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = await asyncio.to_thread(_open_writer, path, synchronous)
        writer = ConnectionThread(conn, "ledger-writer")
        try:
            head = await writer.run(_prepare)
        except BaseException:
            await writer.close()
            raise
        pool = ReaderPool(
            [
                ConnectionThread(
                    await asyncio.to_thread(open_connection, path, synchronous=synchronous, readonly=True),
                    f"ledger-reader-{i}",
                )
                for i in range(readers)
            ]
        )
        return cls(path, writer, pool, head, clock)

    async def close(self) -> None:
        await self._readers.close()
        await self._writer.run(lambda conn: conn.execute("PRAGMA optimize"))
        await self._writer.run(lambda conn: conn.execute("PRAGMA wal_checkpoint(PASSIVE)"))
        await self._writer.close()

    async def __aenter__(self) -> Ledger:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def now(self) -> datetime:
        return self._clock()

    # -- the two ways in ------------------------------------------------------------------------

    async def write(self, actor: Actor, fn: Callable[[Tx], T]) -> T:
        """Run fn in one IMMEDIATE transaction on the writer; its events commit with it."""

        claim = access.REQUEST_CLAIM.get()
        if claim is not None and (claim.is_recorded or claim.is_closed):
            claim = None

        def run(conn: sqlite3.Connection) -> T:
            # Runs on the writer thread, where writes execute one after another, so the chain head
            # is read and advanced here and never raced.
            tx = Tx(conn, self._head, actor, self._clock, self._known_rows)
            changes = conn.total_changes
            with write_transaction(conn, self.path):
                result = fn(tx)
                claimed = claim if claim is not None and conn.total_changes != changes else None
                if claimed is not None:
                    access.record_claim(conn, claimed, cursor=tx.head.cursor, created_at=tx.now)
            if claimed is not None:
                claimed.is_recorded = True
            self._head = tx.head
            if len(self._known_rows) > 100_000:
                self._known_rows.clear()  # bounded; it is only a cache of committed rows
            self._known_rows.update(tx.learned)
            return result

        before = self._head.cursor
        # Shielded: once queued, the outcome is written even if the caller goes away.
        result = await asyncio.shield(self._writer.run(run))
        if self._head.cursor != before:
            async with self._appended:
                self._appended.notify_all()
        return result

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._readers.run(fn)

    async def wait_for_events(self, after_cursor: int, timeout_s: float) -> None:
        """Return once an event past after_cursor exists, or after timeout_s."""
        if self._head.cursor > after_cursor:
            return
        try:
            async with asyncio.timeout(timeout_s), self._appended:
                await self._appended.wait_for(lambda: self._head.cursor > after_cursor)
        except TimeoutError:
            return

    @property
    def last_cursor(self) -> int:
        return self._head.cursor

    # -- lineage ---------------------------------------------------------------------------------

    async def create_project(self, actor: Actor, ws: str, spec: ProjectSpec) -> WriteResult:
        return await self._put(actor, lambda tx: lineage.create_project(tx, ws, spec))

    async def create_experiment(self, actor: Actor, ws: str, project: str, spec: ExperimentSpec) -> WriteResult:
        return await self._put(actor, lambda tx: lineage.create_experiment(tx, ws, project, spec))

    async def register_model_version(self, actor: Actor, ws: str, project: str, spec: ModelVersionSpec) -> WriteResult:
        return await self._put(actor, lambda tx: lineage.register_model_version(tx, ws, project, spec))

    async def register_dataset_version(
        self, actor: Actor, ws: str, project: str, spec: DatasetVersionSpec
    ) -> WriteResult:
        return await self._put(actor, lambda tx: lineage.register_dataset_version(tx, ws, project, spec))

    async def register_environment(self, actor: Actor, ws: str, project: str, spec: EnvironmentSpec) -> WriteResult:
        return await self._put(actor, lambda tx: lineage.register_environment(tx, ws, project, spec))

    # -- runs ------------------------------------------------------------------------------------

    async def register_run(self, actor: Actor, ws: str, spec: RunRegistration) -> WriteResult:
        def fn(tx: Tx) -> WriteResult:
            record, replayed, missing = runs.register_run(tx, ws, spec)
            record["missing_context_fields"] = missing
            return WriteResult(record=record, replayed=replayed, cursor=tx.last_cursor)

        return await self.write(actor, fn)

    async def transition_run(
        self, actor: Actor, ws: str, project: str, run_id: str, spec: RunTransition, *, settle_gpus: int | None = None
    ) -> WriteResult:
        """settle_gpus: at an end, settle the run's launch reservation in the same transaction, charging its
        hours times these GPUs (evidence.settle_reservation). The daemon passes it; the ledger API does not."""

        def fn(tx: Tx) -> tuple[dict[str, Any], bool]:
            record, replayed = runs.transition_run(tx, ws, project, run_id, spec)
            if settle_gpus is not None and not replayed and spec.status in TERMINAL:
                evidence.settle_reservation(tx, ws, project, run_id, spec.status, settle_gpus)
            return record, replayed

        return await self._put(actor, fn)

    async def supersede_attempt(self, actor: Actor, ws: str, project: str, run_id: str, reason: str) -> str:
        """An `unknown` run goes on as a new attempt (runs.supersede_attempt); returns the new attempt's id."""
        return await self.write(actor, lambda tx: runs.supersede_attempt(tx, ws, project, run_id, reason))

    async def ingest_metrics(self, actor: Actor, ws: str, project: str, batch: MetricBatch) -> WriteResult:
        def fn(tx: Tx) -> WriteResult:
            result = runs.ingest_metrics(tx, ws, project, batch)
            return WriteResult(record=result, replayed=result["inserted"] == 0, cursor=tx.last_cursor)

        return await self.write(actor, fn)

    async def append_run_event(
        self,
        actor: Actor,
        ws: str,
        project: str,
        run_id: str,
        attempt_id: str,
        event_type: str,
        payload: dict[str, Any],
    ) -> int:
        """Record something a run's supervisor observed (a checkpoint, an anomaly) as an event of that run."""
        return await self.write(
            actor, lambda tx: runs.append_run_event(tx, ws, project, run_id, attempt_id, event_type, payload)
        )

    # -- evidence --------------------------------------------------------------------------------

    async def register_artifact(self, actor: Actor, ws: str, project: str, spec: ArtifactSpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.register_artifact(tx, ws, project, spec))

    async def register_eval_suite(self, actor: Actor, ws: str, project: str, spec: EvalSuiteSpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.register_eval_suite(tx, ws, project, spec))

    async def record_eval_result(self, actor: Actor, ws: str, project: str, spec: EvalResultSpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.record_eval_result(tx, ws, project, spec))

    async def record_comparison(self, actor: Actor, ws: str, project: str, spec: ComparisonSpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.record_comparison(tx, ws, project, spec))

    async def record_decision(self, actor: Actor, ws: str, project: str, spec: DecisionSpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.record_decision(tx, ws, project, spec))

    async def move_alias(self, actor: Actor, ws: str, project: str, spec: AliasMove) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.move_alias(tx, ws, project, spec))

    async def add_budget_entry(self, actor: Actor, ws: str, project: str, spec: BudgetEntrySpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.add_budget_entry(tx, ws, project, spec))

    async def record_report(self, actor: Actor, ws: str, project: str, spec: ReportSpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.record_report(tx, ws, project, spec))

    async def add_annotation(self, actor: Actor, ws: str, project: str, spec: AnnotationSpec) -> WriteResult:
        return await self._put(actor, lambda tx: evidence.add_annotation(tx, ws, project, spec))

    async def record_gate(
        self,
        actor: Actor,
        ws: str,
        project: str,
        run_id: str,
        verdict: dict[str, Any],
        evidence_digest: str,
        asked_by: str,
    ) -> WriteResult:
        return await self._put(
            actor, lambda tx: evidence.record_gate(tx, ws, project, run_id, verdict, evidence_digest, asked_by)
        )

    async def _put(self, actor: Actor, fn: Callable[[Tx], tuple[dict[str, Any], bool]]) -> WriteResult:
        def run(tx: Tx) -> WriteResult:
            record, replayed = fn(tx)
            return WriteResult(record=record, replayed=replayed, cursor=tx.last_cursor)

        return await self.write(actor, run)

    # -- event sinks -----------------------------------------------------------------------------

    async def add_sink(
        self, actor: Actor, ws: str, *, name: str, url: str, secret_env: str, project_id: str | None, types: list[str]
    ) -> WriteResult:
        return await self._put(
            actor,
            lambda tx: sinks.add_sink(
                tx, ws, name=name, url=url, secret_env=secret_env, project_id=project_id, types=types
            ),
        )

    async def remove_sink(self, actor: Actor, ws: str, name: str) -> WriteResult:
        return await self._put(actor, lambda tx: sinks.remove_sink(tx, ws, name))

    async def list_sinks(self, ws: str | None = None) -> list[dict[str, Any]]:
        return await self.read(lambda conn: sinks.list_sinks(conn, ws))

    # -- notification channels -----------------------------------------------------------------

    async def set_channel(self, actor: Actor, ws: str, project: str, *, channel_id: str, guild_id: str) -> WriteResult:
        return await self._put(
            actor, lambda tx: channels.set_channel(tx, ws, project, channel_id=channel_id, guild_id=guild_id)
        )

    async def get_channel(self, ws: str, project: str) -> dict[str, Any] | None:
        return await self.read(lambda conn: channels.get_channel(conn, ws, project))

    async def channel_map(self, ws: str) -> dict[str, str]:
        return await self.read(lambda conn: channels.channel_map(conn, ws))

    # -- campaigns -----------------------------------------------------------------------------

    async def create_campaign(self, actor: Actor, ws: str, project: str, spec: CampaignSpec) -> WriteResult:
        return await self._put(actor, lambda tx: campaigns.create_campaign(tx, ws, project, spec))

    async def transition_campaign(
        self,
        actor: Actor,
        ws: str,
        project: str,
        campaign_id: str,
        target: str,
        *,
        expected_version: int,
        reason: str,
        approval: tuple[str, str] | None = None,
    ) -> WriteResult:
        def move(tx: Tx) -> tuple[dict[str, Any], bool]:
            version = expected_version
            return campaigns.transition_campaign(
                tx, ws, project, campaign_id, target, expected_version=version, reason=reason, approval=approval
            )

        return await self._put(actor, move)

    async def campaign_approvals(self, ws: str, project: str, campaign_id: str) -> set[tuple[str, str]]:
        return await self.read(lambda conn: campaigns.campaign_approvals(conn, ws, project, campaign_id))

    async def get_campaign(self, ws: str, project: str, campaign_id: str) -> dict[str, Any]:
        return await self.read(lambda conn: campaigns.get_campaign(conn, ws, project, campaign_id))

    async def list_campaigns(self, ws: str, project: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: campaigns.list_campaigns(conn, ws, project))

    async def add_iterations(
        self, actor: Actor, ws: str, project: str, campaign_id: str, proposals: list[dict[str, Any]]
    ) -> WriteResult:
        return await self._put(actor, lambda tx: campaigns.add_iterations(tx, ws, project, campaign_id, proposals))

    async def list_iterations(self, ws: str, project: str, campaign_id: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: campaigns.list_iterations(conn, ws, project, campaign_id))

    async def budget_entries(self, ws: str, project: str, scope: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: campaigns.budget_entries(conn, ws, project, scope))

    async def mark_schedule_fired(self, actor: Actor, ws: str, project: str, schedule_id: str, at: str) -> WriteResult:
        return await self._put(actor, lambda tx: campaigns.mark_schedule_fired(tx, ws, project, schedule_id, at))

    async def add_baseline(self, actor: Actor, ws: str, project: str, campaign_id: str) -> WriteResult:
        return await self._put(actor, lambda tx: campaigns.add_baseline(tx, ws, project, campaign_id))

    async def update_iteration(
        self, actor: Actor, ws: str, project: str, campaign_id: str, iteration_id: str, stage: str, **fields: Any
    ) -> WriteResult:
        return await self._put(
            actor, lambda tx: campaigns.update_iteration(tx, ws, project, campaign_id, iteration_id, stage, fields)
        )

    async def active_campaigns(self, status: str = "active") -> list[dict[str, Any]]:
        """Campaigns in one status (the runner's: active); the index campaigns_by_status serves it."""
        return await self.read(lambda conn: campaigns.active_campaigns(conn, status))

    async def set_schedule(
        self, actor: Actor, ws: str, project: str, campaign_id: str, *, cron: str, timezone: str, channel: str
    ) -> WriteResult:
        return await self._put(
            actor,
            lambda tx: campaigns.set_schedule(
                tx, ws, project, campaign_id, cron=cron, timezone=timezone, channel=channel
            ),
        )

    async def list_schedules(self) -> list[dict[str, Any]]:
        return await self.read(campaigns.list_schedules)

    # -- runcards ------------------------------------------------------------------------------

    async def record_runcard(self, actor: Actor, ws: str, project: str, card: dict[str, Any]) -> WriteResult:
        return await self._put(actor, lambda tx: runcards.record_runcard(tx, ws, project, card))

    async def runcards_of_run(self, ws: str, project: str, run_id: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: runcards.runcards_of_run(conn, ws, project, run_id))

    async def get_runcard(self, ws: str, project: str, card_id: str) -> dict[str, Any]:
        return await self.read(lambda conn: runcards.get_runcard(conn, ws, project, card_id))

    async def comparisons_with_candidates(self, ws: str, project: str, result_ids: list[str]) -> list[dict[str, Any]]:
        return await self.read(lambda conn: runcards.comparisons_with_candidates(conn, ws, project, result_ids))

    # -- devices -------------------------------------------------------------------------------

    async def add_device(self, actor: Actor, ws: str, spec: DeviceSpec) -> WriteResult:
        return await self._put(actor, lambda tx: devices.add_device(tx, ws, spec))

    async def remove_device(self, actor: Actor, ws: str, device_id: str) -> WriteResult:
        return await self._put(actor, lambda tx: devices.remove_device(tx, ws, device_id))

    async def record_preflight(self, actor: Actor, ws: str, device_id: str, verdict: PreflightVerdict) -> WriteResult:
        return await self._put(actor, lambda tx: devices.record_preflight(tx, ws, device_id, verdict))

    async def get_device(self, ws: str, device_id: str) -> dict[str, Any]:
        return await self.read(lambda conn: devices.get_device(conn, ws, device_id))

    async def list_devices(self, ws: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: devices.list_devices(conn, ws))

    # -- device groups -------------------------------------------------------------------------

    async def add_device_group(self, actor: Actor, ws: str, spec: DeviceGroupSpec) -> WriteResult:
        return await self._put(actor, lambda tx: device_groups.add_device_group(tx, ws, spec))

    async def remove_device_group(self, actor: Actor, ws: str, group_id: str) -> WriteResult:
        return await self._put(actor, lambda tx: device_groups.remove_device_group(tx, ws, group_id))

    async def record_group_preflight(
        self, actor: Actor, ws: str, group_id: str, verdict: PreflightVerdict
    ) -> WriteResult:
        return await self._put(actor, lambda tx: device_groups.record_group_preflight(tx, ws, group_id, verdict))

    async def get_device_group(self, ws: str, group_id: str) -> dict[str, Any]:
        return await self.read(lambda conn: device_groups.get_device_group(conn, ws, group_id))

    async def list_device_groups(self, ws: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: device_groups.list_device_groups(conn, ws))

    # -- consumers -------------------------------------------------------------------------------

    async def get_consumer_cursor(self, name: str) -> dict[str, Any]:
        return await self.read(lambda conn: queries.get_consumer_cursor(conn, name))

    async def ack_consumer_cursor(
        self, name: str, cursor: int, *, actor: Actor | None = None, ws: str = ""
    ) -> dict[str, Any]:
        """Advance a consumer's durable cursor; it never moves backwards or past the last event.

        The daemon's own consumers move theirs without an actor. Through the API the first principal to move a
        cursor owns it; a move by anyone else is recorded as a `consumer.cursor_moved` event of workspace `ws`.
        """
        if actor is None:
            return await asyncio.shield(self._writer.run(lambda conn: self._ack(conn, name, cursor, "")))
        return await self.write(actor, lambda tx: self._ack_as(tx, name, cursor, actor, ws))

    async def record_notice_failure(
        self,
        actor: Actor,
        ws: str,
        consumer: str,
        *,
        cursor: int,
        event_id: str,
        channel_id: str,
        status: int,
        code: int,
        message: str,
    ) -> dict[str, Any]:
        """Record that Discord refused the notice of event `cursor` for good (`notice.failed`, in the event's
        project) and move `consumer`'s cursor past it, in one transaction: recorded once, never posted again.
        A consumer already at or past `cursor` (a resend whose answer was lost) records nothing."""

        def run(tx: Tx) -> dict[str, Any]:
            event = queries.notice_event(tx.conn, ws, cursor, event_id)
            stored = queries.get_consumer_cursor(tx.conn, consumer)
            if stored["updated_at"] and stored["cursor"] >= cursor:
                return stored
            payload = {"consumer": consumer, "cursor": cursor, "event_id": event_id, "event_type": event["event_type"]}
            payload |= {"channel_id": channel_id, "status": status, "code": code, "message": message}
            tx.append_event("notice.failed", workspace_id=ws, project_id=event["project_id"], payload=payload)
            return self._ack_as(tx, consumer, cursor, actor, ws)

        return await self.write(actor, run)

    async def notice_failures(self, ws: str, *, since: str, limit: int = 5) -> tuple[int, list[dict[str, Any]]]:
        return await self.read(lambda conn: queries.notice_failures(conn, ws, since=since, limit=limit))

    def _ack_as(self, tx: Tx, name: str, cursor: int, actor: Actor, ws: str) -> dict[str, Any]:
        before = queries.get_consumer_cursor(tx.conn, name)
        record = self._ack(tx.conn, name, cursor, actor.actor_id, in_transaction=True)
        owner = str(before.get("owner") or "")
        if owner and owner != actor.actor_id and record["cursor"] != before["cursor"]:
            tx.append_event(
                "consumer.cursor_moved",
                workspace_id=ws,
                project_id=access.WORKSPACE_SCOPE,
                payload={
                    "consumer": name,
                    "cursor": record["cursor"],
                    "previous_cursor": before["cursor"],
                    "owner": owner,
                },
            )
        return record

    def _ack(
        self, conn: sqlite3.Connection, name: str, cursor: int, owner: str, *, in_transaction: bool = False
    ) -> dict[str, Any]:
        last = queries.last_cursor(conn)
        if cursor > last:
            raise InvalidInput(
                f"Cursor {cursor} is past the last event ({last}).",
                hint="Acknowledge only cursors you have received.",
            )
        statement = (
            "INSERT INTO consumer_cursors (name, cursor, updated_at, owner) VALUES (?, ?, ?, ?) ON CONFLICT (name) "
            "DO UPDATE SET cursor = MAX(cursor, excluded.cursor), updated_at = excluded.updated_at, "
            "owner = CASE WHEN owner = '' THEN excluded.owner ELSE owner END"
        )
        values = (name, cursor, utc_iso(self._clock()), owner)
        if in_transaction:
            conn.execute(statement, values)
        else:
            with write_transaction(conn, self.path):
                conn.execute(statement, values)
        return queries.get_consumer_cursor(conn, name)

    async def take_consumer_lease(self, name: str, claim: leases.LeaseClaim) -> dict[str, Any]:
        """Take or renew the lease on consumer `name` (leases.take_lease) and answer its state; raises
        ConsumerLeaseHeld while another holder has it."""

        def run(conn: sqlite3.Connection) -> dict[str, Any]:
            now = self._clock()
            with write_transaction(conn, self.path):
                return leases.lease_state(name, leases.take_lease(conn, name, claim, now=now), now)

        return await asyncio.shield(self._writer.run(run))

    async def release_consumer_lease(self, name: str, *, holder: str, pid: int) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            with write_transaction(conn, self.path):
                return leases.release_lease(conn, name, holder=holder, pid=pid)

        return await asyncio.shield(self._writer.run(run))

    async def get_consumer_lease(self, name: str) -> dict[str, Any]:
        now = self._clock()
        return await self.read(lambda conn: leases.lease_state(name, leases.get_lease(conn, name), now))

    # -- blobs -----------------------------------------------------------------------------------

    async def hold_blob(
        self,
        actor: Actor,
        ws: str,
        project: str,
        sha256: str,
        size_bytes: int,
        *,
        quota_bytes: int | None = None,
        workspace_quota_bytes: int | None = None,
    ) -> bool:
        """Make `project` a holder of an uploaded or stored blob (within the quotas, when they are given)."""

        def hold(tx: Tx) -> bool:
            return blob_holders.hold_blob(
                tx,
                ws,
                project,
                sha256,
                size_bytes,
                quota_bytes=quota_bytes,
                workspace_quota_bytes=workspace_quota_bytes,
            )

        return await self.write(actor, hold)

    async def check_quota(
        self, ws: str, project: str, size_bytes: int, *, quota_bytes: int, workspace_quota_bytes: int | None = None
    ) -> None:
        await self.read(
            lambda conn: blob_holders.check_quota(
                conn, ws, project, size_bytes, quota_bytes=quota_bytes, workspace_quota_bytes=workspace_quota_bytes
            )
        )

    async def holds_blob(self, ws: str, project: str, sha256: str) -> bool:
        return await self.read(lambda conn: blob_holders.holds_blob(conn, ws, project, sha256))

    # -- reads -----------------------------------------------------------------------------------

    async def list_projects(self, ws: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: queries.list_projects(conn, ws))

    async def get_project(self, ws: str, project: str) -> dict[str, Any]:
        return await self.read(lambda conn: queries.get_project(conn, ws, project))

    async def list_experiments(self, ws: str, project: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: queries.list_experiments(conn, ws, project))

    async def project_context(self, ws: str, project: str, *, stale_after_s: float = 3600) -> dict[str, Any]:
        stale_before = utc_iso(self._clock() - timedelta(seconds=stale_after_s))
        return await self.read(lambda conn: queries.project_context(conn, ws, project, stale_before=stale_before))

    async def list_runs(self, ws: str, project: str, **filters: Any) -> list[dict[str, Any]]:
        return await self.read(lambda conn: queries.list_runs(conn, ws, project, **filters))

    async def budget_summary(self, ws: str, project: str, scope: str = "project") -> dict[str, Any]:
        return await self.read(lambda conn: queries.budget_summary(conn, ws, project, scope))

    async def active_runs(self) -> list[dict[str, Any]]:
        return await self.read(queries.active_runs)

    async def settled_gpu_hours(self, ws: str, project: str, run_id: str) -> float | None:
        return await self.read(lambda conn: queries.settled_gpu_hours(conn, ws, project, run_id))

    async def run_event_payloads(self, ws: str, project: str, run_id: str, event_type: str) -> list[Any]:
        return await self.read(lambda conn: queries.run_event_payloads(conn, ws, project, run_id, event_type))

    async def protected_suites(self, ws: str, project: str) -> set[str]:
        return await self.read(lambda conn: queries.protected_suites(conn, ws, project))

    async def entity(self, ws: str, project: str, kind: str, entity_id: str) -> dict[str, Any] | None:
        return await self.read(lambda conn: queries.entity(conn, ws, project, kind, entity_id))

    async def campaign_schedule_channel(self, ws: str, project: str, campaign_id: str) -> str:
        return await self.read(lambda conn: queries.campaign_schedule_channel(conn, ws, project, campaign_id))

    async def get_report(self, ws: str, project: str, report_id: str) -> dict[str, Any]:
        return await self.read(lambda conn: queries.get_report(conn, ws, project, report_id))

    async def get_model_version(self, ws: str, project: str, version: str) -> dict[str, Any]:
        return await self.read(lambda conn: queries.get_model_version(conn, ws, project, version))

    async def find_environment(self, ws: str, project: str, environment: str | None) -> dict[str, Any] | None:
        return await self.read(lambda conn: queries.find_environment(conn, ws, project, environment))

    async def get_dataset_version(self, ws: str, project: str, version: str) -> dict[str, Any]:
        return await self.read(lambda conn: queries.get_dataset_version(conn, ws, project, version))

    async def get_run(self, ws: str, project: str, run_id: str) -> dict[str, Any]:
        return await self.read(lambda conn: queries.get_run(conn, ws, project, run_id))

    async def trend(self, ws: str, project: str, metric: str, run_id: str | None = None) -> dict[str, Any]:
        return dict(json.loads(await self.trend_json(ws, project, metric, run_id)))

    async def trend_json(self, ws: str, project: str, metric: str, run_id: str | None = None) -> str:
        return await self.read(lambda conn: queries.trend_json(conn, ws, project, metric, run_id))

    async def list_evaluations(self, ws: str, project: str, *, suite: str | None = None) -> dict[str, Any]:
        return await self.read(lambda conn: queries.list_evaluations(conn, ws, project, suite=suite))

    async def compare_runs(
        self, ws: str, project: str, run_ids: list[str], suite_id: str | None = None
    ) -> dict[str, Any]:
        return await self.read(lambda conn: queries.compare_runs(conn, ws, project, run_ids, suite_id))

    async def events_page(
        self, ws: str, project: str | None, *, after_cursor: int, limit: int = 100, types: list[str] | None = None
    ) -> EventPage:
        raw = await self.events_page_json(ws, project, after_cursor=after_cursor, limit=limit, types=types)
        return EventPage.model_validate_json(raw.text)

    async def events_page_json(
        self, ws: str, project: str | None, *, after_cursor: int, limit: int = 100, types: list[str] | None = None
    ) -> queries.RawPage:
        return await self.read(
            lambda conn: queries.events_page_json(
                conn, ws, project, after_cursor=after_cursor, limit=limit, types=types
            )
        )

    async def quick_status(self) -> str:
        """Answer "ok" when the ledger serves a trivial read; cheap enough for every /v1/health probe."""
        try:
            await self.read(lambda conn: conn.execute("SELECT 1 FROM schema_migrations LIMIT 1").fetchone())
        except sqlite3.DatabaseError:
            return "unavailable"
        return "ok"

    async def health(self) -> dict[str, Any]:
        return await self.read(lambda conn: integrity.health(conn, self.path))

    async def verify(self) -> dict[str, Any]:
        return await self.read(integrity.verify_chain)

    async def backup(self, target: Path) -> dict[str, Any]:
        return await self.read(lambda conn: integrity.backup_to(conn, target))

    # -- access ----------------------------------------------------------------------------------

    async def insert_token(self, actor: Actor, **fields: Any) -> dict[str, Any]:
        try:
            return await self.write(actor, lambda tx: access.insert_token(tx, **fields))
        finally:
            self._forget_authority()

    async def revoke_token(self, actor: Actor, token_id: str) -> WriteResult:
        try:
            return await self._put(actor, lambda tx: access.revoke_token(tx, token_id))
        finally:
            self._forget_authority()

    async def list_tokens(self) -> list[dict[str, Any]]:
        return await self.read(access.list_tokens)

    async def find_token(self, token_hash: str) -> dict[str, Any] | None:
        if token_hash not in self._tokens:
            if len(self._tokens) > 10_000:
                self._tokens.clear()  # bounded: unknown-token probes must not grow memory
            self._tokens[token_hash] = await self.read(lambda conn: access.find_token(conn, token_hash))
        return self._tokens[token_hash]

    async def insert_grant(self, actor: Actor, **fields: Any) -> dict[str, Any]:
        try:
            return await self.write(actor, lambda tx: access.insert_grant(tx, **fields))
        finally:
            self._forget_authority()

    async def revoke_grant(self, actor: Actor, grant_id: str) -> WriteResult:
        try:
            return await self._put(actor, lambda tx: access.revoke_grant(tx, grant_id))
        finally:
            self._forget_authority()

    async def list_grants(self, workspace_id: str) -> list[dict[str, Any]]:
        return await self.read(lambda conn: access.list_grants(conn, workspace_id))

    async def tokens_of_actor(self, workspace_id: str, actor_id: str) -> list[dict[str, Any]]:
        """The live (unrevoked) tokens issued to an actor in a workspace; expiry is the caller's to judge."""
        return await self.read(lambda conn: access.tokens_of_actor(conn, workspace_id, actor_id))

    async def active_grants(self, workspace_id: str, user_id: str, role_ids: list[str]) -> list[dict[str, Any]]:
        key = (workspace_id, user_id, *sorted(role_ids))
        if key not in self._grants:
            if len(self._grants) > 10_000:
                self._grants.clear()
            self._grants[key] = await self.read(
                lambda conn: access.active_grants(conn, workspace_id, user_id, role_ids)
            )
        return self._grants[key]

    def _forget_authority(self) -> None:
        self._tokens.clear()
        self._grants.clear()

    async def audit_events(self, *, since: str, actor: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.read(lambda conn: access.audit_events(conn, since=since, actor=actor, limit=limit))

    async def count_tokens(self) -> int:
        return await self.read(access.count_tokens)

    async def find_idempotent(self, principal: str, key: str) -> dict[str, Any] | None:
        return await self.read(lambda conn: access.find_idempotent(conn, principal, key))

    async def store_idempotent(self, **fields: Any) -> None:
        now = utc_iso(self._clock())

        def run(conn: sqlite3.Connection) -> None:
            with write_transaction(conn, self.path):
                access.store_idempotent(conn, created_at=now, **fields)

        await asyncio.shield(self._writer.run(run))


def _open_writer(path: Path, synchronous: str) -> sqlite3.Connection:
    try:
        return open_connection(path, synchronous=synchronous)
    except sqlite3.DatabaseError as exc:
        raise _corrupt(exc) from exc


def _prepare(conn: sqlite3.Connection) -> ChainHead:
    """Refuse a damaged file, apply migrations, and return the chain head."""
    try:
        verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise _corrupt(exc) from exc
    if verdict != "ok":
        raise _corrupt(verdict)
    migrate(conn)
    return integrity.chain_head(conn)


def _corrupt(detail: object) -> LedgerUnavailable:
    return LedgerUnavailable(
        f"The ledger file is damaged ({detail}); the daemon will not start on it.",
        hint="Inspect it with bashgym ledger health, then restore a backup with bashgym ledger restore --from FILE "
        "(bashgym ledger backup --to FILE makes one).",
    )
