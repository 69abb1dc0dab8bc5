"""Numbered, append-only, checksum-pinned migrations; each commits together with its own record."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime

from bashgym.client.errors import LedgerUnavailable, MigrationMismatch
from bashgym.ledger.schema import (
    v1,
    v2,
    v3,
    v4,
    v5,
    v6,
    v7,
    v8,
    v9,
    v10,
    v11,
    v12,
    v13,
    v14,
    v15,
    v16,
    v17,
    v18,
    v19,
)


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str
    # A table rebuild drops a table other tables refer to: foreign keys go off around it (they cannot
    # change inside a transaction) and every reference is checked before the commit.
    rebuilds_tables: bool = False

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial_ledger", v1.SQL),
    Migration(2, "authority_grants", v2.SQL),
    Migration(3, "device_registry", v3.SQL),
    Migration(4, "evaluation_details_and_runcards", v4.SQL),
    Migration(5, "campaigns_and_schedules", v5.SQL),
    Migration(6, "project_channels", v6.SQL),
    Migration(7, "event_sinks", v7.SQL),
    Migration(8, "run_source_unique_per_project", v8.SQL, rebuilds_tables=True),
    Migration(9, "device_groups", v9.SQL),
    Migration(10, "trust_boundaries", v10.SQL),
    Migration(11, "consumer_leases", v11.SQL),
    Migration(12, "cascade_stages", v12.SQL, rebuilds_tables=True),
    Migration(13, "model_kinds_and_project_profiles", v13.SQL),
    Migration(14, "external_jobs_and_compute_plans", v14.SQL),
    Migration(15, "metric_point_times", v15.SQL),
    Migration(16, "evidence_provenance", v16.SQL),
    Migration(17, "web_view_sessions", v17.SQL),
    Migration(18, "entity_tags_and_notes", v18.SQL),
    Migration(19, "slurm_clusters", v19.SQL),
)

_RECORD_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    number INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL
)
"""


def applied_migrations(conn: sqlite3.Connection) -> dict[int, tuple[str, str]]:
    rows = conn.execute("SELECT number, name, checksum FROM schema_migrations ORDER BY number").fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def check_applied(applied: dict[int, tuple[str, str]], migrations: tuple[Migration, ...]) -> None:
    """Refuse a ledger whose applied migrations differ from the code's (pure; raises)."""
    known = {m.number: m for m in migrations}
    for number, (name, checksum) in applied.items():
        migration = known.get(number)
        if migration is None:
            raise LedgerUnavailable(
                f"The ledger has migration {number} ({name}) that this BashGym does not know.",
                hint="It was written by a newer BashGym; upgrade bashgym before starting the daemon.",
            )
        if migration.checksum != checksum:
            raise MigrationMismatch(
                f"Migration {number} ({name}) was applied with checksum {checksum[:12]}, but the code "
                f"now has {migration.checksum[:12]}. Applied migrations must never change.",
                hint="Restore the original migration text, or restore the ledger from a backup "
                "(bashgym ledger restore --from FILE).",
            )


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply every pending migration, each in its own transaction with its record; return the numbers."""
    conn.execute(_RECORD_TABLE)
    # Migration 10 replaces stored idempotency keys by their digests, inside SQL.
    conn.create_function("bashgym_sha256", 1, _sha256_text, deterministic=True)
    applied = applied_migrations(conn)
    check_applied(applied, migrations)
    done: list[int] = []
    for migration in migrations:
        if migration.number in applied:
            continue
        if migration.rebuilds_tables:
            conn.execute("PRAGMA foreign_keys=OFF")
        try:
            _apply(conn, migration)
        finally:
            if migration.rebuilds_tables:
                conn.execute("PRAGMA foreign_keys=ON")
        done.append(migration.number)
    return done


def _sha256_text(value: str) -> str:
    return hashlib.sha256(str(value).encode()).hexdigest()


def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _statements(migration.sql):
            conn.execute(statement)
        if migration.rebuilds_tables:
            broken = conn.execute("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise LedgerUnavailable(
                    f"Migration {migration.number} ({migration.name}) would leave {len(broken)} broken "
                    f"reference(s), first in table {broken[0][0]!r}; nothing was changed.",
                    hint="Run `bashgym ledger health`, and restore a verified backup if it reports damage.",
                )
        conn.execute(
            "INSERT INTO schema_migrations (number, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
            (migration.number, migration.name, migration.checksum, datetime.now(UTC).isoformat()),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(sql: str) -> list[str]:
    # executescript() would COMMIT on its own; splitting keeps the migration and its record in
    # one transaction. Comment lines go first; schema text holds no semicolons inside literals.
    code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [part.strip() for part in code.split(";") if part.strip()]
