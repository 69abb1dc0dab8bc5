"""Event sinks: where the daemon forwards ledger events (signed batches, by durable cursor)."""

from __future__ import annotations

import sqlite3
from typing import Any

from bashgym.client.errors import Conflict, NotFound
from bashgym.client.validation import canonical_json
from bashgym.ledger.access import WORKSPACE_SCOPE
from bashgym.ledger.rows import require_project, to_record
from bashgym.ledger.tx import Tx


def add_sink(
    tx: Tx, ws: str, *, name: str, url: str, secret_env: str, project_id: str | None, types: list[str]
) -> tuple[dict[str, Any], bool]:
    if project_id is not None:
        require_project(tx.conn, ws, project_id)
    existing = get_sink(tx.conn, ws, name)
    wanted = {"url": url, "secret_env": secret_env, "project_id": project_id, "types": sorted(types)}
    if existing is not None:
        if {k: existing[k] for k in wanted} == wanted:
            return existing, True
        raise Conflict(
            f"Sink {name!r} already exists with another target.",
            hint=f"Remove it first (bashgym sink remove {name}) or pick another name.",
        )
    tx.conn.execute(
        "INSERT INTO sinks (workspace_id, name, url, secret_env, project_id, types_json, created_by, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (ws, name, url, secret_env, project_id, canonical_json(sorted(types)), tx.actor.actor_id, tx.now),
    )
    tx.append_event(
        "sink.added",
        workspace_id=ws,
        project_id=project_id or WORKSPACE_SCOPE,
        payload={"entity": "sink", "entity_id": name, "types": sorted(types)},
    )
    record = get_sink(tx.conn, ws, name)
    assert record is not None
    return record, False


def remove_sink(tx: Tx, ws: str, name: str) -> tuple[dict[str, Any], bool]:
    existing = get_sink(tx.conn, ws, name)
    if existing is None:
        raise NotFound(f"No sink {name!r}.", hint="bashgym sink list shows them.")
    tx.conn.execute("DELETE FROM sinks WHERE workspace_id = ? AND name = ?", (ws, name))
    tx.append_event(
        "sink.removed",
        workspace_id=ws,
        project_id=existing["project_id"] or WORKSPACE_SCOPE,
        payload={"entity": "sink", "entity_id": name},
    )
    return existing, False


def get_sink(conn: sqlite3.Connection, ws: str, name: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT * FROM sinks WHERE workspace_id = ? AND name = ?", (ws, name)).fetchone()
    return _record(row) if row else None


def list_sinks(conn: sqlite3.Connection, ws: str | None = None) -> list[dict[str, Any]]:
    if ws is None:
        rows = conn.execute("SELECT * FROM sinks ORDER BY workspace_id, name").fetchall()
    else:
        rows = conn.execute("SELECT * FROM sinks WHERE workspace_id = ? ORDER BY name", (ws,)).fetchall()
    return [_record(row) for row in rows]


def _record(row: sqlite3.Row) -> dict[str, Any]:
    return to_record(row)
