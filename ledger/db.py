"""SQLite connections that each live on their own thread and run whole functions there.

aiosqlite pays one thread hop (~86 us here) per statement; a transaction of five statements pays
five. Running the whole transaction as one function on the connection's thread pays one hop, so
the event loop never waits on SQLite and a write costs what plain sqlite3 costs.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bashgym.ledger.storage import BUSY_TIMEOUT_MS

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
