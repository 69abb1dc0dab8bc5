"""A tracked run: what a training script holds between start_run and the end of its `with` block."""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from bashgym.client.errors import InvalidInput
from bashgym.client.http import DaemonClient, file_chunks, resolve_api
from bashgym.client.tracking import check_artifact_name
from bashgym.daemon.settings import DEFAULT_PORT, Settings, load_settings
from bashgym.track.sender import Sender
from bashgym.track.spool import hold_spool, release_spool
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
        hold_spool(sender.spool)
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

    def log_artifact(self, path: str | os.PathLike[str], name: str | None = None) -> dict[str, Any]:
        """Upload a file, or every file under a directory, to the daemon's store as the run's artifacts (streamed;
        the daemon digests each). A file is artifact `name` (default: the file's name) and its record comes back
        (uri `bashgym://runs/RUN/NAME`, sha256, size_bytes); a directory's files are `name/relative/path` and a
        summary comes back: {name, uri, files, bytes, sha256 of the manifest (`sha256  size  path` lines)}.

        The same file under the same name again records nothing new; other content under a logged name is
        refused (a Conflict), so name each checkpoint apart (`checkpoint-500`)."""
        source = Path(path)
        label = check_artifact_name(name or source.name)
        if source.is_dir():
            return self._log_directory(source, label)
        if not source.is_file():
            raise InvalidInput(
                f"{source} is neither a file nor a directory on this machine; nothing was uploaded.",
                hint="Pass the path of a saved file or directory, e.g. trainer.args.output_dir.",
            )
        return self._upload(source, label)

    async def alog_artifact(self, path: str | os.PathLike[str], name: str | None = None) -> dict[str, Any]:
        """log_artifact for async code: the upload runs off the caller's event loop."""
        return await asyncio.to_thread(self.log_artifact, path, name)

    def _log_directory(self, directory: Path, name: str) -> dict[str, Any]:
        files = sorted(p for p in directory.rglob("*") if p.is_file())
        if not files:
            raise InvalidInput(f"{directory} holds no files; nothing was uploaded.",
                               hint="Log the directory once the model or checkpoint is saved into it.")  # fmt: skip
        manifest = []
        for file in files:
            relative = file.relative_to(directory).as_posix()
            record = self._upload(file, check_artifact_name(f"{name}/{relative}"))
            manifest.append(f"{record['sha256']}  {record['size_bytes']}  {relative}")
        return {
            "name": name,
            "uri": f"bashgym://runs/{self.run_id}/{name}",
            "files": len(files),
            "bytes": sum(int(line.split()[1]) for line in manifest),
            "sha256": hashlib.sha256("\n".join(manifest).encode()).hexdigest(),
        }

    def _upload(self, file: Path, name: str) -> dict[str, Any]:
        # A daemon killed before answering recorded the file or not; the same name and bytes again under a new key
        # are a replay that answers the record either way.
        for _ in range(2):
            answer = self._sender.call(
                self._sender.retried(
                    "PUT", f"{self.path}/artifacts", params={"name": name}, content=lambda: file_chunks(file)
                )
            )
            if answer is not None:
                return dict(answer["record"])
        raise RuntimeError(f"Artifact {name!r} of run {self.run_id}: the daemon stopped twice before answering.")

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
            release_spool(self._sender.spool)

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
        await asyncio.to_thread(self.__exit__, kind, exc, tb)
