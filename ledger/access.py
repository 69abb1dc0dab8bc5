"""Stored API tokens (hashes only), Discord grants, idempotency records and the audit trail."""

from __future__ import annotations

import json
import sqlite3
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from bashgym.client.errors import NotFound
from bashgym.client.validation import canonical_json
from bashgym.ledger.tx import Tx

WORKSPACE_SCOPE = ""  # project_id of events that belong to a workspace, not to one project
_TOKENS_HINT = "See existing ones with bashgym auth list."


def insert_token(
    tx: Tx,
    *,
    token_id: str,
    token_hash: str,
    actor_id: str,
    profile: str,
    capabilities: list[str],
    workspace_id: str | None,
    project_id: str | None,
    expires_at: str | None,
) -> dict[str, Any]:
    tx.conn.execute(
        "INSERT INTO api_tokens (token_id, token_hash, actor_id, profile, capabilities_json, workspace_id, "
        "project_id, expires_at, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            token_id,
            token_hash,
            actor_id,
            profile,
            canonical_json(sorted(capabilities)),
            workspace_id,
            project_id,
            expires_at,
            tx.actor.actor_id,
            tx.now,
        ),
    )
    tx.append_event(
        "auth.token_issued",
        workspace_id=workspace_id or "*",
        project_id=project_id or WORKSPACE_SCOPE,
        payload={
            "entity": "api_token",
            "entity_id": token_id,
            "actor_id": actor_id,
            "profile": profile,
            "capabilities": sorted(capabilities),
        },
    )
    return token_record(_token_row(tx.conn, token_id))


def revoke_token(tx: Tx, token_id: str, workspace_id: str | None) -> tuple[dict[str, Any], bool]:
    """Revoke a token; one of another workspace than `workspace_id` (None: any) is not found."""
    get_token(tx.conn, token_id, workspace_id)
    row = _token_row(tx.conn, token_id)
    if row["revoked_at"]:
        return token_record(row), True
    tx.conn.execute(
        "UPDATE api_tokens SET revoked_at = ?, revoked_by = ? WHERE token_id = ?", (tx.now, tx.actor.actor_id, token_id)
    )
    tx.append_event(
        "auth.token_revoked",
        workspace_id=row["workspace_id"] or "*",
        project_id=row["project_id"] or WORKSPACE_SCOPE,
        payload={"entity": "api_token", "entity_id": token_id, "actor_id": row["actor_id"]},
    )
    return token_record(_token_row(tx.conn, token_id)), False


def _token_row(conn: sqlite3.Connection, token_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM api_tokens WHERE token_id = ?", (token_id,)).fetchone()
    if row is None:
        raise NotFound(f"No token {token_id!r}.", hint=_TOKENS_HINT)
    return dict(row)


def token_record(row: dict[str, Any]) -> dict[str, Any]:
    """A token as it may be shown: never its hash."""
    record = {k: v for k, v in row.items() if k != "token_hash"}
    record["capabilities"] = json.loads(record.pop("capabilities_json"))
    return record


def list_tokens(conn: sqlite3.Connection, workspace_id: str | None = None) -> list[dict[str, Any]]:
    """Every token, or (`workspace_id`) the tokens of one workspace: never those of every workspace."""
    if workspace_id is None:
        rows = conn.execute("SELECT * FROM api_tokens ORDER BY created_at")
    else:
        rows = conn.execute("SELECT * FROM api_tokens WHERE workspace_id = ? ORDER BY created_at", (workspace_id,))
    return [token_record(dict(r)) for r in rows]


def get_token(conn: sqlite3.Connection, token_id: str, workspace_id: str | None) -> dict[str, Any]:
    """A token's record; NotFound for a token of another workspace than `workspace_id` (None: any)."""
    row = _token_row(conn, token_id)
    if workspace_id is not None and row["workspace_id"] != workspace_id:
        raise NotFound(f"No token {token_id!r} in workspace {workspace_id!r}.", hint=_TOKENS_HINT)
    return token_record(row)


def bind_project_tokens(tx: Tx, workspace_id: str) -> int:
    """Bind the project tokens issued without a workspace (before a project named a project of one workspace) to
    `workspace_id`, the daemon's default, where they were meant; each binding is an event. Returns how many."""
    rows = tx.conn.execute(
        "SELECT token_id, actor_id, project_id FROM api_tokens WHERE project_id IS NOT NULL AND workspace_id IS NULL"
    ).fetchall()
    for row in rows:
        tx.conn.execute("UPDATE api_tokens SET workspace_id = ? WHERE token_id = ?", (workspace_id, row["token_id"]))
        tx.append_event(
            "auth.token_bound",
            workspace_id=workspace_id,
            project_id=row["project_id"],
            payload={"entity": "api_token", "entity_id": row["token_id"], "actor_id": row["actor_id"]},
        )
    return len(rows)


def find_token(conn: sqlite3.Connection, token_hash: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT * FROM api_tokens WHERE token_hash = ?", (token_hash,)).fetchone()
    return dict(row) if row else None


def tokens_of_actor(conn: sqlite3.Connection, workspace_id: str, actor_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM api_tokens WHERE (workspace_id = ? OR workspace_id IS NULL) AND actor_id = ? "
        "AND revoked_at IS NULL ORDER BY created_at",
        (workspace_id, actor_id),
    )
    return [token_record(dict(r)) for r in rows]


def count_tokens(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM api_tokens").fetchone()[0])


def insert_grant(
    tx: Tx,
    *,
    grant_id: str,
    workspace_id: str,
    project_id: str | None,
    subject_kind: str,
    subject_id: str,
    profile: str,
    capabilities: list[str],
) -> dict[str, Any]:
    tx.conn.execute(
        "INSERT INTO discord_grants (grant_id, workspace_id, project_id, subject_kind, subject_id, profile, "
        "capabilities_json, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            grant_id,
            workspace_id,
            project_id,
            subject_kind,
            subject_id,
            profile,
            canonical_json(sorted(capabilities)),
            tx.actor.actor_id,
            tx.now,
        ),
    )
    tx.append_event(
        "authority.granted",
        workspace_id=workspace_id,
        project_id=project_id or WORKSPACE_SCOPE,
        payload={
            "entity": "discord_grant",
            "entity_id": grant_id,
            "subject_kind": subject_kind,
            "subject_id": subject_id,
            "profile": profile,
            "capabilities": sorted(capabilities),
        },
    )
    return grant_record(_grant_row(tx.conn, grant_id))


def revoke_grant(tx: Tx, grant_id: str, workspace_id: str) -> tuple[dict[str, Any], bool]:
    row = _grant_row(tx.conn, grant_id)
    if row["workspace_id"] != workspace_id:
        raise NotFound(
            f"No grant {grant_id!r} in workspace {workspace_id!r}.",
            hint="See existing ones with bashgym authority list.",
        )
    if row["revoked_at"]:
        return grant_record(row), True
    tx.conn.execute(
        "UPDATE discord_grants SET revoked_at = ?, revoked_by = ? WHERE grant_id = ?",
        (tx.now, tx.actor.actor_id, grant_id),
    )
    tx.append_event(
        "authority.revoked",
        workspace_id=row["workspace_id"],
        project_id=row["project_id"] or WORKSPACE_SCOPE,
        payload={"entity": "discord_grant", "entity_id": grant_id},
    )
    return grant_record(_grant_row(tx.conn, grant_id)), False


def _grant_row(conn: sqlite3.Connection, grant_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM discord_grants WHERE grant_id = ?", (grant_id,)).fetchone()
    if row is None:
        raise NotFound(f"No grant {grant_id!r}.", hint="See existing ones with bashgym authority list.")
    return dict(row)


def grant_record(row: dict[str, Any]) -> dict[str, Any]:
    record = dict(row)
    record["capabilities"] = json.loads(record.pop("capabilities_json"))
    return record


def list_grants(conn: sqlite3.Connection, workspace_id: str) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM discord_grants WHERE workspace_id = ? ORDER BY created_at", (workspace_id,))
    return [grant_record(dict(r)) for r in rows]


def active_grants(
    conn: sqlite3.Connection, workspace_id: str, user_id: str, role_ids: list[str]
) -> list[dict[str, Any]]:
    """The live grants that apply to this Discord user, directly or through one of their roles."""
    subjects = [("user", user_id), *(("role", role) for role in role_ids)]
    clause = " OR ".join("(subject_kind = ? AND subject_id = ?)" for _ in subjects)
    args = [value for subject in subjects for value in subject]
    rows = conn.execute(
        f"SELECT * FROM discord_grants WHERE workspace_id = ? AND revoked_at IS NULL AND ({clause})",
        (workspace_id, *args),
    )
    return [grant_record(dict(r)) for r in rows]


def audit_events(
    conn: sqlite3.Connection, *, since: str, actor: str | None, limit: int, workspace_id: str | None = None
) -> list[dict[str, Any]]:
    """Mutations (every event is one) since a time, newest last, optionally of one actor; of one workspace
    (`workspace_id`), or of every workspace and the daemon's own (None)."""
    clauses, args = ["created_at >= ?"], [since]
    if actor is not None:
        clauses.append("actor = ?")
        args.append(actor)
    if workspace_id is not None:
        clauses.append("workspace_id = ?")
        args.append(workspace_id)
    rows = conn.execute(
        "SELECT cursor, event_type, workspace_id, project_id, run_id, actor, credential_kind, capability, "
        f"correlation_id, created_at FROM events WHERE {' AND '.join(clauses)} ORDER BY cursor DESC LIMIT ?",
        (*args, limit),
    ).fetchall()
    return [dict(r) for r in reversed(rows)]


@dataclass
class IdempotencyClaim:
    """The request an Idempotency-Key names, while it is carried out.

    Its record is inserted inside the first transaction that writes for the request (status 0:
    carried out, answer not stored yet) and completed with the answer afterwards, so no crash can
    leave a committed write without its record and let a retry apply it a second time.
    """

    principal: str
    key: str
    method: str
    path: str
    request_digest: str
    is_recorded: bool = False
    is_closed: bool = False  # the answer has left; writes made later (background work) are not the request's


REQUEST_CLAIM: ContextVar[IdempotencyClaim | None] = ContextVar("bashgym_idempotency_claim", default=None)
UNANSWERED = 0  # status_code of a record whose request committed writes but whose answer was never stored


def find_idempotent(conn: sqlite3.Connection, principal: str, key: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT * FROM idempotency_keys WHERE principal = ? AND idempotency_key = ?", (principal, key)
    ).fetchone()
    return dict(row) if row else None


def record_claim(conn: sqlite3.Connection, claim: IdempotencyClaim, *, cursor: int, created_at: str) -> None:
    """Inside the write's own transaction: mark the request as carried out, answer still to come."""
    conn.execute(
        "INSERT INTO idempotency_keys (principal, idempotency_key, method, path, request_digest, status_code, "
        "response_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (
            claim.principal,
            claim.key,
            claim.method,
            claim.path,
            claim.request_digest,
            UNANSWERED,
            canonical_json({"cursor": cursor}),
            created_at,
        ),
    )


def store_idempotent(
    conn: sqlite3.Connection,
    *,
    principal: str,
    key: str,
    method: str,
    path: str,
    request_digest: str,
    status_code: int,
    response_json: str,
    created_at: str,
) -> None:
    """Store the answer: a new record, or the completion of the request's unanswered one."""
    conn.execute(
        "INSERT INTO idempotency_keys (principal, idempotency_key, method, path, request_digest, status_code, "
        "response_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (principal, idempotency_key) "
        f"DO UPDATE SET status_code = excluded.status_code, response_json = excluded.response_json "
        f"WHERE status_code = {UNANSWERED} AND request_digest = excluded.request_digest",
        (principal, key, method, path, request_digest, status_code, response_json, created_at),
    )
