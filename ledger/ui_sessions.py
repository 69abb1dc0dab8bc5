"""The web view's sessions: each kept by the sha256 of its cookie value, bound to the token its link was asked with."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.client.errors import NotFound
from bashgym.ledger.tx import Tx, new_id

_SESSIONS_HINT = "See the sessions you may end with GET /v1/ui/sessions."
_SHOWN = "session_id, workspace_id, actor_id, token_id, created_at, expires_at, ended_at, ended_by, end_reason"


def open_session(
    tx: Tx, *, session_hash: str, workspace_id: str, actor_id: str, token_id: str, delegation: dict[str, str],
    expires_at: str,
) -> dict[str, Any]:  # fmt: skip
    """Record a new session (its cookie value's digest only) and return it as it may be shown."""
    session_id = new_id("uis")
    tx.conn.execute(
        "INSERT INTO ui_sessions (session_id, session_hash, workspace_id, actor_id, token_id, delegation_json, "
        "created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, session_hash, workspace_id, actor_id, token_id, json.dumps(delegation), tx.now, expires_at),
    )
    return _shown(tx.conn, session_id)


def live_session(conn: sqlite3.Connection, session_hash: str, now: str) -> dict[str, Any] | None:
    """The session whose cookie hashes to `session_hash`, with its delegation, unless it ended or expired."""
    row = conn.execute(
        f"SELECT {_SHOWN}, delegation_json FROM ui_sessions WHERE session_hash = ? AND ended_at IS NULL "
        "AND expires_at > ?",
        (session_hash, now),
    ).fetchone()
    if row is None:
        return None
    found = dict(row)
    found["delegation"] = json.loads(found.pop("delegation_json"))
    return found


def end_session(tx: Tx, *, session_hash: str | None = None, session_id: str | None = None, reason: str) -> bool:
    """End one session, by its digest (signing out) or its id (a revocation); False when none was live."""
    column, value = ("session_hash", session_hash) if session_hash else ("session_id", session_id)
    ended = tx.conn.execute(
        f"UPDATE ui_sessions SET ended_at = ?, ended_by = ?, end_reason = ? WHERE {column} = ? AND ended_at IS NULL",
        (tx.now, tx.actor.actor_id, reason, value),
    )
    return ended.rowcount > 0


def get_session(conn: sqlite3.Connection, session_id: str) -> dict[str, Any]:
    """A session as it may be shown (never its digest); NotFound for an unknown id."""
    return _shown(conn, session_id)


def list_sessions(conn: sqlite3.Connection, workspace_id: str | None, actor_id: str | None) -> list[dict[str, Any]]:
    """The live and ended sessions of a workspace (None: every one), of one actor when named; newest first."""
    clauses = [c for c, v in (("workspace_id = ?", workspace_id), ("actor_id = ?", actor_id)) if v is not None]
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    values = [v for v in (workspace_id, actor_id) if v is not None]
    rows = conn.execute(f"SELECT {_SHOWN} FROM ui_sessions {where} ORDER BY created_at DESC LIMIT 500", values)
    return [dict(r) for r in rows]


def _shown(conn: sqlite3.Connection, session_id: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_SHOWN} FROM ui_sessions WHERE session_id = ?", (session_id,)).fetchone()
    if row is None:
        raise NotFound(f"No web view session {session_id!r}.", hint=_SESSIONS_HINT)
    return dict(row)
