"""Writes of runs, attempts, status transitions and metric batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bashgym.client.errors import Conflict, NotFound
from bashgym.client.redaction import redact_text
from bashgym.client.specs import (
    UNASSIGNED,
    FileDigest,
    MetricBatch,
    RunRegistration,
    RunTransition,
    TrackingContext,
    context_in_workspace,
)
from bashgym.client.states import check_transition, event_type_for
from bashgym.client.validation import canonical_json, check_payload, identity_digest
from bashgym.ledger.lineage import ensure_unassigned, register_context_lineage
from bashgym.ledger.rows import check_id_unused, not_found, require_project, to_record
from bashgym.ledger.tx import Tx, new_id


def register_run(
    tx: Tx, ws: str, spec: RunRegistration, model_files: Sequence[FileDigest] = ()
) -> tuple[dict[str, Any], bool, list[str]]:
    """Register a run and its attempt 1 (queued); without a complete context it goes to `unassigned`.
    `model_files`: what the daemon's launch hashed of base_model, recorded with a model version this context is the
    first to name (never a caller's: the API passes none).

    Returns the run record, whether it was a replay, and the context fields that were missing.
    """
    ctx, missing = context_in_workspace(spec.tracking_context, ws)
    if ctx is None:
        ensure_unassigned(tx, ws)
        project, experiment = UNASSIGNED, UNASSIGNED
        versions: dict[str, str | None] = {"model_version_id": None, "dataset_version_id": None, "environment_id": None}
    else:
        _register_lineage_once(tx, ctx, spec, model_files)
        project, experiment = ctx.project_id, ctx.experiment_id
        versions = {
            "model_version_id": ctx.model_version_id,
            "dataset_version_id": ctx.dataset_version_id,
            "environment_id": ctx.environment_id,
        }
    check_payload(spec.config, field="config")
    run_id = spec.run_id or _existing_run_id(tx, ws, project, spec) or new_id("run")
    check_id_unused(tx.conn, "runs", "run_id", run_id, ws, project, label="Run")
    identity = {
        "project_id": project,
        "experiment_id": experiment,
        "source_system": spec.source_system,
        "source_run_id": spec.source_run_id or run_id,
        "method": spec.method,
        "recipe_digest": spec.recipe_digest or "",
        "config": spec.config,
        "is_simulation": spec.is_simulation,
        **versions,
    }
    row, replayed = tx.put(
        "runs",
        key={"workspace_id": ws, "project_id": project, "run_id": run_id},
        identity=identity,
        columns={
            "experiment_id": experiment,
            "source_system": spec.source_system,
            "source_run_id": spec.source_run_id or run_id,
            "method": spec.method,
            "status": "queued",
            "context_status": "verified" if ctx else "unassigned",
            **versions,
            "recipe_digest": spec.recipe_digest or "",
            "config_json": canonical_json(spec.config),
            "correlation_id": spec.correlation_id or tx.actor.correlation_id,
            "is_simulation": int(spec.is_simulation),
            "launched_by": tx.actor.actor_id,
            "created_at": tx.now,
            "updated_at": tx.now,
        },
        label=f"Run {run_id!r}",
    )
    if not replayed:
        refs = {"experiment_id": experiment, "run_id": run_id}
        tx.append_event(
            "run.registered",
            workspace_id=ws,
            project_id=project,
            payload={
                "entity": "run",
                "entity_id": run_id,
                "context_status": row["context_status"],
                "missing_context_fields": missing[:40],
            },
            **refs,
        )
        attempt_id = create_attempt(tx, ws, project, run_id)
        tx.append_event(
            "run.queued",
            workspace_id=ws,
            project_id=project,
            payload={"status": "queued"},
            attempt_id=attempt_id,
            **refs,
        )
    return to_record(row), replayed, missing


def _register_lineage_once(
    tx: Tx, ctx: TrackingContext, spec: RunRegistration, model_files: Sequence[FileDigest]
) -> None:
    """Register the context's lineage, unless this exact context was already registered and committed.

    Every launch of an experiment resends the same context; the lineage rows it names are immutable.
    """
    marker = ("tracking_context", identity_digest({"context": spec.tracking_context, "target": spec.compute_target}))
    if marker in tx.known_rows or marker in tx.learned:
        return
    register_context_lineage(tx, ctx, spec.compute_target, model_files)
    tx.learned[marker] = {}


def _existing_run_id(tx: Tx, ws: str, project: str, spec: RunRegistration) -> str | None:
    """The run this project already holds under this source identity, so a retry replays instead of
    duplicating. Another project's run with the same source id is not looked at (isolation)."""
    if spec.source_run_id is None:
        return None
    row = tx.conn.execute(
        "SELECT run_id FROM runs WHERE workspace_id = ? AND project_id = ? AND source_system = ? AND source_run_id = ?",
        (ws, project, spec.source_system, spec.source_run_id),
    ).fetchone()
    return str(row[0]) if row else None


def create_attempt(tx: Tx, ws: str, project: str, run_id: str) -> str:
    row = tx.conn.execute(
        "SELECT COALESCE(MAX(attempt_number), 0) FROM attempts WHERE workspace_id = ? AND project_id = ? "
        "AND run_id = ?",
        (ws, project, run_id),
    ).fetchone()
    number = int(row[0]) + 1
    attempt_id = f"{run_id}.a{number}" if len(run_id) < 150 else new_id("att")
    tx.put(
        "attempts",
        key={"workspace_id": ws, "project_id": project, "attempt_id": attempt_id},
        identity={"run_id": run_id, "attempt_number": number},
        columns={
            "run_id": run_id,
            "attempt_number": number,
            "status": "queued",
            "created_at": tx.now,
            "updated_at": tx.now,
        },
        label=f"Attempt {attempt_id!r}",
    )
    tx.append_event(
        "attempt.created",
        workspace_id=ws,
        project_id=project,
        run_id=run_id,
        attempt_id=attempt_id,
        payload={"entity": "attempt", "entity_id": attempt_id, "attempt_number": number},
    )
    return attempt_id


def supersede_attempt(tx: Tx, ws: str, project: str, run_id: str, reason: str) -> str:
    """Close the latest attempt of an `unknown` run as failed and open the next one (queued); return its id.

    A run whose trainer was lost resumes from its last complete checkpoint and redoes the steps after it.
    Those steps are the new attempt's: the lost attempt's points stay as they were recorded.
    """
    run = get_run_row(tx.conn, ws, project, run_id)
    if run["status"] != "unknown":
        raise Conflict(
            f"Run {run_id} is {run['status']}; only an `unknown` run goes on as a new attempt.",
            hint="A paused run resumes as the same attempt.",
        )
    lost = latest_attempt(tx.conn, ws, project, run_id)
    check_transition(lost["status"], "failed", what=f"Attempt {lost['attempt_id']}")
    reason = redact_text(reason)
    tx.conn.execute(
        "UPDATE attempts SET status = 'failed', status_reason = ?, updated_at = ?, ended_at = ? "
        "WHERE workspace_id = ? AND project_id = ? AND attempt_id = ?",
        (reason, tx.now, tx.now, ws, project, lost["attempt_id"]),
    )
    attempt_id = create_attempt(tx, ws, project, run_id)
    tx.append_event(
        "attempt.superseded",
        workspace_id=ws,
        project_id=project,
        experiment_id=run["experiment_id"],
        run_id=run_id,
        attempt_id=lost["attempt_id"],
        payload={"attempt_id": lost["attempt_id"], "next_attempt_id": attempt_id, "reason": reason},
    )
    return attempt_id


def get_run_row(tx_conn: Any, ws: str, project: str, run_id: str) -> dict[str, Any]:
    require_project(tx_conn, ws, project)
    row = tx_conn.execute(
        "SELECT * FROM runs WHERE workspace_id = ? AND project_id = ? AND run_id = ?", (ws, project, run_id)
    ).fetchone()
    if row is None:
        raise not_found("run", run_id, project, f"bashgym ledger runs --project {project}")
    return dict(row)


def latest_attempt(conn: Any, ws: str, project: str, run_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM attempts WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
        "ORDER BY attempt_number DESC LIMIT 1",
        (ws, project, run_id),
    ).fetchone()
    assert row is not None, "every run has attempt 1"
    return dict(row)


def transition_run(tx: Tx, ws: str, project: str, run_id: str, spec: RunTransition) -> tuple[dict[str, Any], bool]:
    """Move the run and its attempt (the latest unless named) to a new status, appending run.<status>."""
    run = get_run_row(tx.conn, ws, project, run_id)
    attempt = _attempt_for(tx, ws, project, run_id, spec.attempt_id)
    if run["status"] == spec.status and attempt["status"] == spec.status:
        return to_record(run), True
    check_transition(run["status"], spec.status, what=f"Run {run_id}")
    check_transition(attempt["status"], spec.status, what=f"Attempt {attempt['attempt_id']}")
    reason, error_summary = redact_text(spec.reason), redact_text(spec.error_summary)
    is_terminal = spec.status in {"completed", "failed", "cancelled"}
    started = tx.now if spec.status == "running" else None
    ended = tx.now if is_terminal else None
    tx.conn.execute(
        "UPDATE runs SET status = ?, updated_at = ?, started_at = COALESCE(started_at, ?), ended_at = ? "
        "WHERE workspace_id = ? AND project_id = ? AND run_id = ?",
        (spec.status, tx.now, started, ended, ws, project, run_id),
    )
    tx.conn.execute(
        "UPDATE attempts SET status = ?, status_reason = ?, error_summary = ?, updated_at = ?, "
        "started_at = COALESCE(started_at, ?), ended_at = ? WHERE workspace_id = ? AND project_id = ? "
        "AND attempt_id = ?",
        (spec.status, reason, error_summary, tx.now, started, ended, ws, project, attempt["attempt_id"]),
    )
    payload: dict[str, Any] = {"status": spec.status, "previous_status": run["status"], "reason": reason}
    if error_summary:
        payload["error_summary"] = error_summary
    tx.append_event(
        event_type_for(run["status"], spec.status),
        workspace_id=ws,
        project_id=project,
        experiment_id=run["experiment_id"],
        run_id=run_id,
        attempt_id=attempt["attempt_id"],
        payload=payload,
    )
    return to_record(get_run_row(tx.conn, ws, project, run_id)), False


def _attempt_for(tx: Tx, ws: str, project: str, run_id: str, attempt_id: str | None) -> dict[str, Any]:
    if attempt_id is None:
        return latest_attempt(tx.conn, ws, project, run_id)
    row = tx.fetch_one("attempts", {"workspace_id": ws, "project_id": project, "attempt_id": attempt_id})
    if row is None or row["run_id"] != run_id:
        raise NotFound(
            f"No attempt {attempt_id!r} of run {run_id!r} in project {project!r}.",
            hint=f"See the run's attempts with bashgym ledger run --project {project} {run_id}.",
        )
    return row


def ingest_metrics(tx: Tx, ws: str, project: str, batch: MetricBatch) -> dict[str, Any]:
    """Insert a batch in this one transaction; identical points replay, a changed value is a conflict."""
    run = get_run_row(tx.conn, ws, project, batch.run_id)
    attempt = _attempt_for(tx, ws, project, batch.run_id, batch.attempt_id)
    seen: dict[tuple[str, int], float] = {}
    times: dict[tuple[str, int], float | None] = {}
    for point in batch.points:
        key = (point.metric, point.step)
        if seen.setdefault(key, point.value) != point.value:
            raise Conflict(
                f"The batch holds two values for {point.metric} at step {point.step}.",
                hint="Send one value per metric and step.",
            )
        times.setdefault(key, point.time)
    series = {metric: _series_id(tx, ws, project, batch, metric) for metric in {m for m, _ in seen}}
    rows = [(series[key[0]], key[1], value, times[key]) for key, value in seen.items()]
    before = tx.conn.total_changes
    # A replayed point keeps the time it was first recorded with: the time is when it was logged, not sent.
    tx.conn.executemany(
        "INSERT INTO metric_points (series_id, step, value, logged_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        rows,
    )
    inserted = tx.conn.total_changes - before
    if inserted < len(rows):
        _check_replayed_points(tx, ws, project, batch, seen)
    result = {"run_id": batch.run_id, "attempt_id": attempt["attempt_id"], "count": len(rows), "inserted": inserted}
    if inserted:
        steps = [step for _, step in seen]
        tx.append_event(
            "metrics.ingested",
            workspace_id=ws,
            project_id=project,
            experiment_id=run["experiment_id"],
            run_id=batch.run_id,
            attempt_id=batch.attempt_id,
            payload={
                "count": len(rows),
                "inserted": inserted,
                "metrics": sorted({metric for metric, _ in seen})[:50],
                "first_step": min(steps),
                "last_step": max(steps),
            },
        )
    return result


def _series_id(tx: Tx, ws: str, project: str, batch: MetricBatch, metric: str) -> int:
    key = (ws, project, batch.run_id, metric, batch.attempt_id)
    where = "workspace_id = ? AND project_id = ? AND run_id = ? AND metric = ? AND attempt_id = ?"
    row = tx.conn.execute(f"SELECT series_id FROM metric_series WHERE {where}", key).fetchone()
    if row is not None:
        return int(row[0])
    cursor = tx.conn.execute(
        "INSERT INTO metric_series (workspace_id, project_id, run_id, metric, attempt_id) VALUES (?, ?, ?, ?, ?)", key
    )
    return int(cursor.lastrowid or 0)


def _check_replayed_points(
    tx: Tx, ws: str, project: str, batch: MetricBatch, seen: dict[tuple[str, int], float]
) -> None:
    series = {metric: _series_id(tx, ws, project, batch, metric) for metric in {m for m, _ in seen}}
    query = "SELECT value FROM metric_points WHERE series_id = ? AND step = ?"
    for (metric, step), value in seen.items():
        stored = tx.conn.execute(query, (series[metric], step)).fetchone()
        if stored is not None and stored[0] != value:
            raise Conflict(
                f"{metric} at step {step} of attempt {batch.attempt_id} is already {stored[0]}; this batch says "
                f"{value}. Recorded metric points never change.",
                hint="Resend the original value, or record the corrected series under a new attempt.",
            )


def append_run_event(
    tx: Tx, ws: str, project: str, run_id: str, attempt_id: str, event_type: str, payload: dict[str, Any]
) -> int:
    run = get_run_row(tx.conn, ws, project, run_id)
    return tx.append_event(
        event_type,
        workspace_id=ws,
        project_id=project,
        experiment_id=run["experiment_id"],
        run_id=run_id,
        attempt_id=attempt_id,
        payload=payload,
    )
