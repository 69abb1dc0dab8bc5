"""The background sender of a tracked run: points are queued by the training loop (a lock-free append), batched and
sent by one thread with its own event loop, retried with capped back-off, and spooled to disk while the daemon is
down, each batch under its own Idempotency-Key so a resend after a lost answer adds nothing."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from bashgym.client.errors import ApiError
from bashgym.client.http import DaemonClient

T = TypeVar("T")
log = logging.getLogger("bashgym.track")
MAX_BATCH = 5000  # points per request; the daemon takes up to 10,000
TRANSIENT = {0, 408, 425, 429, 500, 502, 503, 504}  # 0: the daemon did not answer


# The daemon's answer to a key whose request it carried out but was killed before answering: the writes are in the
# ledger, once (daemon/api/middleware.py). For a batch of points, a value or the end, that is delivered.
UNANSWERED = "idempotent_request_unanswered"


def is_transient(exc: ApiError) -> bool:
    return exc.status in TRANSIENT


class Sender:
    """Owns the client and the thread that sends a run's batches; `call` runs one request on that thread."""

    def __init__(self, client: DaemonClient, *, spool: Path, interval_s: float, heartbeat_s: float) -> None:
        self.client = client
        self.spool = spool
        self.interval_s = interval_s
        self.heartbeat_s = heartbeat_s
        self.path = ""  # the run's path (/v1/projects/P/tracked-runs/R), set once it is open
        self._points: collections.deque[dict[str, Any]] = collections.deque()
        self._pending: list[tuple[str, list[dict[str, Any]]]] = []  # (idempotency key, points), oldest first
        self._loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._loop.run_forever, name="bashgym-track", daemon=True)
        self._thread.start()
        self._task: concurrent.futures.Future[None] | None = None

    def call(self, coro: Coroutine[Any, Any, T], *, timeout_s: float | None = None) -> T:
        """Run `coro` on the sender's loop and wait for it (from any thread but the sender's)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def start(self, path: str) -> None:
        self.path = path
        self._task = asyncio.run_coroutine_threadsafe(self._run(), self._loop)

    def add(self, points: list[dict[str, Any]]) -> None:
        self._points.extend(points)  # deque.extend is atomic: the training step never waits on the sender

    async def retried(
        self,
        method: str,
        path: str,
        *,
        attempts: int = 4,
        content: Callable[[], AsyncIterator[bytes]] | None = None,
        needs_answer: bool = False,
        **kwargs: Any,
    ) -> Any:
        """One request, retried on transient failures with capped exponential back-off (0.2 s .. 3.2 s); a streamed
        body is read anew by each attempt from `content()`. A request the daemon carried out but was killed before
        answering answers None (its writes are in the ledger), unless the caller `needs_answer`."""
        kwargs.setdefault("idempotency_key", uuid.uuid4().hex)  # every retry is the same request
        delay_s = 0.2
        for attempt in range(attempts):
            try:
                if content is not None:
                    kwargs["content"] = content()
                return await self.client.request(method, path, **kwargs)
            except ApiError as exc:
                if exc.code == UNANSWERED and not needs_answer:
                    return None
                if not is_transient(exc) or attempt == attempts - 1:
                    raise
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 3.2)
        raise AssertionError("unreachable: the last attempt raises")

    def close(self, *, timeout_s: float) -> bool:
        """Send everything queued (waiting up to `timeout_s` for a daemon that is down); True when all arrived.
        What did not stays in the spool file."""
        self._closing = True
        self._loop.call_soon_threadsafe(self._wake.set)
        arrived = False
        if self._task is not None:
            try:
                self._task.result(timeout_s)
                arrived = True
            except TimeoutError:
                self._task.cancel()
        return arrived

    def shutdown(self) -> None:
        self.call(self.client.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    async def _run(self) -> None:
        last_heard = time.monotonic()
        delay_s = self.interval_s
        while True:
            with contextlib.suppress(TimeoutError):  # the interval passed: send what gathered
                await asyncio.wait_for(self._wake.wait(), delay_s)
            self._wake.clear()
            self._batch()
            try:
                if self._pending:
                    await self._send_pending()
                    last_heard = time.monotonic()
                elif time.monotonic() - last_heard >= self.heartbeat_s:
                    await self.retried("POST", f"{self.path}/heartbeat", attempts=1)
                    last_heard = time.monotonic()
                delay_s = self.interval_s
            except ApiError as exc:
                if not is_transient(exc):
                    raise
                self._write_spool()
                delay_s = min(max(delay_s * 2, 0.5), 5.0)  # the daemon is down: ask less often
                log.warning("BashGym daemon unreachable (%s); %d batches spooled to %s, retrying in %.1f s.",
                            exc.message, len(self._pending), self.spool, delay_s)  # fmt: skip
            if self._closing and not self._pending and not self._points:
                return

    def _batch(self) -> None:
        while self._points:
            points = [self._points.popleft() for _ in range(min(MAX_BATCH, len(self._points)))]
            self._pending.append((uuid.uuid4().hex, points))

    async def _send_pending(self) -> None:
        while self._pending:
            key, points = self._pending[0]
            await self.retried("POST", f"{self.path}/metrics", body={"points": points}, idempotency_key=key)
            self._pending.pop(0)
        self.spool.unlink(missing_ok=True)

    def _write_spool(self) -> None:
        """The batches not yet sent, with their keys: what a later process (or this one) sends exactly once."""
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()  # a later process tells a live writer's spool from a dead one's
        lines = [
            json.dumps({"path": self.path, "key": key, "pid": pid, "points": points}) for key, points in self._pending
        ]
        partial = self.spool.with_suffix(".partial")
        partial.write_text("\n".join(lines) + "\n")
        partial.replace(self.spool)
