"""Device groups: named, ordered sets of registered devices that train one run together, each with its last
group preflight verdict."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.client.errors import Conflict, InvalidInput, NotFound
from bashgym.client.specs import DeviceGroupSpec, PreflightVerdict
from bashgym.client.validation import canonical_json
from bashgym.ledger.access import WORKSPACE_SCOPE
from bashgym.ledger.tx import Tx


def add_device_group(tx: Tx, ws: str, spec: DeviceGroupSpec) -> tuple[dict[str, Any], bool]:
    """Register a group; the same spec again is a replay, a different one under the same id a conflict."""
    spec = _resolved(tx.conn, ws, spec)
    spec_json = canonical_json(spec.model_dump(mode="json"))
    existing = tx.conn.execute(
        "SELECT spec_json FROM device_groups WHERE workspace_id = ? AND group_id = ?", (ws, spec.group_id)
    ).fetchone()
    if existing is not None:
        if existing["spec_json"] == spec_json:
            return get_device_group(tx.conn, ws, spec.group_id), True
        raise Conflict(
            f"Device group {spec.group_id!r} is already registered with other settings.",
            hint=f"Remove it first (bashgym device group remove {spec.group_id}) or pick another name.",
        )
    tx.conn.execute(
        "INSERT INTO device_groups (workspace_id, group_id, spec_json, created_by, created_at) VALUES (?, ?, ?, ?, ?)",
        (ws, spec.group_id, spec_json, tx.actor.actor_id, tx.now),
    )
    tx.append_event(
        "device_group.registered",
        workspace_id=ws,
        project_id=WORKSPACE_SCOPE,
        payload={
            "entity": "device_group",
            "entity_id": spec.group_id,
            "members": spec.members,
            "main_process_ip": spec.main_process_ip,
            "main_process_port": spec.main_process_port,
        },
    )
    return get_device_group(tx.conn, ws, spec.group_id), False


def _resolved(conn: sqlite3.Connection, ws: str, spec: DeviceGroupSpec) -> DeviceGroupSpec:
    """Check every member is registered, and fill in the main address so the stored spec is explicit."""
    marks = ", ".join("?" * len(spec.members))
    hosts = dict(
        conn.execute(
            f"SELECT device_id, host FROM devices WHERE workspace_id = ? AND device_id IN ({marks})",
            (ws, *spec.members),
        ).fetchall()
    )
    missing = [member for member in spec.members if member not in hosts]
    if missing:
        names = ", ".join(repr(m) for m in missing)
        verb = "is not a registered device" if len(missing) == 1 else "are not registered devices"
        raise InvalidInput(
            f"Device group {spec.group_id!r}: {names} {verb} in workspace {ws!r}.",
            hint=f"Register it first (bashgym device add {missing[0]} --host ...), or see registered ones "
            "with bashgym device list.",
        )
    if spec.main_process_ip is None:
        return spec.model_copy(update={"main_process_ip": hosts[spec.members[0]]})
    return spec


def remove_device_group(tx: Tx, ws: str, group_id: str) -> tuple[dict[str, Any], bool]:
    record = get_device_group(tx.conn, ws, group_id)
    tx.conn.execute("DELETE FROM device_groups WHERE workspace_id = ? AND group_id = ?", (ws, group_id))
    tx.append_event(
        "device_group.removed",
        workspace_id=ws,
        project_id=WORKSPACE_SCOPE,
        payload={"entity": "device_group", "entity_id": group_id},
    )
    return record, False


def record_group_preflight(tx: Tx, ws: str, group_id: str, verdict: PreflightVerdict) -> tuple[dict[str, Any], bool]:
    get_device_group(tx.conn, ws, group_id)
    store_verdict(tx, "device_groups", "group_id", ws, group_id, verdict)
    return get_device_group(tx.conn, ws, group_id), False


def store_verdict(tx: Tx, table: str, key_column: str, ws: str, key: str, verdict: PreflightVerdict) -> None:
    """Keep a device's or a device group's last preflight verdict on its row, and record it as an event
    (`device.preflight`, `device_group.preflight`). `table` and `key_column` are the callers' constants."""
    tx.conn.execute(
        f"UPDATE {table} SET preflight_json = ?, preflight_at = ?, ready = ? "
        f"WHERE workspace_id = ? AND {key_column} = ?",
        (canonical_json(verdict.model_dump(mode="json")), tx.now, int(verdict.ready), ws, key),
    )
    tx.append_event(
        f"{table.removesuffix('s')}.preflight",
        workspace_id=ws,
        project_id=WORKSPACE_SCOPE,
        payload={key_column: key, "ready": verdict.ready, "reasons": verdict.reasons},
    )


def get_device_group(conn: sqlite3.Connection, ws: str, group_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM device_groups WHERE workspace_id = ? AND group_id = ?", (ws, group_id)).fetchone()
    if row is None:
        raise NotFound(
            f"No device group {group_id!r} in workspace {ws!r}.",
            hint="See registered groups with bashgym device group list; create one with bashgym device group create.",
        )
    return _record(row)


def list_device_groups(conn: sqlite3.Connection, ws: str) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM device_groups WHERE workspace_id = ? ORDER BY group_id", (ws,)).fetchall()
    return [_record(row) for row in rows]


def groups_with_member(conn: sqlite3.Connection, ws: str, device_id: str) -> list[str]:
    """The groups a device belongs to, by id."""
    rows = conn.execute(
        "SELECT DISTINCT g.group_id FROM device_groups AS g, json_each(g.spec_json, '$.members') AS m "
        "WHERE g.workspace_id = ? AND m.value = ? ORDER BY g.group_id",
        (ws, device_id),
    ).fetchall()
    return [str(row[0]) for row in rows]


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
