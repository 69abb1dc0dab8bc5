"""A daemon component that runs one loop for as long as it is entered (`async with`), and the retry of
writes that must not be given up."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Self, TypeVar

from bashgym.client.errors import LedgerStorageFailed

T = TypeVar("T")
log = logging.getLogger("bashgym.daemon")


class BackgroundLoop(ABC):
    """Entering starts `_loop` as a task; leaving cancels it and waits for it to end."""

    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @abstractmethod
    async def _loop(self) -> None:
        """Run until cancelled."""


async def until_stored(write: Callable[[], Awaitable[T]], *, what: str, cap_s: float = 30.0) -> T:
    """Retry a write the ledger's storage refused (full disk, read-only, locked), with capped backoff.

    For writes whose source of truth lives elsewhere until stored (a trainer's metrics file): waiting
    for the disk loses nothing, where giving up would.
    """
    delay_s = 0.5
    while True:
        try:
            return await write()
        except LedgerStorageFailed as exc:
            log.warning("Storing %s failed (%s); retrying in %.1f s. %s", what, exc.message, delay_s, exc.hint)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, cap_s)
