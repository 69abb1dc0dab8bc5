"""A tracked run: what a training script holds between start_run and the end of its `with` block."""

from __future__ import annotations

import atexit
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from bashgym.client.http import DaemonClient, resolve_api
from bashgym.daemon.settings import DEFAULT_PORT, Settings, load_settings
from bashgym.track.sender import Sender
from bashgym.trainers.system import SystemSampler

log = logging.getLogger("bashgym.track")


def user_settings() -> Settings:
    """The settings of the user's process, read once where it enters BashGym (this library is its entry point)."""
    return load_settings(dict(os.environ))


def connect(*, api: str | None = None, token: str | None = None) -> DaemonClient:
    """The daemon and token the CLI would use: BASHGYM_API (or the running daemon's daemon.json in BASHGYM_HOME)
    and BASHGYM_TOKEN (or the home's admin token)."""
    settings = user_settings()
    address = resolve_api(api or settings.api, settings.endpoint_path, DEFAULT_PORT)
    secret = token or settings.token
    if not secret and settings.admin_token_path.is_file():
        secret = settings.admin_token_path.read_text().strip()
    return DaemonClient(address, secret)


def spool_dir() -> Path:
    """Where batches wait while the daemon is down: the user's BashGym home (BASHGYM_HOME), under track/."""
    return user_settings().home / "track"


class Run:
    """A run the daemon records while this process trains; log to it, and leave the `with` block to end it."""

    def __init__(self, sender: Sender, record: dict[str, Any], *, flush_timeout_s: float) -> None:
        self._sender = sender
        self.record = record
        self.run_id: str = record["run_id"]
        self.project: str = record["project_id"]
        self.flush_timeout_s = flush_timeout_s
        self.path = f"/v1/projects/{quote(self.project)}/tracked-runs/{quote(self.run_id)}"
        self.is_ended = False
        self.step = 0  # the latest step logged: system metrics are recorded at it
        self.system: SystemSampler | None = None
        sender.start(self.path)
        atexit.register(self._at_exit)

    def log_metrics(self, values: Mapping[str, float], *, step: int) -> None:
        """Queue one point per metric at `step`; sent in the background, never waiting on the network."""
        now = time.time()
        self.step = max(self.step, step)
        self._sender.add(
            [
                {"metric": name, "step": step, "value": float(v), "time": now}
                for name, v in values.items()
                if math.isfinite(v)
            ]
        )

    def watch_system(self, interval_s: float) -> None:
        """Record system.* series (trainers/system.py) every `interval_s` at the latest step logged; 0: none."""
        self.system = SystemSampler(
            lambda step, values: self.log_metrics(values, step=step),
            lambda: self.step,
            interval_s=interval_s,
            visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        self.system.start()

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._values({"params": dict(params)})

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._values({"tags": {name: str(value) for name, value in tags.items()}})

    def _values(self, body: dict[str, Any]) -> None:
        self._sender.call(self._sender.retried("POST", f"{self.path}/values", body=body))

    def end(self, status: str = "completed", error_summary: str = "") -> None:
        """Send every queued point, then record the run's end; idempotent."""
        if self.is_ended:
            return
        self.is_ended = True
        atexit.unregister(self._at_exit)
        if self.system is not None:
            self.system.stop()  # its last sample goes with the rest
        arrived = self._sender.close(timeout_s=self.flush_timeout_s)
        try:
            if not arrived:
                log.warning("Run %s: points not yet sent stay in %s; the run is left open for the daemon to "
                            "reconcile.", self.run_id, self._sender.spool)  # fmt: skip
                return
            body = {"status": status, "error_summary": error_summary[:4000]}
            self._sender.call(self._sender.retried("POST", f"{self.path}/end", body=body))
        finally:
            self._sender.shutdown()

    def _at_exit(self) -> None:
        self.end("failed", "the process exited without ending the run")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None:
            self.end("completed")
        else:
            self.end("failed", f"{type(exc).__name__}: {exc}")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        import asyncio

        await asyncio.to_thread(self.__exit__, kind, exc, tb)
