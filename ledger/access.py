"""Stored API tokens (hashes only) and idempotency records of API responses."""

from __future__ import annotations

import sqlite3
from typing import Any

from bashgym.ledger.tx import Tx
from bashgym.ledger.validation import canonical_json


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
        project_id=project_id or "",
        payload={"entity": "api_token", "entity_id": token_id, "actor_id": actor_id, "profile": profile},
    )
    row = tx.fetch_one("api_tokens", {"token_id": token_id})
    assert row is not None
    return row


def find_token(conn: sqlite3.Connection, token_hash: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT * FROM api_tokens WHERE token_hash = ?", (token_hash,)).fetchone()
    return dict(row) if row else None


def count_tokens(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM api_tokens").fetchone()[0])


def find_idempotent(conn: sqlite3.Connection, principal: str, key: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT * FROM idempotency_keys WHERE principal = ? AND idempotency_key = ?", (principal, key)
    ).fetchone()
    return dict(row) if row else None


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
    conn.execute(
        "INSERT INTO idempotency_keys (principal, idempotency_key, method, path, request_digest, status_code, "
        "response_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (principal, key, method, path, request_digest, status_code, response_json, created_at),
    )
