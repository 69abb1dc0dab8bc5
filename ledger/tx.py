"""A write transaction on the writer connection: identity-checked puts and event appends."""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bashgym.client.errors import IdentityConflict
from bashgym.client.redaction import redact, redact_text
from bashgym.client.specs import Actor
from bashgym.client.validation import canonical_json, check_payload, differing_fields, identity_digest
from bashgym.ledger.events import event_hash, validate_payload

# Tables whose rows never change after insert, so a committed row may be cached by key.
IMMUTABLE_TABLES = frozenset(
    {"projects", "experiments", "model_versions", "dataset_versions", "environments", "eval_suites"}
)


@dataclass
class ChainHead:
    """The last event's cursor and hash, held by the single writer between transactions."""

    cursor: int
    hash: str


def new_id(prefix: str) -> str:
    """A time-ordered unique id such as `run-0192f3a1b2c4-9f2e1a7b`."""
    return f"{prefix}-{time.time_ns() // 1_000_000:012x}-{secrets.token_hex(4)}"


def utc_iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


class Tx:
    """One open write transaction; every mutation inside appends its event here."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        head: ChainHead,
        actor: Actor,
        clock: Callable[[], datetime],
        known_rows: dict[tuple[str, ...], dict[str, Any]] | None = None,
    ):
        self.conn = conn
        # Committed rows of immutable tables, by key: resending the same lineage with every launch
        # then costs a dict lookup instead of a SELECT. New rows join after the commit (see `learned`).
        self.known_rows = known_rows if known_rows is not None else {}
        self.learned: dict[tuple[str, ...], dict[str, Any]] = {}
        self.actor = actor
        self.head = ChainHead(head.cursor, head.hash)
        self.now = utc_iso(clock())
        self.last_cursor: int | None = None
        self.kinds: set[str] = set()  # the event types appended: what the commit changed, for the caches to know

    def append_event(
        self,
        event_type: str,
        *,
        workspace_id: str,
        project_id: str,
        payload: dict[str, Any],
        experiment_id: str | None = None,
        run_id: str | None = None,
        attempt_id: str | None = None,
    ) -> int:
        validate_payload(event_type, payload)
        fields: dict[str, Any] = {
            "cursor": self.head.cursor + 1,
            "event_id": new_id("evt"),
            "event_type": event_type,
            "workspace_id": workspace_id,
            "project_id": project_id,
            "experiment_id": experiment_id,
            "run_id": run_id,
            "attempt_id": attempt_id,
            "actor": self.actor.actor_id,
            "credential_kind": self.actor.credential_kind,
            "capability": self.actor.capability,
            "correlation_id": self.actor.correlation_id,
            "payload_json": check_payload(redact(payload), field=f"{event_type} payload"),
            "created_at": self.now,
            "prev_hash": self.head.hash,
        }
        fields["hash"] = event_hash(fields)
        columns = ", ".join(fields)
        self.conn.execute(
            f"INSERT INTO events ({columns}) VALUES ({', '.join('?' * len(fields))})", tuple(fields.values())
        )
        self.head = ChainHead(fields["cursor"], fields["hash"])
        self.last_cursor = fields["cursor"]
        self.kinds.add(event_type)
        return int(fields["cursor"])

    def put(
        self,
        table: str,
        *,
        key: dict[str, Any],
        identity: dict[str, Any],
        columns: dict[str, Any],
        label: str,
    ) -> tuple[dict[str, Any], bool]:
        """Insert a row unless one with this key exists; replay when identical, conflict otherwise.

        Returns the stored row as a dict and whether it was a replay. `table` and column names come
        from code, never from callers.
        """
        # Values that look like credentials never reach the file; keys that do are refused earlier.
        identity = redact(identity)
        digest = identity_digest(identity)
        cache_key = (table, *map(str, key.values()))
        known = self.learned.get(cache_key) or self.known_rows.get(cache_key)
        if known is not None and known["identity_digest"] == digest:
            return dict(known), True
        columns = {name: redact_text(v) if isinstance(v, str) else v for name, v in columns.items()}
        existing = self.fetch_one(table, key)
        if existing is not None:
            if existing["identity_digest"] == digest:
                self._learn(table, cache_key, existing)
                return existing, True
            fields = differing_fields(json.loads(existing["identity_json"]), identity)
            raise IdentityConflict(
                f"{label} already exists with different {', '.join(fields)}.",
                fields=fields,
                hint="Register the change under a new id (a new version), or resend the original values.",
            )
        row = {**key, **columns, "identity_json": canonical_json(identity), "identity_digest": digest}
        names = ", ".join(row)
        self.conn.execute(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))
        stored = self.fetch_one(table, key)
        assert stored is not None
        self._learn(table, cache_key, stored)
        return stored, False

    def _learn(self, table: str, cache_key: tuple[str, ...], row: dict[str, Any]) -> None:
        if table in IMMUTABLE_TABLES:
            self.learned[cache_key] = dict(row)

    def fetch_one(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        where = " AND ".join(f"{name} = ?" for name in key)
        row = self.conn.execute(f"SELECT * FROM {table} WHERE {where}", tuple(key.values())).fetchone()
        return dict(row) if row is not None else None
