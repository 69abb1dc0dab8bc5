"""Tags and a note on a run, a model version or a campaign (migration 0017): set and unset, read, and searched.

Every run's tags are read from `entity_tags`, whoever set them: the tags routes (`ledger.annotate`), a tracked
run's `bashgym.track` calls and an MLflow import write the same rows, each change with its event (`tags.set`,
`tags.unset`, `note.set`), which keeps the history. `tag_clause` is the one way a query filters by tag (the run
list's `tag=` and `--filter "tags.X = 'v'"` alike).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.redaction import redact_text
from bashgym.client.tags import MAX_TAGS, EntityKind, check_tag_key
from bashgym.ledger.rows import require_project
from bashgym.ledger.tx import Tx

# Each kind's table and id column (names from code, never from callers), and where a user sees the existing ones.
_ENTITIES: dict[str, tuple[str, str, str, str]] = {
    "run": ("runs", "run_id", "run", "bashgym run list --project {p}"),
    "model_version": ("model_versions", "model_version_id", "model version", "bashgym model list --project {p}"),
    "campaign": ("campaigns", "campaign_id", "campaign", "bashgym campaign list --project {p}"),
}


def require_entity(conn: sqlite3.Connection, ws: str, project: str, kind: EntityKind, entity_id: str) -> None:
    """Raise the same NotFound for a missing entity and for one in another project or workspace."""
    require_project(conn, ws, project)
    table, column, noun, listing = _ENTITIES[kind]
    found = conn.execute(
        f"SELECT 1 FROM {table} WHERE workspace_id = ? AND project_id = ? AND {column} = ?", (ws, project, entity_id)
    ).fetchone()
    if found is None:
        raise NotFound(
            f"No {noun} {entity_id!r} in project {project!r}.",
            hint=f"See existing ones with {listing.format(p=project)}.",
        )


def tags_of(conn: sqlite3.Connection, ws: str, project: str, kind: EntityKind, entity_id: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT key, value FROM entity_tags WHERE workspace_id = ? AND project_id = ? AND entity_kind = ? "
        "AND entity_id = ? ORDER BY key",
        (ws, project, kind, entity_id),
    ).fetchall()
    return {str(row[0]): str(row[1]) for row in rows}


def note_of(conn: sqlite3.Connection, ws: str, project: str, kind: EntityKind, entity_id: str) -> dict[str, str] | None:
    """The note as it stands, with who wrote it and when; None when there is none."""
    row = conn.execute(
        "SELECT text, set_by, set_at FROM entity_notes WHERE workspace_id = ? AND project_id = ? "
        "AND entity_kind = ? AND entity_id = ?",
        (ws, project, kind, entity_id),
    ).fetchone()
    return {"text": row[0], "set_by": row[1], "set_at": row[2]} if row is not None else None


def labels_of(conn: sqlite3.Connection, ws: str, project: str, kind: EntityKind, entity_id: str) -> dict[str, Any]:
    """`{"tags": {...}, "note": {...} | None}`, as each show route and page adds them to its record."""
    return {"tags": tags_of(conn, ws, project, kind, entity_id), "note": note_of(conn, ws, project, kind, entity_id)}


def tags_of_many(
    conn: sqlite3.Connection, ws: str, project: str, kind: EntityKind, entity_ids: list[str]
) -> dict[str, dict[str, str]]:
    """Each listed entity's tags (those with none are absent), in one query: a list's rows carry their tags."""
    found: dict[str, dict[str, str]] = {}
    for start in range(0, len(entity_ids), 500):
        chunk = entity_ids[start : start + 500]
        rows = conn.execute(
            "SELECT entity_id, key, value FROM entity_tags WHERE workspace_id = ? AND project_id = ? "
            f"AND entity_kind = ? AND entity_id IN ({', '.join('?' * len(chunk))}) ORDER BY key",
            (ws, project, kind, *chunk),
        ).fetchall()
        for row in rows:
            found.setdefault(str(row[0]), {})[str(row[1])] = str(row[2])
    return found


def tag_clause(kind: EntityKind, key: str, value: str | None) -> tuple[str, list[str]]:
    """A WHERE condition (and its arguments) true for the rows of the kind's table (`runs`, `model_versions`,
    `campaigns`, which the query must select from by that name) that carry tag `key`, with exactly `value` if one
    is given. For another helper's grammar, `tags.team = 'nlp'` reads as `tag_clause("run", "team", "nlp")`."""
    check_tag_key(key)
    table, column, _, _ = _ENTITIES[kind]
    condition = (
        f"EXISTS (SELECT 1 FROM entity_tags t WHERE t.workspace_id = {table}.workspace_id "
        f"AND t.project_id = {table}.project_id AND t.entity_kind = ? AND t.entity_id = {table}.{column} AND t.key = ?"
    )
    if value is None:
        return condition + ")", [kind, key]
    return condition + " AND t.value = ?)", [kind, key, value]


def tag_filter(kind: EntityKind, tags: list[tuple[str, str | None]]) -> tuple[list[str], list[str]]:
    """Conditions (all must hold) and their arguments for a list's `tag=` filters."""
    clauses: list[str] = []
    args: list[str] = []
    for key, value in tags:
        clause, more = tag_clause(kind, key, value)
        clauses.append(clause)
        args.extend(more)
    return clauses, args


def tagged(
    conn: sqlite3.Connection,
    ws: str,
    project: str,
    kind: EntityKind,
    tags: list[tuple[str, str | None]] | None,
    *,
    order: str,
    limit: int | None = None,
) -> list[sqlite3.Row]:
    """The project's rows of the kind's table carrying every one of `tags`, in `order` (SQL named by code)."""
    table = _ENTITIES[kind][0]
    clauses, args = tag_filter(kind, tags or [])
    where = " AND ".join(["workspace_id = ?", "project_id = ?", *clauses])
    bounded = " LIMIT ?" if limit is not None else ""
    rows: list[sqlite3.Row] = conn.execute(
        f"SELECT * FROM {table} WHERE {where} ORDER BY {order}{bounded}",
        (ws, project, *args, *([limit] if limit is not None else [])),
    ).fetchall()
    return rows


def with_tags(
    conn: sqlite3.Connection, ws: str, project: str, kind: EntityKind, records: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each listed record with its `tags` (an empty mapping for none), read in one query."""
    column = _ENTITIES[kind][1]
    held = tags_of_many(conn, ws, project, kind, [str(r[column]) for r in records])
    return [{**r, "tags": held.get(str(r[column]), {})} for r in records]


def write_tags(tx: Tx, ws: str, project: str, kind: EntityKind, entity_id: str, tags: dict[str, str]) -> bool:
    """Set `tags` (already validated) on the entity, with a `tags.set` event of the keys whose value changed;
    False when every one already stood so (nothing written)."""
    require_entity(tx.conn, ws, project, kind, entity_id)
    held = tags_of(tx.conn, ws, project, kind, entity_id)
    changed = {key: redact_text(value) for key, value in tags.items() if held.get(key) != redact_text(value)}
    if not changed:
        return False
    if len(held.keys() | changed.keys()) > MAX_TAGS:
        raise InvalidInput(
            f"{kind.replace('_', ' ').capitalize()} {entity_id} holds {len(held)} tags; {len(changed)} more "
            f"would pass the limit of {MAX_TAGS}. Nothing was changed.",
            hint="Remove tags no longer needed (untag), or keep longer text in the note.",
            details={"held": len(held), "limit": MAX_TAGS},
        )
    tx.conn.executemany(
        "INSERT INTO entity_tags (workspace_id, project_id, entity_kind, entity_id, key, value, set_by, set_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, project_id, entity_kind, entity_id, key) "
        "DO UPDATE SET value = excluded.value, set_by = excluded.set_by, set_at = excluded.set_at",
        [(ws, project, kind, entity_id, key, value, tx.actor.actor_id, tx.now) for key, value in changed.items()],
    )
    _append(tx, "tags.set", ws, project, kind, entity_id, {"tags": changed})
    return True


def set_tags(
    tx: Tx, ws: str, project: str, kind: EntityKind, entity_id: str, tags: dict[str, str]
) -> tuple[dict[str, Any], bool]:
    is_changed = write_tags(tx, ws, project, kind, entity_id, tags)
    return _labels(tx, ws, project, kind, entity_id), not is_changed


def unset_tags(
    tx: Tx, ws: str, project: str, kind: EntityKind, entity_id: str, keys: list[str]
) -> tuple[dict[str, Any], bool]:
    """Remove the tags named (a key not set is no error: the answer says which were removed)."""
    require_entity(tx.conn, ws, project, kind, entity_id)
    held = tags_of(tx.conn, ws, project, kind, entity_id)
    removed = sorted({check_tag_key(key) for key in keys} & held.keys())
    if removed:
        tx.conn.executemany(
            "DELETE FROM entity_tags WHERE workspace_id = ? AND project_id = ? AND entity_kind = ? "
            "AND entity_id = ? AND key = ?",
            [(ws, project, kind, entity_id, key) for key in removed],
        )
        _append(tx, "tags.unset", ws, project, kind, entity_id, {"keys": removed})
    return {**_labels(tx, ws, project, kind, entity_id), "removed": removed}, not removed


def set_note(tx: Tx, ws: str, project: str, kind: EntityKind, entity_id: str, text: str) -> tuple[dict[str, Any], bool]:
    """Replace the entity's note (an empty text removes it); the earlier texts stay in the `note.set` events."""
    require_entity(tx.conn, ws, project, kind, entity_id)
    text = redact_text(text.strip())
    held = note_of(tx.conn, ws, project, kind, entity_id)
    if (held["text"] if held else "") == text:
        return _labels(tx, ws, project, kind, entity_id), True
    where = (ws, project, kind, entity_id)
    if text:
        tx.conn.execute(
            "INSERT INTO entity_notes (workspace_id, project_id, entity_kind, entity_id, text, set_by, set_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, project_id, entity_kind, entity_id) "
            "DO UPDATE SET text = excluded.text, set_by = excluded.set_by, set_at = excluded.set_at",
            (*where, text, tx.actor.actor_id, tx.now),
        )
    else:
        tx.conn.execute(
            "DELETE FROM entity_notes WHERE workspace_id = ? AND project_id = ? AND entity_kind = ? AND entity_id = ?",
            where,
        )
    _append(tx, "note.set", ws, project, kind, entity_id, {"text": text})
    return _labels(tx, ws, project, kind, entity_id), False


def _labels(tx: Tx, ws: str, project: str, kind: EntityKind, entity_id: str) -> dict[str, Any]:
    return {"entity_kind": kind, "entity_id": entity_id, **labels_of(tx.conn, ws, project, kind, entity_id)}


def _append(
    tx: Tx, event_type: str, ws: str, project: str, kind: EntityKind, entity_id: str, payload: dict[str, Any]
) -> None:
    tx.append_event(
        event_type,
        workspace_id=ws,
        project_id=project,
        run_id=entity_id if kind == "run" else None,
        payload={"entity_kind": kind, "entity_id": entity_id, **payload},
    )
