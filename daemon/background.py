"""A daemon component that runs one loop for as long as it is entered (`async with`)."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Self


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
