"""Write transactions on the ledger file, and what a refusal of its storage means to the user.

SQLite reports a full disk as SQLITE_FULL and a file-size limit (RLIMIT_FSIZE) as a failed write
(SQLITE_IOERR_WRITE); a read-only directory as SQLITE_READONLY or SQLITE_CANTOPEN; another process
holding the write lock past the busy timeout as SQLITE_BUSY. In every case SQLite has rolled the
transaction back (or never began it), so the file stays whole and the chain head does not move.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from bashgym.client.errors import LedgerBusy, LedgerDiskFull, LedgerReadOnly, LedgerStorageFailed

BUSY_TIMEOUT_MS = 5000  # SQLite's busy handler retries with its own capped backoff (sleeps of 1 to 100 ms)

_FULL = {"SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE", "SQLITE_IOERR_SHMSIZE"}
_READ_ONLY = {"SQLITE_READONLY", "SQLITE_CANTOPEN"}
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection, path: Path) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT; rolled back on any error, storage refusals said plainly."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite may have rolled back already (a full disk does)
                conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as exc:
        refusal = storage_refusal(exc, path)
        if refusal is None:
            raise
        raise refusal from exc


def storage_refusal(exc: sqlite3.Error, path: Path) -> LedgerStorageFailed | None:
    """The user-facing error for a storage refusal, or None when exc is something else (a bug)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    primary = name.split("_")[0:2]
    kind = "_".join(primary)
    home = path.parent
    if name in _FULL or kind == "SQLITE_FULL":
        free = _free_mib(home)
        return LedgerDiskFull(
            f"The ledger could not grow: writing to {home} failed ({exc}); {free} MiB free there. The disk is full "
            "or a file-size limit applies. Nothing of this request was written and the ledger is intact.",
            hint=f"Free space on the disk that holds {home} (old run directories under runs/ are the usual bulk), "
            "then retry; reads keep working meanwhile.",
            details={"free_mib": free},
        )
    if kind in _READ_ONLY:
        return LedgerReadOnly(
            f"The ledger in {home} is read-only ({exc}). Nothing of this request was written.",
            hint=f"Make {home} writable again (remount it read-write, or fix its owner), then retry; or move the "
            "ledger with bashgym ledger backup --to FILE and restore it into a writable BASHGYM_HOME.",
        )
    if kind in _BUSY:
        return LedgerBusy(
            f"Another process has held the ledger's write lock for over {BUSY_TIMEOUT_MS // 1000} s ({exc}); "
            "nothing of this request was written.",
            hint=f"Close whatever has {path} open for writing (a sqlite3 shell, a copy tool), then retry. Use "
            "bashgym ledger backup for copies: it never blocks the daemon.",
        )
    return None


def _free_mib(directory: Path) -> int:
    try:
        return shutil.disk_usage(directory).free // (1024 * 1024)
    except OSError:
        return -1
