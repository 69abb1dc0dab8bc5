"""The cluster registry: Slurm clusters a workspace may submit runs to, on the daemon's host or through a login
node that is a registered SSH device."""

from __future__ import annotations

import sqlite3
from typing import Any

from bashgym.client.errors import Conflict, InvalidInput, NotFound
from bashgym.client.specs import ClusterSpec
from bashgym.ledger.access import WORKSPACE_SCOPE
from bashgym.ledger.tx import Tx

SPEC_FIELDS = tuple(ClusterSpec.model_fields)


def add_cluster(tx: Tx, ws: str, spec: ClusterSpec) -> tuple[dict[str, Any], bool]:
    """Register a cluster; the same spec again is a replay, a different one under the same id a conflict."""
    values = spec.model_dump(mode="json")
    existing = tx.conn.execute(
        "SELECT * FROM clusters WHERE workspace_id = ? AND cluster_id = ?", (ws, spec.cluster_id)
    ).fetchone()
    if existing is not None:
        if {name: existing[name] for name in SPEC_FIELDS} == values:
            return _record(existing), True
        raise Conflict(
            f"Cluster {spec.cluster_id!r} is already registered with other settings.",
            hint=f"Remove it first (bashgym cluster remove {spec.cluster_id}) or pick another name.",
        )
    if spec.login_device_id is not None and _device_missing(tx.conn, ws, spec.login_device_id):
        raise InvalidInput(
            f"Cluster {spec.cluster_id!r}: login device {spec.login_device_id!r} is not a registered device in "
            f"workspace {ws!r}.",
            hint=f"Register the login node first (bashgym device add {spec.login_device_id} --host ...), or see "
            "registered ones with bashgym device list.",
        )
    columns = [*SPEC_FIELDS, "workspace_id", "created_by", "created_at"]
    row = [*(values[name] for name in SPEC_FIELDS), ws, tx.actor.actor_id, tx.now]
    # Column names are this module's constants (the spec's fields), never input.
    tx.conn.execute(f"INSERT INTO clusters ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", row)
    tx.append_event(
        "cluster.registered",
        workspace_id=ws,
        project_id=WORKSPACE_SCOPE,
        payload={"entity": "cluster", "entity_id": spec.cluster_id, "kind": spec.kind, "access": spec.access},
    )
    return get_cluster(tx.conn, ws, spec.cluster_id), False


def remove_cluster(tx: Tx, ws: str, cluster_id: str) -> tuple[dict[str, Any], bool]:
    record = get_cluster(tx.conn, ws, cluster_id)
    tx.conn.execute("DELETE FROM clusters WHERE workspace_id = ? AND cluster_id = ?", (ws, cluster_id))
    payload = {"entity": "cluster", "entity_id": cluster_id}
    tx.append_event("cluster.removed", workspace_id=ws, project_id=WORKSPACE_SCOPE, payload=payload)
    return record, False


def get_cluster(conn: sqlite3.Connection, ws: str, cluster_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM clusters WHERE workspace_id = ? AND cluster_id = ?", (ws, cluster_id)).fetchone()
    if row is None:
        raise NotFound(
            f"No cluster {cluster_id!r} in workspace {ws!r}.",
            hint="See registered clusters with bashgym cluster list; register one with bashgym cluster add.",
        )
    return _record(row)


def list_clusters(conn: sqlite3.Connection, ws: str) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM clusters WHERE workspace_id = ? ORDER BY cluster_id", (ws,)).fetchall()
    return [_record(row) for row in rows]


def clusters_through_device(conn: sqlite3.Connection, ws: str, device_id: str) -> list[str]:
    """The clusters whose login node is this device, by id."""
    rows = conn.execute(
        "SELECT cluster_id FROM clusters WHERE workspace_id = ? AND login_device_id = ? ORDER BY cluster_id",
        (ws, device_id),
    ).fetchall()
    return [str(row[0]) for row in rows]


def _device_missing(conn: sqlite3.Connection, ws: str, device_id: str) -> bool:
    found = conn.execute("SELECT 1 FROM devices WHERE workspace_id = ? AND device_id = ?", (ws, device_id)).fetchone()
    return found is None


def _record(row: sqlite3.Row) -> dict[str, Any]:
    return {name: row[name] for name in (*SPEC_FIELDS, "workspace_id", "created_by", "created_at")}
