"""Hash-chain verification, health figures and online backups of the ledger file."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from bashgym.client.errors import InvalidInput
from bashgym.ledger.events import GENESIS_HASH, HASHED_FIELDS, event_hash
from bashgym.ledger.migrations import applied_migrations
from bashgym.ledger.tx import ChainHead

_COUNTED = (
    "projects",
    "experiments",
    "runs",
    "attempts",
    "metric_points",
    "artifacts",
    "eval_results",
    "decisions",
    "events",
)


def chain_head(conn: sqlite3.Connection) -> ChainHead:
    row = conn.execute("SELECT cursor, hash FROM events ORDER BY cursor DESC LIMIT 1").fetchone()
    return ChainHead(int(row[0]), str(row[1])) if row else ChainHead(0, GENESIS_HASH)


def verify_chain(conn: sqlite3.Connection) -> dict[str, Any]:
    """Recompute every event's hash in cursor order; report the first broken cursor, if any."""
    previous = GENESIS_HASH
    checked = 0
    columns = ", ".join((*HASHED_FIELDS, "hash"))
    for row in conn.execute(f"SELECT {columns} FROM events ORDER BY cursor"):
        fields = dict(row)
        if fields["prev_hash"] != previous:
            return {
                "ok": False,
                "checked": checked,
                "first_broken_cursor": fields["cursor"],
                "reason": "prev_hash does not match the previous event's hash (an event was removed or reordered)",
            }
        if event_hash(fields) != fields["hash"]:
            return {
                "ok": False,
                "checked": checked,
                "first_broken_cursor": fields["cursor"],
                "reason": "the stored hash does not match the event's content (the row was edited)",
            }
        previous = fields["hash"]
        checked += 1
    return {"ok": True, "checked": checked, "first_broken_cursor": None, "reason": ""}


def health(conn: sqlite3.Connection, path: Path) -> dict[str, Any]:
    """Figures a human needs to judge the ledger; file paths are left out on purpose."""
    quick = conn.execute("PRAGMA quick_check").fetchone()[0]
    wal = path.with_name(path.name + "-wal")
    synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("PRAGMA synchronous").fetchone()[0]]
    return {
        "status": "ok" if quick == "ok" else "corrupt",
        "quick_check": quick,
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
        "synchronous": synchronous,
        "durability": (
            "every acknowledged write survives a process crash and power loss"
            if synchronous in ("FULL", "EXTRA")
            else "every acknowledged write survives a process crash; power loss may lose the last ones"
        ),
        "migrations": [
            {"number": n, "name": name, "checksum": checksum[:12]}
            for n, (name, checksum) in applied_migrations(conn).items()
        ],
        "file_bytes": path.stat().st_size if path.exists() else 0,
        "wal_bytes": wal.stat().st_size if wal.exists() else 0,
        "last_cursor": int(conn.execute("SELECT COALESCE(MAX(cursor), 0) FROM events").fetchone()[0]),
        "row_counts": {t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in _COUNTED},
    }


def backup_to(conn: sqlite3.Connection, target: Path) -> dict[str, Any]:
    """Copy the live ledger with SQLite's online backup API, then check the copy."""
    if target.exists():
        raise InvalidInput(
            f"{target} already exists; a backup never overwrites a file.",
            hint="Pick a new file name, e.g. ledger-2026-11-29.sqlite3.",
        )
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = target.with_name(target.name + ".partial")
    # 0600 from the first byte: a backup holds every workspace's records.
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    with sqlite3.connect(partial) as dst:
        conn.backup(dst)
    with sqlite3.connect(partial) as check:
        verdict = check.execute("PRAGMA integrity_check").fetchone()[0]
        events = int(check.execute("SELECT COUNT(*) FROM events").fetchone()[0])
    check.close()
    partial.replace(target)
    return {"integrity_check": verdict, "events": events, "bytes": target.stat().st_size}
