"""External jobs and compute plans: training that runs on someone else's compute, kept with its upstream identity.

A job is written `submitting` before the upstream is called (`begin_external_job`), `submitted` once the upstream
answered with its id (`record_submission`), and moves on only through observations (`observe_external_job`), each
kept in order. The run the job trains is an ordinary run; its status follows the job's state in the same
transaction the observation is written in, by the service that observes (daemon/external/service.py).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.client.errors import Conflict, NotFound
from bashgym.client.external import ENDED_STATES, ExternalJobSpec, ExternalObservation, PlanRecord
from bashgym.client.validation import canonical_json
from bashgym.ledger.tx import Tx

# The state an observation may move a job to, from each state. An ended job takes observations (late log lines,
# the import of its result) but never another state.
_MOVES: dict[str, frozenset[str]] = {
    "submitting": frozenset({"submitted", "running", "completed", "failed", "cancelled", "unknown"}),
    "submitted": frozenset({"running", "completed", "failed", "cancelled", "unknown"}),
    "running": frozenset({"completed", "failed", "cancelled", "unknown"}),
    "unknown": frozenset({"submitted", "running", "completed", "failed", "cancelled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}
_MAX_PAGE = 500


def begin_external_job(tx: Tx, ws: str, spec: ExternalJobSpec) -> tuple[dict[str, Any], bool]:
    """Record an accepted submission before the upstream is called: state `submitting`, no upstream id yet."""
    existing = _row(tx.conn, ws, spec.job_id)
    if existing is not None:
        return _record(existing), True
    tx.conn.execute(
        "INSERT INTO external_jobs (workspace_id, job_id, project_id, run_id, surface, provider, state, flavor, "
        "timeout_s, cost_ceiling_usd, ceiling_gpu_hours, request_json, request_digest, lineage_json, destination, "
        "created_by, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'submitting', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            ws,
            spec.job_id,
            spec.project_id,
            spec.run_id,
            spec.surface,
            spec.provider,
            spec.flavor,
            spec.timeout_s,
            spec.cost_ceiling_usd,
            spec.ceiling_gpu_hours,
            canonical_json(spec.request),
            spec.request_digest,
            canonical_json(spec.lineage),
            spec.destination,
            tx.actor.actor_id,
            tx.now,
            tx.now,
        ),
    )
    _event(tx, "external_job.accepted", ws, spec.project_id, spec.run_id, spec.job_id, state="submitting")
    return get_external_job(tx.conn, ws, spec.job_id), False


def record_submission(
    tx: Tx, ws: str, job_id: str, upstream_job_id: str, receipt: dict[str, Any]
) -> tuple[dict[str, Any], bool]:
    """The upstream took the job: its id and the receipt it answered. The same id again is a replay."""
    row = _require(tx.conn, ws, job_id)
    if row["upstream_job_id"] == upstream_job_id:
        return _record(row), True
    if row["upstream_job_id"] is not None:
        raise Conflict(
            f"External job {job_id} already has upstream id {row['upstream_job_id']}; it was not submitted twice.",
            hint="Ask the upstream about that id (bashgym jobs show).",
        )
    tx.conn.execute(
        "UPDATE external_jobs SET upstream_job_id = ?, receipt_json = ?, updated_at = ?, "
        "state = CASE WHEN state IN ('submitting', 'unknown') THEN 'submitted' ELSE state END "
        "WHERE workspace_id = ? AND job_id = ?",
        (upstream_job_id, canonical_json(receipt), tx.now, ws, job_id),
    )
    _observe(tx, row, ExternalObservation(kind="receipt", message=f"upstream job {upstream_job_id}", data=receipt))
    _event(
        tx, "external_job.submitted", ws, row["project_id"], row["run_id"], job_id,
        state="submitted", upstream_job_id=upstream_job_id,
    )  # fmt: skip
    return get_external_job(tx.conn, ws, job_id), False


def observe_external_job(tx: Tx, ws: str, job_id: str, observation: ExternalObservation) -> tuple[dict[str, Any], bool]:
    """Append one observation; a new state it carries moves the job (and says so in an event). Answers the job
    and whether its state moved."""
    row = _require(tx.conn, ws, job_id)
    _observe(tx, row, observation)
    moved = observation.state is not None and observation.state != row["state"]
    if moved and observation.state not in _MOVES[row["state"]]:
        moved = False  # an ended job keeps its end; the observation stays on record
    started = 1 if observation.shows_compute or row["compute_started"] else 0
    tx.conn.execute(
        "UPDATE external_jobs SET state = ?, upstream_state = ?, compute_started = ?, reason = ?, updated_at = ? "
        "WHERE workspace_id = ? AND job_id = ?",
        (
            observation.state if moved else row["state"],
            observation.upstream_state or row["upstream_state"],
            started,
            observation.reason if moved and observation.reason else row["reason"],
            tx.now,
            ws,
            job_id,
        ),
    )
    if moved:
        _event(
            tx, f"external_job.{observation.state}", ws, row["project_id"], row["run_id"], job_id,
            state=str(observation.state), upstream_state=observation.upstream_state, reason=observation.reason,
        )  # fmt: skip
    elif started and not row["compute_started"]:
        _event(
            tx, "external_job.running", ws, row["project_id"], row["run_id"], job_id,
            state=row["state"], upstream_state=observation.upstream_state, reason="compute started",
        )  # fmt: skip
    return get_external_job(tx.conn, ws, job_id), moved


def record_result(tx: Tx, ws: str, job_id: str, result: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """What the job made (the imported Hub commit, the provider's model id), once: the same result is a replay."""
    row = _require(tx.conn, ws, job_id)
    text = canonical_json(result)
    if row["result_json"] == text:
        return _record(row), True
    if row["result_json"] is not None:
        raise Conflict(f"External job {job_id} already has a recorded result.", hint="A result is recorded once.")
    tx.conn.execute(
        "UPDATE external_jobs SET result_json = ?, updated_at = ? WHERE workspace_id = ? AND job_id = ?",
        (text, tx.now, ws, job_id),
    )
    _observe(tx, row, ExternalObservation(kind="result", message="result recorded", data=result))
    return get_external_job(tx.conn, ws, job_id), False


def record_cancel_request(tx: Tx, ws: str, job_id: str) -> tuple[dict[str, Any], bool]:
    """A person or agent asked for the job to be cancelled: kept with its actor before the upstream is asked."""
    row = _require(tx.conn, ws, job_id)
    if row["state"] in ENDED_STATES:
        raise Conflict(
            f"External job {job_id} is {row['state']}; there is nothing to cancel.",
            hint="Submit a new job to train again.",
        )
    tx.conn.execute(
        "UPDATE external_jobs SET cancel_requested_by = ?, updated_at = ? WHERE workspace_id = ? AND job_id = ?",
        (tx.actor.actor_id, tx.now, ws, job_id),
    )
    _observe(tx, row, ExternalObservation(kind="cancel", message=f"cancellation asked by {tx.actor.actor_id}"))
    return get_external_job(tx.conn, ws, job_id), False


def get_external_job(conn: sqlite3.Connection, ws: str, job_id: str) -> dict[str, Any]:
    return _record(_require(conn, ws, job_id))


def external_job_of_run(conn: sqlite3.Connection, ws: str, run_id: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT * FROM external_jobs WHERE workspace_id = ? AND run_id = ?", (ws, run_id)).fetchone()
    return _record(row) if row is not None else None


def list_external_jobs(
    conn: sqlite3.Connection,
    ws: str,
    *,
    projects: list[str] | None = None,
    surface: str | None = None,
    state: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Newest first. `projects` None: every project of the workspace (the caller checked it may read them)."""
    where, args = ["workspace_id = ?"], [ws]
    if projects is not None:
        if not projects:
            return []
        where.append(f"project_id IN ({', '.join('?' * len(projects))})")
        args.extend(projects)
    for column, value in (("surface", surface), ("state", state)):
        if value:
            where.append(f"{column} = ?")
            args.append(value)
    rows = conn.execute(
        f"SELECT * FROM external_jobs WHERE {' AND '.join(where)} ORDER BY created_at DESC, job_id DESC LIMIT ?",
        (*args, max(1, min(limit, _MAX_PAGE))),
    ).fetchall()
    return [_record(row) for row in rows]


def open_external_jobs(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every job not yet ended, in every workspace: what a starting daemon asks the upstreams about."""
    rows = conn.execute(
        "SELECT * FROM external_jobs WHERE state IN ('submitting', 'submitted', 'running', 'unknown') "
        "ORDER BY created_at"
    ).fetchall()
    return [_record(row) for row in rows]


def job_observations(
    conn: sqlite3.Connection, ws: str, job_id: str, *, after: int = 0, limit: int = 200
) -> dict[str, Any]:
    """Observations after `after` (a seq), oldest first, and the seq to ask from next."""
    _require(conn, ws, job_id)
    rows = conn.execute(
        "SELECT seq, kind, upstream_state, message, data_json, observed_by, observed_at "
        "FROM external_job_observations WHERE workspace_id = ? AND job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (ws, job_id, after, max(1, min(limit, _MAX_PAGE))),
    ).fetchall()
    items = [{**dict(row), "data": json.loads(row["data_json"]) if row["data_json"] else None} for row in rows]
    for item in items:
        item.pop("data_json")
    return {"observations": items, "next_after": items[-1]["seq"] if items else after}


def record_plan(tx: Tx, ws: str, plan: PlanRecord) -> tuple[dict[str, Any], bool]:
    existing = tx.fetch_one("compute_plans", {"workspace_id": ws, "plan_id": plan.plan_id})
    if existing is not None:
        return _plan(existing), True
    tx.conn.execute(
        "INSERT INTO compute_plans (workspace_id, plan_id, project_id, engine, request_digest, plan_digest, "
        "plan_text, validation_json, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            ws,
            plan.plan_id,
            plan.project_id,
            plan.engine,
            plan.request_digest,
            plan.plan_digest,
            plan.plan_text,
            canonical_json(plan.validation),
            tx.actor.actor_id,
            tx.now,
        ),
    )
    tx.append_event(
        "compute_plan.recorded",
        workspace_id=ws,
        project_id=plan.project_id,
        payload={"entity": "compute_plan", "entity_id": plan.plan_id, "engine": plan.engine},
    )
    return get_plan(tx.conn, ws, plan.plan_id), False


def mark_plan_launched(tx: Tx, ws: str, plan_id: str, job_id: str) -> tuple[dict[str, Any], bool]:
    tx.conn.execute(
        "UPDATE compute_plans SET launched_job_id = ? "
        "WHERE workspace_id = ? AND plan_id = ? AND launched_job_id IS NULL",
        (job_id, ws, plan_id),
    )
    return get_plan(tx.conn, ws, plan_id), False


def get_plan(conn: sqlite3.Connection, ws: str, plan_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM compute_plans WHERE workspace_id = ? AND plan_id = ?", (ws, plan_id)).fetchone()
    if row is None:
        raise NotFound(f"No compute plan {plan_id!r} in workspace {ws!r}.", hint="bashgym compute plan renders one.")
    return _plan(dict(row))


def _observe(tx: Tx, row: dict[str, Any], observation: ExternalObservation) -> None:
    tx.conn.execute(
        "INSERT INTO external_job_observations (workspace_id, job_id, seq, kind, upstream_state, message, data_json, "
        "observed_by, observed_at) SELECT ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ?, ?, ? "
        "FROM external_job_observations WHERE workspace_id = ? AND job_id = ?",
        (
            row["workspace_id"],
            row["job_id"],
            observation.kind,
            observation.upstream_state,
            observation.message,
            canonical_json(observation.data) if observation.data is not None else None,
            tx.actor.actor_id,
            tx.now,
            row["workspace_id"],
            row["job_id"],
        ),
    )


def _event(tx: Tx, event_type: str, ws: str, project: str, run_id: str, job_id: str, **payload: str) -> None:
    tx.append_event(
        event_type,
        workspace_id=ws,
        project_id=project,
        run_id=run_id,
        payload={"entity": "external_job", "entity_id": job_id, **payload},
    )


def _row(conn: sqlite3.Connection, ws: str, job_id: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT * FROM external_jobs WHERE workspace_id = ? AND job_id = ?", (ws, job_id)).fetchone()
    return dict(row) if row is not None else None


def _require(conn: sqlite3.Connection, ws: str, job_id: str) -> dict[str, Any]:
    row = _row(conn, ws, job_id)
    if row is None:
        raise NotFound(f"No external job {job_id!r} in workspace {ws!r}.", hint="bashgym jobs list shows them.")
    return row


def _record(row: Any) -> dict[str, Any]:
    record = dict(row)
    for name in ("request", "lineage", "receipt", "result"):
        text = record.pop(f"{name}_json")
        record[name] = json.loads(text) if text else None
    record["compute_started"] = bool(record["compute_started"])
    return record


def _plan(row: dict[str, Any]) -> dict[str, Any]:
    record = dict(row)
    record["validation"] = json.loads(record.pop("validation_json"))
    return record
