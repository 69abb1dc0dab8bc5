"""Small factories the tests share: a running daemon on a free port, the CLI in-process, ledger fixtures."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

BASHGYM = [sys.executable, "-c", "from bashgym.cli.main import main; main()"]

# The suite's operator lets callers name files in the temporary directory (tiny models, datasets, bundles, SSH
# keys of the stand-ins) and devices on loopback, where the stand-ins listen. The trust-boundary tests narrow
# each of these back to what a real operator would set, and attack from there.
SUITE_ROOT = tempfile.gettempdir()
SUITE_OPERATOR_ENV = {
    "BASHGYM_DATA_ROOTS": SUITE_ROOT,
    "BASHGYM_EXPORT_ROOTS": SUITE_ROOT,
    "BASHGYM_SSH_KEYS_DIR": SUITE_ROOT,
    "BASHGYM_ALLOW_PRIVATE_DEVICE_HOSTS": "true",
}
SUITE_OPERATOR_SETTINGS: dict[str, Any] = {
    "data_roots": [SUITE_ROOT],
    "export_roots": [SUITE_ROOT],
    "ssh_keys_dir": SUITE_ROOT,
    "allow_private_device_hosts": True,
}
BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def run_bench(script: str, *args: str, timeout_s: float = 280) -> list[dict[str, Any]]:
    """Run bench/`script` in this interpreter, require it to exit 0, and return the JSON lines it printed."""
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args], capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@dataclass
class RunningDaemon:
    home: Path
    url: str
    proc: subprocess.Popen[str]
    console: list[str] = field(default_factory=list)  # the daemon's stdout after start: the console channel

    def __post_init__(self) -> None:
        # Drain stdout for the daemon's whole life, or a full pipe would block its console notifier.
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        stream = self.proc.stdout
        if stream is None:
            return
        with stream:  # closed at EOF, when the daemon has exited
            for line in stream:
                self.console.append(line.rstrip("\n"))

    @property
    def token(self) -> str:
        return (self.home / "admin.token").read_text().strip()

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def env(self) -> dict[str, str]:
        return {**os.environ, "BASHGYM_HOME": str(self.home), "BASHGYM_API": self.url}

    @property
    def log(self) -> str:
        """Everything the daemon logged: its stderr (warnings, start-up failures) and its log file."""
        files = [self.home / "daemon.log", self.home / "logs" / "daemon.log"]
        return "".join(path.read_text() for path in files if path.exists())

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout_s)
        self.close()
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._drainer.join(timeout=10)


def start_daemon(
    home: Path, *extra: str, env: dict[str, str] | None = None, max_file_bytes: int | None = None
) -> RunningDaemon:
    """Start `bashgym daemon --port 0` and wait for the address it prints.

    max_file_bytes sets RLIMIT_FSIZE on the daemon: no file it writes grows past it (a full disk,
    without a filesystem of its own).
    """
    environment = {**os.environ, **SUITE_OPERATOR_ENV, "BASHGYM_HOME": str(home), **(env or {})}
    home.mkdir(parents=True, exist_ok=True)
    # stderr (the daemon's log) goes to a file: an unread pipe would fill and block the daemon.
    with (home / "daemon.log").open("a") as log:
        proc = subprocess.Popen(
            [*BASHGYM, "daemon", "--port", "0", *extra],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            preexec_fn=None if max_file_bytes is None else functools.partial(_limit_file_size, max_file_bytes),
        )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "listening on" in line:
            url = line.split("listening on ", 1)[1].split()[0]
            return RunningDaemon(home=home, url=url, proc=proc)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    proc.stdout.close()
    raise AssertionError(f"daemon did not start: {(home / 'daemon.log').read_text()}")


def _limit_file_size(max_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))  # Python ignores SIGXFSZ: writes fail


@contextlib.contextmanager
def running_daemon(
    home: Path, *extra: str, env: dict[str, str] | None = None, max_file_bytes: int | None = None
) -> Iterator[RunningDaemon]:
    daemon = start_daemon(home, *extra, env=env, max_file_bytes=max_file_bytes)
    try:
        yield daemon
    finally:
        daemon.close()


@contextlib.contextmanager
def daemon_with_project(home: Path, project: str = "nightly", name: str = "Nightly SFT") -> Iterator[RunningDaemon]:
    """A running daemon whose admin created `project` first."""
    with running_daemon(home) as daemon:
        with daemon.client() as admin:
            created = admin.post("/v1/projects", json={"project_id": project, "name": name})
            assert created.status_code in {200, 201}, created.text
        yield daemon


def register_versions(daemon: RunningDaemon, project: str, model: Path, data: Path) -> None:
    """Register `model` as model version tiny-v1 (its files stored) and `data` as dataset version rows-v1 of
    `project`, through the CLI as a user does: what an official launch by project and versions names."""
    for args in (
        ("model", "register", "--project", project, "--model", "tiny", "--version", "tiny-v1", "--dir", str(model)),
        ("dataset", "register", "--project", project, "--dataset", "rows", "--version", "rows-v1", "--file", str(data)),
    ):
        done = cli(daemon.env(), *args)
        assert done.code == 0, done.stderr


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def cli(env: dict[str, str], *args: str, timeout_s: float = 120) -> CliResult:
    """Run the real `bashgym` console entry point in a child process."""
    proc = subprocess.run([*BASHGYM, *args], env=env, capture_output=True, text=True, timeout=timeout_s)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


async def cli_async(env: dict[str, str], *args: str, timeout_s: float = 120) -> CliResult:
    """`cli` for async tests whose event loop serves a peer (an SSH stand-in) the command needs."""
    import asyncio

    proc = await asyncio.create_subprocess_exec(
        *BASHGYM, *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    async with asyncio.timeout(timeout_s):
        stdout, stderr = await proc.communicate()
    return CliResult(proc.returncode or 0, stdout.decode(), stderr.decode())


@contextlib.asynccontextmanager
async def inprocess_daemon(
    ledger: Any, home: Path, environ: dict[str, str] | None = None, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The daemon's app and training service in this event loop, with an admin client over ASGI.

    For lanes whose peers (the SSH and NeMo stand-ins) live in the test's own loop.
    """
    from bashgym.daemon.api.app import create_app
    from bashgym.daemon.authority import RateLimiter
    from bashgym.daemon.blobs import BlobStore
    from bashgym.daemon.external.service import ExternalJobs
    from bashgym.daemon.server import ensure_admin_token
    from bashgym.daemon.services import Services
    from bashgym.daemon.settings import load_settings
    from bashgym.daemon.training import TrainingService

    config = load_settings({}, home=str(home), **{**SUITE_OPERATOR_SETTINGS, **settings})
    home.mkdir(parents=True, exist_ok=True)  # the daemon's lock step makes it; the in-process one has none
    # The daemon's own first-start step: the admin token file, registered in the ledger.
    await ensure_admin_token(ledger, config.admin_token_path)
    admin = config.admin_token_path.read_text().strip()
    async with (
        TrainingService(config, ledger, environ or {}) as training,
        ExternalJobs(config, ledger, environ or {}) as external,
    ):
        services = Services(
            config, ledger, BlobStore(config.artifacts_dir), "test", 0.0, RateLimiter(10_000, 10_000), training
        )
        services.external = external
        transport = httpx.ASGITransport(app=create_app(services))
        headers = {"Authorization": f"Bearer {admin}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://daemon", headers=headers) as api:
            yield api


async def wait_external_job(api: httpx.AsyncClient, job: dict[str, Any], states: set[str]) -> dict[str, Any]:
    """The external job as shown once its state is one of `states` (30 s at most)."""
    async with asyncio.timeout(30):
        while True:
            shown = (await api.get(f"/v1/projects/{job['project_id']}/jobs/{job['job_id']}")).json()
            if shown["state"] in states:
                return shown
            await asyncio.sleep(0.05)


def eventually(what: str, probe: Callable[[], Any], timeout_s: float = 30.0, every_s: float = 0.1) -> Any:
    """Poll `probe` until it answers something truthy, and answer that; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_run(client: httpx.Client, project: str, run_id: str, statuses: set[str], timeout_s: float = 300) -> Any:
    """Poll a run (over a daemon in another process) until it reaches one of `statuses`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.get(f"/v1/projects/{project}/runs/{run_id}").json()
        if run["status"] in statuses:
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} never reached {statuses}; last {run['status']}")


def train_all(client: httpx.Client, project: str, requests: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
    """Start every named request at once (the local lane runs them in turn), wait for each, and return each
    completed run by its name."""
    started = {name: client.post("/v1/training/start", json=body) for name, body in requests.items()}
    assert all(s.status_code == 201 for s in started.values()), {n: s.text for n, s in started.items()}
    runs = {
        name: wait_for_run(client, project, s.json()["run_id"], {"completed", "failed", "cancelled"}, timeout_s)
        for name, s in started.items()
    }
    for run in runs.values():
        assert run["status"] == "completed", run["attempts"][-1]
    return runs


async def wait_for_status(
    api: httpx.AsyncClient, project: str, run_id: str, statuses: set[str], timeout_s: float = 240
) -> Any:
    """Poll a run until it reaches one of `statuses`."""
    import asyncio

    async with asyncio.timeout(timeout_s):
        while True:
            run = (await api.get(f"/v1/projects/{project}/runs/{run_id}")).json()
            if run["status"] in statuses:
                return run
            await asyncio.sleep(0.2)
