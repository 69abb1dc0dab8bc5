"""The daemon process: `asyncio.run(main(settings))` opens the ledger, serves the API, shuts down in order."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Generator
from io import TextIOWrapper
from logging.handlers import RotatingFileHandler
from pathlib import Path

import uvicorn
from bashgym.client.errors import Conflict, InvalidInput
from bashgym.client.redaction import redact_text
from bashgym.client.specs import Actor
from bashgym.daemon.api.app import create_app
from bashgym.daemon.authority import RateLimiter, WaitSlots, hash_token, new_token
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.campaigns.runner import CampaignRunner
from bashgym.daemon.campaigns.scheduler import ReportScheduler
from bashgym.daemon.evidence.evaluations import EvaluationService
from bashgym.daemon.external.service import ExternalJobs
from bashgym.daemon.external.tracked import TrackedRuns
from bashgym.daemon.host_paths import keep_environment_private, secure_home
from bashgym.daemon.lockfile import HomeLock
from bashgym.daemon.notices.render import ConsoleNotifier, NoticeRenderer
from bashgym.daemon.notices.sinks import SinkForwarder
from bashgym.daemon.services import Services
from bashgym.daemon.settings import Settings, local_thread_limit
from bashgym.daemon.training import TrainingService
from bashgym.daemon.version import bashgym_version
from bashgym.ledger.store import Ledger

log = logging.getLogger("bashgym.daemon")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_MAX_BYTES = 5 * 1024 * 1024
LOG_BACKUPS = 3  # daemon.log.1 to .3 beside daemon.log: 20 MiB of log at most
# Libraries whose INFO lines are routine, quiet below DEBUG: APScheduler logs two a minute for the report sync
# ("Running job", "executed successfully"), httpx one per request (NeMo status polls, sink posts). uvicorn's
# access log is off altogether (access_log=False in _serve).
CHATTY_LOGGERS = ("apscheduler", "httpx")
SYSTEM = Actor(actor_id="system:daemon", credential_kind="system", capability="authority.manage")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon owns SIGTERM/SIGINT and the shutdown order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _read_or_create_token(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    token = new_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    log.info("Created the admin token at %s (mode 0600).", path)
    return token


async def ensure_admin_token(ledger: Ledger, path: Path) -> None:
    """Create $BASHGYM_HOME/admin.token (0600) on first start; re-register it if the ledger lacks it."""
    await _ensure_token(ledger, path, token_id="tok-admin", actor_id="admin", profile="admin", capabilities=[])


async def ensure_bot_token(ledger: Ledger, path: Path) -> None:
    """With Discord configured, create $BASHGYM_HOME/bot.token (0600) for the bot on this host: it may read
    and act for Discord users (delegate.discord), nothing else of its own."""
    await _ensure_token(
        ledger,
        path,
        token_id="tok-discord-bot",
        actor_id="discord-bot",
        profile="viewer",
        capabilities=["delegate.discord"],
    )


async def _ensure_token(
    ledger: Ledger, path: Path, *, token_id: str, actor_id: str, profile: str, capabilities: list[str]
) -> None:
    token = await asyncio.to_thread(_read_or_create_token, path)
    if await ledger.find_token(hash_token(token)) is not None:
        return
    taken = {t["token_id"]: t for t in await ledger.list_tokens()}
    if token_id in taken:
        # The ledger knows another token under this id: a restored or copied ledger on a new home, or
        # a replaced token file. The file's token gets its own id; the earlier one is left to the operator.
        earlier = token_id
        token_id = f"{token_id}-{hash_token(token)[:8]}"
        if not taken[earlier].get("revoked_at"):
            log.warning(
                "%s is not the token the ledger knows as %s; registered it as %s. The earlier token stays valid "
                "until you revoke it: bashgym auth revoke %s",
                path,
                earlier,
                token_id,
                earlier,
            )
    await ledger.insert_token(
        SYSTEM,
        token_id=token_id,
        token_hash=hash_token(token),
        actor_id=actor_id,
        profile=profile,
        capabilities=capabilities,
        workspace_id=None,
        project_id=None,
        expires_at=None,
    )


def _bind(settings: Settings) -> tuple[socket.socket, str, dict[str, object]]:
    if settings.uds is not None:
        settings.uds.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(settings.uds))
        os.chmod(settings.uds, 0o600)
        return sock, f"unix:{settings.uds}", {"uds": str(settings.uds)}
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only then, and without
    # it every response waits ~40 ms on Nagle plus delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        where = f"{settings.host}:{settings.port}"
        if exc.errno == errno.EADDRINUSE:
            raise Conflict(
                f"Port {settings.port} on {settings.host} is already in use by another program.",
                hint="Pick another with --port N or BASHGYM_PORT (0 picks a free one); `bashgym status` tells "
                "whether it is a BashGym daemon.",
            ) from exc
        raise InvalidInput(
            f"The daemon cannot listen on {where}: {exc.strerror}.", hint="Check --host/--port (BASHGYM_HOST/PORT)."
        ) from exc
    port = sock.getsockname()[1]
    host = f"[{settings.host}]" if family == socket.AF_INET6 else settings.host
    url = f"http://{host}:{port}"
    return sock, url, {"url": url}


async def main(settings: Settings, environ: dict[str, str]) -> int:
    """Run until SIGTERM/SIGINT; return the exit code."""
    started = time.monotonic()
    threads = local_thread_limit(settings, environ, os.cpu_count() or 1)  # local trainers and evaluators share it
    secure_home(settings.home)  # 0700, and 0600 for all it and its children create: it holds the ledger and tokens
    keep_environment_private()  # the secrets in its environment are not for processes of its user to read
    lock = HomeLock(settings.lock_path)
    lock.acquire()
    sock: socket.socket | None = None
    try:
        sock, url, endpoint = _bind(settings)  # first: a taken port is said plainly, before anything opens
        async with (
            await Ledger.open(
                settings.ledger_path, synchronous=settings.ledger_synchronous, readers=settings.ledger_readers
            ) as ledger,
            TrainingService(settings, ledger, environ, threads=threads) as training,
            EvaluationService(
                settings, ledger, BlobStore(settings.artifacts_dir), threads=threads, environ=environ
            ) as evaluations,
            ReportScheduler(ledger, settings.home / "reports") as scheduler,
            CampaignRunner(settings, ledger, training, evaluations),
            _console_channel(settings, ledger, environ),
            SinkForwarder(ledger, environ, default_workspace=settings.default_workspace) as sinks,
            ExternalJobs(settings, ledger, environ) as external,
            TrackedRuns(settings, ledger) as tracked,
        ):
            await ensure_admin_token(ledger, settings.admin_token_path)
            # A project's token names a project of one workspace: older ones, issued without it, meant the default.
            await ledger.bind_project_tokens(SYSTEM, settings.default_workspace)
            if environ.get(settings.discord_token_env):
                await ensure_bot_token(ledger, settings.home / "bot.token")
            services = Services(
                settings=settings,
                ledger=ledger,
                blobs=BlobStore(settings.artifacts_dir),
                version=bashgym_version(),
                started_monotonic=started,
                limiter=RateLimiter(settings.rate_limit_per_minute, settings.rate_limit_burst),
                read_limiter=RateLimiter(
                    settings.read_rate_per_minute, settings.read_rate_burst, what="reads", hint="poll less often"
                ),
                bad_token_limiter=RateLimiter(
                    settings.bad_token_per_minute,
                    max(1, settings.bad_token_per_minute // 3),
                    what="requests with a bad token",
                    hint="check the token (bashgym auth whoami)",
                ),
                waits=WaitSlots(settings.max_waits_per_principal),
                training=training,
                evaluations=evaluations,
                scheduler=scheduler,
                sinks=sinks,
                external=external,
                tracked=tracked,
                discord_configured=bool(environ.get(settings.discord_token_env)),
                nemo_key_set=bool(environ.get(settings.nemo_api_key_env)),
                environ=environ,
            )
            # Shutdown order: the API stops accepting (in _serve), then TrainingService stops its
            # trainers and records their outcomes, then the ledger closes last.
            await _serve(services, sock, url, endpoint)
    finally:
        if sock is not None:
            sock.close()
        settings.endpoint_path.unlink(missing_ok=True)
        lock.release()
    return 0


def _console_channel(
    settings: Settings, ledger: Ledger, environ: dict[str, str]
) -> contextlib.AbstractAsyncContextManager[object]:
    """The console channel prints notices when no Discord bot token is configured (the bot posts them then)."""
    if not settings.console_notices or environ.get(settings.discord_token_env):
        return contextlib.nullcontext()
    renderer = NoticeRenderer(ledger, settings.home / "reports")
    return ConsoleNotifier(ledger, renderer, settings.default_workspace)


async def _serve(services: Services, sock: socket.socket, url: str, endpoint: dict[str, object]) -> None:
    settings = services.settings
    config = uvicorn.Config(
        create_app(services),
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's loggers propagate to ours, which redact
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(settings.grace_s),
    )
    server = _Server(config)
    # Everything built so far lives as long as the daemon; moving it out of the collector's view
    # keeps full collections (and the latency spikes they cause) small.
    gc.freeze()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    async with asyncio.TaskGroup() as group:
        serving = group.create_task(server.serve(sockets=[sock]))
        # uvicorn exposes `started` as a flag, not an event, so poll it briefly.
        while not server.started and not serving.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        _announce(settings, url, endpoint)
        await _until(stopping, serving)
        # Shutdown order: stop accepting, let requests in flight finish, then the ledger closes last
        # (in main's `async with`).
        server.should_exit = True
    log.info("BashGym daemon stopped.")


async def _until(stopping: asyncio.Event, serving: asyncio.Task[None]) -> None:
    waiter = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _announce(settings: Settings, url: str, endpoint: dict[str, object]) -> None:
    record = {**endpoint, "pid": os.getpid()}
    tmp = settings.endpoint_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(settings.endpoint_path)
    # The one line the daemon prints on its own; scripts and tests read the address after "listening on ".
    where = log_file() or "stderr"
    print(f"BashGym daemon listening on {url} (pid {os.getpid()}, home {settings.home}); log: {where}", flush=True)


class PrivateRotatingFileHandler(RotatingFileHandler):
    """The daemon's size-rotating log file, created 0600 each time (the first one, and each after a rotation)."""

    def _open(self) -> TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


class RedactingFormatter(logging.Formatter):
    """Every log line, traceback included, passes through the one redaction function."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def configure_logging(settings: Settings) -> None:
    """Log to the home's log file at log_level, and to stderr WARNING and above (everything with log_console).

    A home whose log file cannot be written gets its whole log on stderr instead, said in a warning there.
    """
    level = logging.getLevelNamesMapping()[settings.log_level]
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(level if settings.log_console else max(level, logging.WARNING))
    handlers: list[logging.Handler] = [console]
    unwritable: OSError | None = None
    try:
        handlers.append(_log_file_handler(settings.log_path))
    except OSError as exc:
        unwritable = exc
        console.setLevel(level)
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level)
    for handler in handlers:
        handler.setFormatter(RedactingFormatter(LOG_FORMAT))
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if level <= logging.DEBUG else logging.WARNING)
    if unwritable is not None:
        log.warning(
            "Cannot write the daemon's log at %s (%s); logging to stderr instead. Check the owner and the disk "
            "of that directory.",
            settings.log_path,
            unwritable.strerror or unwritable,
        )


def _log_file_handler(path: Path) -> logging.Handler:
    # Created here, before main() sets the home's umask: folders 0700 and the file 0600 from the start
    # (mkdir's parents=True would make a missing home with the umask's mode).
    for folder in reversed([p for p in (path.parent, *path.parent.parents) if not p.exists()]):
        folder.mkdir(mode=0o700, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))  # an unwritable home fails here, not later
    # delay: the file opens at the first record, so a second daemon refused by the home's lock never holds it.
    return PrivateRotatingFileHandler(path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, delay=True)


def log_file() -> Path | None:
    """The file the daemon logs to, as configure_logging set it up; None when it logs to stderr only."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, RotatingFileHandler):
            return Path(handler.baseFilename)
    return None
