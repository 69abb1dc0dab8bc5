"""Offline restore: verify a backup completely, keep the current file aside, put the backup in place."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from bashgym.client.errors import InvalidInput
from bashgym.ledger.integrity import verify_chain
from bashgym.ledger.migrations import MIGRATIONS, applied_migrations, check_applied


def check_backup(source: Path) -> dict[str, Any]:
    """Refuse a backup that is damaged, from other code, or whose event chain is broken."""
    if not source.is_file():
        raise InvalidInput(f"{source} is not a file.", hint="Pass the file bashgym ledger backup wrote.")
    try:
        conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
            if verdict != "ok":
                raise InvalidInput(f"{source} fails SQLite's integrity check: {verdict}.")
            check_applied(applied_migrations(conn), MIGRATIONS)
            chain = verify_chain(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{source} is not a BashGym ledger: {exc}.") from exc
    if not chain["ok"]:
        raise InvalidInput(
            f"{source} has a broken event chain at cursor {chain['first_broken_cursor']}: {chain['reason']}.",
            hint="Restore an older backup.",
        )
    return chain


def restore_ledger(source: Path, target: Path) -> dict[str, Any]:
    chain = check_backup(source)
    kept = None
    if target.exists():
        kept = target.with_name(f"{target.name}.before-restore-{time.strftime('%Y%m%dT%H%M%S')}")
        target.replace(kept)
        for suffix in ("-wal", "-shm"):
            side = target.with_name(target.name + suffix)
            if side.exists():
                side.replace(kept.with_name(kept.name + suffix))
    shutil.copyfile(source, target)
    return {"restored_events": chain["checked"], "previous_ledger_kept_as": kept.name if kept else None}
