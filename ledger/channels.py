"""Notification routing: the Discord channel each project's notices are posted to."""

from __future__ import annotations

import sqlite3
from typing import Any

from bashgym.ledger.rows import require_project
from bashgym.ledger.tx import Tx


def set_channel(tx: Tx, ws: str, project: str, *, channel_id: str, guild_id: str) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    current = get_channel(tx.conn, ws, project)
    if current is not None and (current["channel_id"], current["guild_id"]) == (channel_id, guild_id):
        return current, True
    tx.conn.execute(
        "INSERT INTO project_channels (workspace_id, project_id, channel_id, guild_id, set_by, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, project_id) DO UPDATE SET "
        "channel_id = excluded.channel_id, guild_id = excluded.guild_id, set_by = excluded.set_by, "
        "updated_at = excluded.updated_at",
        (ws, project, channel_id, guild_id, tx.actor.actor_id, tx.now),
    )
    tx.append_event(
        "project.channel_set",
        workspace_id=ws,
        project_id=project,
        payload={"entity": "project_channel", "entity_id": project, "channel_id": channel_id},
    )
    record = get_channel(tx.conn, ws, project)
    assert record is not None
    return record, False


def get_channel(conn: sqlite3.Connection, ws: str, project: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT project_id, channel_id, guild_id, set_by, updated_at FROM project_channels "
        "WHERE workspace_id = ? AND project_id = ?",
        (ws, project),
    ).fetchone()
    return dict(row) if row else None


def channel_map(conn: sqlite3.Connection, ws: str) -> dict[str, str]:
    rows = conn.execute("SELECT project_id, channel_id FROM project_channels WHERE workspace_id = ?", (ws,))
    return {str(project): str(channel) for project, channel in rows}
