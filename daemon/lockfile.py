"""One daemon per home: an exclusive flock on daemon.lock that names the holder's pid."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from bashgym.client.errors import Conflict, LedgerReadOnly


class DaemonAlreadyRunning(Conflict):
    code = "daemon_already_running"


class HomeLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        home = self.path.parent
        try:
            home.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LedgerReadOnly(
                f"The daemon cannot write to its home {home}: {exc.strerror}. It keeps the ledger, its lock "
                "and the tokens there.",
                hint="Make that directory writable (remount it read-write, or fix its owner), or point "
                "BASHGYM_HOME at a writable one (bashgym ledger restore --from FILE brings a backup there).",
            ) from None
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
