"""Pause and stop requests arrive as signals and become flags; no heavy imports, so they install first."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any


@dataclass
class ControlFlags:
    pause: bool = False
    stop: bool = False

    def install(self) -> None:
        """SIGUSR1 asks to pause (checkpoint, then exit); SIGTERM asks to stop (status cancelled)."""
        signal.signal(signal.SIGUSR1, self._on_pause)
        signal.signal(signal.SIGTERM, self._on_stop)

    def _on_pause(self, signum: int, frame: Any) -> None:
        self.pause = True

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stop = True
