"""The device registry: SSH hosts a workspace may train on, each with its last preflight verdict."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.client.errors import Conflict, NotFound
from bashgym.client.specs import DeviceSpec, PreflightVerdict
from bashgym.client.validation import canonical_json
from bashgym.ledger.access import WORKSPACE_SCOPE
from bashgym.ledger.clusters import clusters_through_device
from bashgym.ledger.device_groups import groups_with_member, store_verdict
from bashgym.ledger.tx import Tx


def add_device(tx: Tx, ws: str, spec: DeviceSpec) -> tuple[dict[str, Any], bool]:
    """Register a device; the same spec again is a replay, a different one under the same id a conflict."""
    spec_json = canonical_json(spec.model_dump(mode="json"))
    existing = tx.conn.execute(
        "SELECT spec_json FROM devices WHERE workspace_id = ? AND device_id = ?", (ws, spec.device_id)
    ).fetchone()
    if existing is not None:
        if existing["spec_json"] == spec_json:
            return get_device(tx.conn, ws, spec.device_id), True
        raise Conflict(
            f"Device {spec.device_id!r} is already registered with other settings.",
            hint=f"Remove it first (bashgym device remove {spec.device_id}) or pick another name.",
        )
    tx.conn.execute(
        "INSERT INTO devices (workspace_id, device_id, host, port, username, key_path, work_dir, python, gpus, "
        "slots, host_key, known_hosts, spec_json, created_by, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            ws,
            spec.device_id,
            spec.host,
            spec.port,
            spec.user,
            spec.key_path,
            spec.work_dir,
            spec.python,
            spec.gpus,
            spec.slots,
            spec.host_key,
            spec.known_hosts,
            spec_json,
            tx.actor.actor_id,
            tx.now,
        ),
    )
    tx.append_event(
        "device.registered",
        workspace_id=ws,
        project_id=WORKSPACE_SCOPE,
        payload={"entity": "device", "entity_id": spec.device_id, "host": spec.host, "port": spec.port},
    )
    return get_device(tx.conn, ws, spec.device_id), False


def remove_device(tx: Tx, ws: str, device_id: str) -> tuple[dict[str, Any], bool]:
    record = get_device(tx.conn, ws, device_id)
    if groups := groups_with_member(tx.conn, ws, device_id):
        raise Conflict(
            f"Device {device_id} is a member of device group {', '.join(groups)}.",
            hint=f"Remove the group first (bashgym device group remove {groups[0]}), then the device.",
        )
    if clusters := clusters_through_device(tx.conn, ws, device_id):
        raise Conflict(
            f"Device {device_id} is the login node of cluster {', '.join(clusters)}.",
            hint=f"Remove the cluster first (bashgym cluster remove {clusters[0]}), then the device.",
        )
    tx.conn.execute("DELETE FROM devices WHERE workspace_id = ? AND device_id = ?", (ws, device_id))
    tx.append_event(
        "device.removed",
        workspace_id=ws,
        project_id=WORKSPACE_SCOPE,
        payload={"entity": "device", "entity_id": device_id},
    )
    return record, False


def record_preflight(tx: Tx, ws: str, device_id: str, verdict: PreflightVerdict) -> tuple[dict[str, Any], bool]:
    get_device(tx.conn, ws, device_id)
    store_verdict(tx, "devices", "device_id", ws, device_id, verdict)
    return get_device(tx.conn, ws, device_id), False


def get_device(conn: sqlite3.Connection, ws: str, device_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM devices WHERE workspace_id = ? AND device_id = ?", (ws, device_id)).fetchone()
    if row is None:
        raise NotFound(
            f"No device {device_id!r} in workspace {ws!r}.",
            hint="See registered devices with bashgym device list; add one with bashgym device add.",
        )
    return _record(row)


def list_devices(conn: sqlite3.Connection, ws: str) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM devices WHERE workspace_id = ? ORDER BY device_id", (ws,)).fetchall()
    return [_record(row) for row in rows]


def _record(row: sqlite3.Row) -> dict[str, Any]:
    return {
        **json.loads(row["spec_json"]),
        "workspace_id": row["workspace_id"],
        "preflight": json.loads(row["preflight_json"]) if row["preflight_json"] else None,
        "preflight_at": row["preflight_at"],
        "ready": bool(row["ready"]),
        "created_by": row["created_by"],
        "created_at": row["created_at"],
    }
