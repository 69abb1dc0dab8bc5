"""`Ledger`: opens the database, queues writes through one connection, reads through a small pool."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from bashgym.client.errors import InvalidInput, LedgerUnavailable
from bashgym.client.specs import (
    Actor,
    EventPage,
    FileDigest,
    MetricBatch,
    RunRegistration,
    RunTransition,
    WriteResult,
)
from bashgym.client.states import TERMINAL
from bashgym.ledger import (
    access,
    blob_holders,
    browse,
    campaigns,
    channels,
    clusters,
    device_groups,
    devices,
    eval_views,
    evidence,
    external_jobs,
    ids,
    integrity,
    leases,
    lineage,
    queries,
    runcards,
    runs,
    runs_table,
    sinks,
    tags,
    ui_sessions,
)
from bashgym.ledger.db import ConnectionThread, ReaderPool, open_connection, write_transaction
from bashgym.ledger.migrations import migrate
from bashgym.ledger.tx import ChainHead, Tx, utc_iso

T = TypeVar("T")
P = ParamSpec("P")
K = TypeVar("K")
V = TypeVar("V")
# The events of a change of tokens or grants (ledger.access): their commit empties the cached lookups.
AUTHORITY_EVENTS = frozenset(
    {"auth.token_issued", "auth.token_revoked", "auth.token_bound", "authority.granted", "authority.revoked"}
)
Clock = Callable[[], datetime]
# Raises (Unauthenticated, Forbidden) once the caller a wait is held for may no longer wait; see wait_for_events.
Recheck = Callable[[], Awaitable[None]]
RECHECK_S = 1.0
Put = tuple[dict[str, Any], bool]  # a domain writer's answer: the record, and whether it was replayed


# -- the facade's three ways through --------------------------------------------------------------
# Each ledger operation is written once, in its domain module, with the connection or transaction first.
# The facade names it with one line (`get_run = reads(queries.get_run)`): the descriptors below run it on a
# reader, or in one write transaction on the single writer, with the same arguments and types.


class reads(Generic[P, T]):
    """`ledger.f(*args)` runs `fn(conn, *args)` on a reader connection."""

    def __init__(self, fn: Callable[Concatenate[sqlite3.Connection, P], T]) -> None:
        self.fn = fn

    @overload
    def __get__(self, ledger: None, owner: type) -> reads[P, T]: ...
    @overload
    def __get__(self, ledger: Ledger, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, ledger: Ledger | None, owner: type) -> reads[P, T] | Callable[P, Coroutine[Any, Any, T]]:
        if ledger is None:
            return self
        fn, at = self.fn, ledger

        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return await at.read(lambda conn: fn(conn, *args, **kwargs))

        return call


class writes(Generic[P, T]):
    """`ledger.f(actor, *args)` runs `fn(tx, *args)` in one write transaction and answers what it returns."""

    def __init__(self, fn: Callable[Concatenate[Tx, P], T]) -> None:
        self.fn = fn

    @overload
    def __get__(self, ledger: None, owner: type) -> writes[P, T]: ...
    @overload
    def __get__(self, ledger: Ledger, owner: type) -> Callable[Concatenate[Actor, P], Coroutine[Any, Any, T]]: ...
    def __get__(
        self, ledger: Ledger | None, owner: type
    ) -> writes[P, T] | Callable[Concatenate[Actor, P], Coroutine[Any, Any, T]]:
        if ledger is None:
            return self
        fn, at = self.fn, ledger

        async def call(actor: Actor, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return await at.write(actor, lambda tx: fn(tx, *args, **kwargs))

        return call


class puts(Generic[P]):
    """`ledger.f(actor, *args)` runs `fn(tx, *args)` in one write transaction and answers a WriteResult."""

    def __init__(self, fn: Callable[Concatenate[Tx, P], Put]) -> None:
        self.fn = fn

    @overload
    def __get__(self, ledger: None, owner: type) -> puts[P]: ...
    @overload
    def __get__(
        self, ledger: Ledger, owner: type
    ) -> Callable[Concatenate[Actor, P], Coroutine[Any, Any, WriteResult]]: ...
    def __get__(
        self, ledger: Ledger | None, owner: type
    ) -> puts[P] | Callable[Concatenate[Actor, P], Coroutine[Any, Any, WriteResult]]:
        if ledger is None:
            return self
        fn, at = self.fn, ledger

        async def call(actor: Actor, /, *args: P.args, **kwargs: P.kwargs) -> WriteResult:
            return await at._put(actor, lambda tx: fn(tx, *args, **kwargs))

        return call


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
        self._authority_changes = 0  # counts the clears: a lookup read across one is used once, never kept
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
            if tx.kinds & AUTHORITY_EVENTS:
                # Here, before the next write commits: a request held open (a long-poll, a live stream) that
                # reads anything written after a revocation finds the revocation too when it checks again.
                self._forget_authority()
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

    async def wait_for_events(self, after_cursor: int, timeout_s: float, *, recheck: Recheck | None = None) -> None:
        """Return once an event past after_cursor exists, or after timeout_s. A wait held for a caller (a long-poll,
        a live stream) passes `recheck`, which raises once that caller may no longer wait (a revoked token): it runs
        at every append and at least every RECHECK_S, and what it raises ends the wait."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            tick_s = deadline - loop.time() if recheck is None else min(RECHECK_S, deadline - loop.time())
            await self._appended_past(after_cursor, max(0.0, tick_s))
            if recheck is None:
                return
            await recheck()
            if self._head.cursor > after_cursor or loop.time() >= deadline:
                return

    async def _appended_past(self, after_cursor: int, timeout_s: float) -> None:
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

    create_project = puts(lineage.create_project)

    create_experiment = puts(lineage.create_experiment)

    register_model_version = puts(lineage.register_model_version)

    register_dataset_version = puts(lineage.register_dataset_version)

    register_environment = puts(lineage.register_environment)

    # -- runs ------------------------------------------------------------------------------------

    async def register_run(
        self, actor: Actor, ws: str, spec: RunRegistration, *, model_files: Sequence[FileDigest] = ()
    ) -> WriteResult:
        def fn(tx: Tx) -> WriteResult:
            record, replayed, missing = runs.register_run(tx, ws, spec, model_files)
            record["missing_context_fields"] = missing
            return WriteResult(record=record, replayed=replayed, cursor=tx.last_cursor)

        return await self.write(actor, fn)

    async def transition_run(
        self,
        actor: Actor,
        ws: str,
        project: str,
        run_id: str,
        spec: RunTransition,
        *,
        settle_gpus: int | None = None,
        gpu_hours: float | None = None,
    ) -> WriteResult:
        """settle_gpus: at an end, settle the run's launch reservation in the same transaction, charging its
        hours times these GPUs (evidence.settle_reservation); gpu_hours, where the compute's own accounting measured
        them (a Slurm job's elapsed time times its GPUs), is charged instead. The daemon passes them; the ledger API
        does not."""

        def fn(tx: Tx) -> tuple[dict[str, Any], bool]:
            record, replayed = runs.transition_run(tx, ws, project, run_id, spec)
            if settle_gpus is not None and not replayed and spec.status in TERMINAL:
                evidence.settle_reservation(tx, ws, project, run_id, spec.status, settle_gpus, gpu_hours=gpu_hours)
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

    register_artifact = puts(evidence.register_artifact)

    register_eval_suite = puts(evidence.register_eval_suite)

    record_eval_result = puts(evidence.record_eval_result)

    record_comparison = puts(evidence.record_comparison)

    record_decision = puts(evidence.record_decision)

    move_alias = puts(evidence.move_alias)

    add_budget_entry = puts(evidence.add_budget_entry)

    record_report = puts(evidence.record_report)

    add_annotation = puts(evidence.add_annotation)

    record_gate = puts(evidence.record_gate)

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

    remove_sink = puts(sinks.remove_sink)

    async def list_sinks(self, ws: str | None = None) -> list[dict[str, Any]]:
        return await self.read(lambda conn: sinks.list_sinks(conn, ws))

    # -- notification channels -----------------------------------------------------------------

    async def set_channel(self, actor: Actor, ws: str, project: str, *, channel_id: str, guild_id: str) -> WriteResult:
        return await self._put(
            actor, lambda tx: channels.set_channel(tx, ws, project, channel_id=channel_id, guild_id=guild_id)
        )

    get_channel = reads(channels.get_channel)

    channel_map = reads(channels.channel_map)

    # -- campaigns -----------------------------------------------------------------------------

    create_campaign = puts(campaigns.create_campaign)

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

    campaign_approvals = reads(campaigns.campaign_approvals)

    get_campaign = reads(campaigns.get_campaign)

    list_campaigns = reads(campaigns.list_campaigns)

    add_iterations = puts(campaigns.add_iterations)

    list_iterations = reads(campaigns.list_iterations)

    budget_entries = reads(campaigns.budget_entries)

    mark_schedule_fired = puts(campaigns.mark_schedule_fired)

    add_baseline = puts(campaigns.add_baseline)

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

    record_runcard = puts(runcards.record_runcard)

    runcards_of_run = reads(runcards.runcards_of_run)
    runcard_followups = reads(runcards.runcard_followups)

    get_runcard = reads(runcards.get_runcard)

    comparisons_with_candidates = reads(runcards.comparisons_with_candidates)

    # -- devices -------------------------------------------------------------------------------

    add_device = puts(devices.add_device)

    remove_device = puts(devices.remove_device)

    record_preflight = puts(devices.record_preflight)

    get_device = reads(devices.get_device)

    list_devices = reads(devices.list_devices)

    # -- device groups -------------------------------------------------------------------------

    add_device_group = puts(device_groups.add_device_group)

    remove_device_group = puts(device_groups.remove_device_group)

    record_group_preflight = puts(device_groups.record_group_preflight)

    get_device_group = reads(device_groups.get_device_group)

    list_device_groups = reads(device_groups.list_device_groups)

    # -- Slurm clusters --------------------------------------------------------------------------

    add_cluster = puts(clusters.add_cluster)

    remove_cluster = puts(clusters.remove_cluster)

    get_cluster = reads(clusters.get_cluster)

    list_clusters = reads(clusters.list_clusters)

    # -- the web view's reads (browse.py) ----------------------------------------------------------------------------
    runs_page = reads(browse.runs_page)
    run_metrics = reads(browse.run_metrics)
    run_events = reads(browse.run_events)
    metric_series = reads(browse.series)
    campaign_reports = reads(browse.campaign_reports)
    eval_result = reads(eval_views.eval_result)
    comparison = reads(eval_views.comparison)
    comparisons_between = reads(eval_views.comparisons_between)
    latest_results_of_runs = reads(eval_views.latest_results_of_runs)
    runs_table_page = reads(runs_table.runs_table)

    # -- external jobs and compute plans ---------------------------------------------------------------------------
    begin_external_job = puts(external_jobs.begin_external_job)
    record_external_submission = puts(external_jobs.record_submission)
    observe_external_job = puts(external_jobs.observe_external_job)
    record_external_result = puts(external_jobs.record_result)
    record_external_cancel = puts(external_jobs.record_cancel_request)
    get_external_job = reads(external_jobs.get_external_job)
    external_job_of_run = reads(external_jobs.external_job_of_run)
    list_external_jobs = reads(external_jobs.list_external_jobs)
    open_external_jobs = reads(external_jobs.open_external_jobs)
    external_job_observations = reads(external_jobs.job_observations)
    record_compute_plan = puts(external_jobs.record_plan)
    mark_plan_launched = puts(external_jobs.mark_plan_launched)
    get_compute_plan = reads(external_jobs.get_plan)

    # -- consumers -------------------------------------------------------------------------------

    get_consumer_cursor = reads(queries.get_consumer_cursor)

    async def ack_consumer_cursor(
        self,
        name: str,
        cursor: int,
        *,
        actor: Actor | None = None,
        ws: str = "",
        project: str | None = None,
        owner: str | None = None,
    ) -> dict[str, Any]:
        """Advance a consumer's durable cursor; it never moves backwards or past the last event.

        The daemon's own consumers move theirs without an actor. Through the API a cursor's owner is `owner` (the
        daemon, for its own consumers) or else the first principal to move it; a move by anyone else is recorded
        as a `consumer.cursor_moved` event of workspace `ws` (and `project`), where the consumer reads.
        """
        if actor is None:
            return await asyncio.shield(self._writer.run(lambda conn: self._ack(conn, name, cursor, "")))
        return await self.write(actor, lambda tx: self._ack_as(tx, name, cursor, actor, ws, project, owner))

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

    def _ack_as(
        self,
        tx: Tx,
        name: str,
        cursor: int,
        actor: Actor,
        ws: str,
        project: str | None = None,
        owner: str | None = None,
    ) -> dict[str, Any]:
        before = queries.get_consumer_cursor(tx.conn, name)
        record = self._ack(tx.conn, name, cursor, owner or actor.actor_id, in_transaction=True)
        owned_by = str(record.get("owner") or "")
        if owned_by != actor.actor_id and record["cursor"] != before["cursor"]:
            tx.append_event(
                "consumer.cursor_moved",
                workspace_id=ws,
                project_id=project or access.WORKSPACE_SCOPE,
                payload={
                    "consumer": name,
                    "cursor": record["cursor"],
                    "previous_cursor": before["cursor"],
                    "owner": owned_by,
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

    holds_blob = reads(blob_holders.holds_blob)

    # -- reads -----------------------------------------------------------------------------------

    list_projects = reads(queries.list_projects)

    get_project = reads(queries.get_project)

    list_experiments = reads(queries.list_experiments)

    async def project_context(self, ws: str, project: str, *, stale_after_s: float = 3600) -> dict[str, Any]:
        stale_before = utc_iso(self._clock() - timedelta(seconds=stale_after_s))
        return await self.read(lambda conn: queries.project_context(conn, ws, project, stale_before=stale_before))

    async def list_runs(self, ws: str, project: str, **filters: Any) -> list[dict[str, Any]]:
        return await self.read(lambda conn: queries.list_runs(conn, ws, project, **filters))

    async def budget_summary(self, ws: str, project: str, scope: str = "project") -> dict[str, Any]:
        return await self.read(lambda conn: queries.budget_summary(conn, ws, project, scope))

    async def active_runs(self) -> list[dict[str, Any]]:
        return await self.read(queries.active_runs)

    settled_gpu_hours = reads(queries.settled_gpu_hours)

    run_event_payloads = reads(queries.run_event_payloads)

    protected_suites = reads(queries.protected_suites)

    entity = reads(queries.entity)

    campaign_schedule_channel = reads(queries.campaign_schedule_channel)

    get_report = reads(queries.get_report)

    get_model_version = reads(queries.get_model_version)
    alias_holder = reads(queries.alias_holder)
    runs_rewarded_by = reads(queries.runs_rewarded_by)

    find_environment = reads(queries.find_environment)

    get_dataset_version = reads(queries.get_dataset_version)

    get_run = reads(queries.get_run)
    run_row = reads(runs.get_run_row)  # the run's own row, no attempts or summaries: enough to say it exists
    run_head = reads(queries.run_head)  # the run's record and attempts: enough to write to it

    # -- tags and notes (ledger.tags) ------------------------------------------------------------

    set_tags = puts(tags.set_tags)
    unset_tags = puts(tags.unset_tags)
    set_note = puts(tags.set_note)
    labels_of = reads(tags.labels_of)
    list_model_versions = reads(queries.list_model_versions)

    ids_with_prefix = reads(ids.ids_with_prefix)

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

    backup = reads(integrity.backup_to)

    # -- access ----------------------------------------------------------------------------------

    async def insert_token(self, actor: Actor, **fields: Any) -> dict[str, Any]:
        try:
            return await self.write(actor, lambda tx: access.insert_token(tx, **fields))
        finally:
            self._forget_authority()

    async def revoke_token(self, actor: Actor, token_id: str, workspace_id: str | None = None) -> WriteResult:
        """Revoke a token, of `workspace_id` only when one is named."""
        try:
            return await self._put(actor, lambda tx: access.revoke_token(tx, token_id, workspace_id))
        finally:
            self._forget_authority()

    async def list_tokens(self, workspace_id: str | None = None) -> list[dict[str, Any]]:
        """Every token, or the tokens of one workspace."""
        return await self.read(lambda conn: access.list_tokens(conn, workspace_id))

    async def bind_project_tokens(self, actor: Actor, workspace_id: str) -> int:
        """Bind project tokens issued without a workspace to `workspace_id` (the default), once, at start."""
        try:
            return await self.write(actor, lambda tx: access.bind_project_tokens(tx, workspace_id))
        finally:
            self._forget_authority()

    async def find_token(self, token_hash: str) -> dict[str, Any] | None:
        if token_hash in self._tokens:
            return self._tokens[token_hash]
        return await self._looked_up(self._tokens, token_hash, lambda conn: access.find_token(conn, token_hash))

    # -- the web view's sessions -------------------------------------------------------------------

    async def open_ui_session(self, actor: Actor, **fields: Any) -> dict[str, Any]:
        return await self.write(actor, lambda tx: ui_sessions.open_session(tx, **fields))

    async def live_ui_session(self, session_hash: str) -> dict[str, Any] | None:
        now = utc_iso(self.now())
        return await self.read(lambda conn: ui_sessions.live_session(conn, session_hash, now))

    async def end_ui_session(
        self, actor: Actor, *, session_hash: str | None = None, session_id: str | None = None, reason: str
    ) -> bool:
        def end(tx: Tx) -> bool:
            return ui_sessions.end_session(tx, session_hash=session_hash, session_id=session_id, reason=reason)

        return await self.write(actor, end)

    get_ui_session = reads(ui_sessions.get_session)
    get_token = reads(access.get_token)
    list_ui_sessions = reads(ui_sessions.list_sessions)

    async def insert_grant(self, actor: Actor, **fields: Any) -> dict[str, Any]:
        try:
            return await self.write(actor, lambda tx: access.insert_grant(tx, **fields))
        finally:
            self._forget_authority()

    async def revoke_grant(self, actor: Actor, grant_id: str, workspace_id: str) -> WriteResult:
        try:
            return await self._put(actor, lambda tx: access.revoke_grant(tx, grant_id, workspace_id))
        finally:
            self._forget_authority()

    list_grants = reads(access.list_grants)

    async def tokens_of_actor(self, workspace_id: str, actor_id: str) -> list[dict[str, Any]]:
        """The live (unrevoked) tokens issued to an actor in a workspace; expiry is the caller's to judge."""
        return await self.read(lambda conn: access.tokens_of_actor(conn, workspace_id, actor_id))

    async def active_grants(self, workspace_id: str, user_id: str, role_ids: list[str]) -> list[dict[str, Any]]:
        key = (workspace_id, user_id, *sorted(role_ids))
        if key in self._grants:
            return self._grants[key]
        return await self._looked_up(
            self._grants, key, lambda conn: access.active_grants(conn, workspace_id, user_id, role_ids)
        )

    async def _looked_up(self, cache: dict[K, V], key: K, read: Callable[[sqlite3.Connection], V]) -> V:
        """Read `key` and keep it in `cache`, unless tokens or grants changed meanwhile: a row read before a
        revocation committed would otherwise be kept, and the revoked token live again. At most 10,000 are kept,
        so probes with unknown tokens cannot grow memory."""
        changes = self._authority_changes
        found = await self.read(read)
        if changes == self._authority_changes:
            if len(cache) > 10_000:
                cache.clear()
            cache[key] = found
        return found

    def _forget_authority(self) -> None:
        """Called on the writer thread after an authority write commits, and again when its caller resumes."""
        self._authority_changes += 1
        self._tokens.clear()
        self._grants.clear()

    async def audit_events(
        self, *, since: str, actor: str | None, limit: int, workspace_id: str | None = None
    ) -> list[dict[str, Any]]:
        return await self.read(
            lambda conn: access.audit_events(conn, since=since, actor=actor, limit=limit, workspace_id=workspace_id)
        )

    async def count_tokens(self) -> int:
        return await self.read(access.count_tokens)

    find_idempotent = reads(access.find_idempotent)

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
