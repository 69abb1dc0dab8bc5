"""One daemon per home: an exclusive flock on daemon.lock that names the holder's pid."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from bashgym.ledger.errors import Conflict


class DaemonAlreadyRunning(Conflict):
    code = "daemon_already_running"


class HomeLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DaemonAlreadyRunning(
                f"Another BashGym daemon (pid {holder}) already runs on {self.path.parent}.",
                hint="Use that one (bashgym status), stop it, or start this one with another BASHGYM_HOME.",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays for the next start
            self._fd = None
