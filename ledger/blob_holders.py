"""Which projects hold which blobs of the content store: knowing a digest is not a right to its content.

A project holds a blob once someone who may write to it uploaded the blob there, or the daemon stored it
for one of the project's records. Training on, evaluating, materialising and exporting a blob need the
project to hold it; the bytes a project holds count against its quota.
"""

from __future__ import annotations

import sqlite3

from bashgym.client.errors import PayloadTooLarge
from bashgym.ledger.tx import Tx


class QuotaExceeded(PayloadTooLarge):
    code = "quota_exceeded"


def hold_blob(
    tx: Tx,
    ws: str,
    project: str,
    sha256: str,
    size_bytes: int,
    *,
    quota_bytes: int | None,
    workspace_quota_bytes: int | None = None,
) -> bool:
    """Make `project` a holder of the blob; False when it already was. Refused past the project's quota."""
    if holds_blob(tx.conn, ws, project, sha256):
        return False
    if quota_bytes is not None:
        check_quota(
            tx.conn, ws, project, size_bytes, quota_bytes=quota_bytes, workspace_quota_bytes=workspace_quota_bytes
        )
    tx.conn.execute(
        "INSERT INTO blob_holders (workspace_id, project_id, sha256, size_bytes, created_by, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (ws, project, sha256, size_bytes, tx.actor.actor_id, tx.now),
    )
    tx.append_event(
        "blob.held",
        workspace_id=ws,
        project_id=project,
        payload={"entity": "blob", "entity_id": sha256, "size_bytes": size_bytes},
    )
    return True


def check_quota(
    conn: sqlite3.Connection,
    ws: str,
    project: str,
    size_bytes: int,
    *,
    quota_bytes: int,
    workspace_quota_bytes: int | None = None,
) -> None:
    """Raise QuotaExceeded unless `size_bytes` more fit in the project's quota and the workspace's (0: whether
    either is full). The workspace's bounds what many projects of one tenant could hold together."""
    if workspace_quota_bytes is not None:
        in_workspace = workspace_bytes(conn, ws)
        if in_workspace + size_bytes > workspace_quota_bytes or (
            size_bytes == 0 and in_workspace >= workspace_quota_bytes
        ):
            raise QuotaExceeded(
                f"Workspace {ws!r} holds {in_workspace:,} bytes of uploads; {size_bytes:,} more would pass its quota "
                f"of {workspace_quota_bytes:,} bytes.",
                hint="Ask the operator to raise BASHGYM_WORKSPACE_QUOTA_BYTES.",
                details={"held_bytes": in_workspace, "quota_bytes": workspace_quota_bytes},
            )
    held = held_bytes(conn, ws, project)
    if _over(held, size_bytes, quota_bytes):
        raise QuotaExceeded(
            f"Project {project!r} holds {held:,} bytes of uploads; this {size_bytes:,}-byte file would pass its "
            f"quota of {quota_bytes:,} bytes."
            if size_bytes
            else f"Project {project!r} holds {held:,} bytes of uploads, its whole quota of {quota_bytes:,} bytes.",
            hint="Ask the operator to raise BASHGYM_PROJECT_QUOTA_BYTES, or upload to another project.",
            details={"held_bytes": held, "quota_bytes": quota_bytes},
        )


def _over(held: int, size_bytes: int, quota_bytes: int) -> bool:
    """Whether `size_bytes` more pass the quota; with 0, whether it is already used up."""
    return held + size_bytes > quota_bytes if size_bytes else held >= quota_bytes


def workspace_bytes(conn: sqlite3.Connection, ws: str) -> int:
    row = conn.execute("SELECT COALESCE(SUM(size_bytes), 0) FROM blob_holders WHERE workspace_id = ?", (ws,)).fetchone()
    return int(row[0])


def holds_blob(conn: sqlite3.Connection, ws: str, project: str, sha256: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM blob_holders WHERE workspace_id = ? AND project_id = ? AND sha256 = ?", (ws, project, sha256)
    ).fetchone()
    return row is not None


def held_bytes(conn: sqlite3.Connection, ws: str, project: str) -> int:
    row = conn.execute(
        "SELECT COALESCE(SUM(size_bytes), 0) FROM blob_holders WHERE workspace_id = ? AND project_id = ?", (ws, project)
    ).fetchone()
    return int(row[0])
