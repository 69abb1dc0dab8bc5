"""Turn stored rows into API records: JSON columns parsed, internal columns dropped."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.client.errors import Conflict, NotFound

_INTERNAL = {"identity_json"}
_BOOLEAN = {"is_simulation", "is_protected"}


def to_record(row: sqlite3.Row | dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for name, value in dict(row).items():
        if name in _INTERNAL:
            continue
        if name.endswith("_json"):
            record[name[: -len("_json")]] = json.loads(value)
        elif name in _BOOLEAN:
            record[name] = bool(value)
        else:
            record[name] = value
    return record


def require_project(conn: sqlite3.Connection, workspace_id: str, project_id: str) -> None:
    """Raise the same NotFound for a missing project and for one in another workspace."""
    row = conn.execute(
        "SELECT 1 FROM projects WHERE workspace_id = ? AND project_id = ?", (workspace_id, project_id)
    ).fetchone()
    if row is None:
        raise NotFound(
            f"No project {project_id!r} in workspace {workspace_id!r}.",
            hint="See existing ones with bashgym project list, or create it with bashgym project create.",
        )


def not_found(kind: str, entity_id: str, project_id: str, list_hint: str) -> NotFound:
    return NotFound(f"No {kind} {entity_id!r} in project {project_id!r}.", hint=f"See existing ones with {list_hint}.")


def check_id_unused(
    conn: sqlite3.Connection, table: str, column: str, value: str, ws: str, project: str, *, label: str
) -> None:
    """Run and report ids name directories and live supervisors by id alone: one id, one record, ledger-wide.

    The answer does not say where the id is taken: another workspace's ids are not the caller's to learn."""
    taken = conn.execute(
        f"SELECT 1 FROM {table} WHERE {column} = ? AND NOT (workspace_id = ? AND project_id = ?) LIMIT 1",
        (value, ws, project),
    ).fetchone()
    if taken is not None:
        raise Conflict(
            f"{label} id {value!r} is already taken; {label.lower()} ids are unique across the ledger.",
            hint=f"Leave the id out and one is made for you, or choose another {label.lower()} id.",
        )
