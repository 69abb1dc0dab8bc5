"""SQLite connections that each live on their own thread and run whole functions there.

aiosqlite pays one thread hop (~86 us here) per statement; a transaction of five statements pays
five. Running the whole transaction as one function on the connection's thread pays one hop, so
the event loop never waits on SQLite and a write costs what plain sqlite3 costs.

The write transaction is here too, with what a refusal of the file's storage means to the user:
SQLite reports a full disk as SQLITE_FULL and a file-size limit (RLIMIT_FSIZE) as a failed write
(SQLITE_IOERR_WRITE); a read-only directory as SQLITE_READONLY or SQLITE_CANTOPEN; another process
holding the write lock past the busy timeout as SQLITE_BUSY. In every case SQLite has rolled the
transaction back (or never began it), so the file stays whole and the chain head does not move.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

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


T = TypeVar("T")

CACHE_KIB = 32 * 1024


def open_connection(path: Path, *, synchronous: str, readonly: bool = False) -> sqlite3.Connection:
    """Open one connection with the ledger's pragmas (WAL, foreign keys, busy timeout)."""
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        # Deleted or overwritten content is zeroed, not left in free pages: a scrubbed secret is gone from the file.
        conn.execute("PRAGMA secure_delete=ON")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    # 32 MiB of page cache per connection (SQLite's default is 2 MiB): index pages of a ledger with
    # millions of events stay in memory. It grows only as pages are touched.
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    return conn


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    # The awaiting caller may have been cancelled; the work itself still ran to completion.
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class ConnectionThread:
    """One sqlite3 connection served by one thread; `run(fn)` executes fn(conn) there."""

    def __init__(self, conn: sqlite3.Connection, name: str) -> None:
        self.conn = conn
        self._jobs: queue.SimpleQueue[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            fn, future = job
            loop = future.get_loop()
            try:
                result = fn(self.conn)
            except BaseException as exc:  # handed to the awaiting coroutine, which re-raises it
                loop.call_soon_threadsafe(_resolve, future, None, exc)
            else:
                loop.call_soon_threadsafe(_resolve, future, result, None)
        self.conn.close()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put((fn, future))
        return await future

    async def close(self) -> None:
        self._jobs.put(None)
        await asyncio.to_thread(self._thread.join, 10)


class ReaderPool:
    """A few read-only connections; a freed connection goes to the longest waiter (FIFO)."""

    def __init__(self, readers: list[ConnectionThread]) -> None:
        self._all = readers
        self._free: asyncio.Queue[ConnectionThread] = asyncio.Queue()
        for reader in readers:
            self._free.put_nowait(reader)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        reader = await self._free.get()
        try:
            return await reader.run(fn)
        finally:
            self._free.put_nowait(reader)

    async def close(self) -> None:
        for reader in self._all:
            await reader.close()
