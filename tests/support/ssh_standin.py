"""A real SSH server on 127.0.0.1 for tests of the SSH compute lane (facts in PROTOCOLS.md).

asyncssh serves public-key auth for one user, SFTP chrooted to `root/home`, and exec commands run
by `/bin/sh -c` in their own session with cwd and HOME in `root/home`. The server records every
command and SFTP operation, and `drop_connections()` cuts every live connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE
from typing import Any

import asyncssh

USER = "bashgym"
HOST = "127.0.0.1"
CHUNK = 65536
REAP_TIMEOUT_S = 5.0

Subprocess = asyncio.subprocess.Process


@dataclass(frozen=True)
class SshServer:
    """What a test needs to reach the stand-in, and what the stand-in saw."""

    host: str
    port: int
    user: str
    key_path: Path
    known_hosts: Path
    host_key: str
    home: Path
    commands: list[str]
    sftp_ops: list[tuple[str, str]]
    _peer: _Peer = field(repr=False, compare=False)

    def device(self, device_id: str, **overrides: Any) -> dict[str, Any]:
        """A device registration on this server. Each gets a work dir of its own, as two machines have their own
        disks; its python is this venv's, which has bashgym and torch, as a bootstrapped host would."""
        return {
            "device_id": device_id,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "key_path": str(self.key_path),
            "host_key": self.host_key,
            "work_dir": f"work-{device_id}",
            "python": sys.executable,
            **overrides,
        }

    async def drop_connections(self) -> None:
        """Abort every live connection without a goodbye, as a network cut would."""
        await self._peer.drop_connections(abort=True)


class _Peer:
    """Server-side state shared by the connection, exec and SFTP handlers."""

    def __init__(self, home: Path, client_key: asyncssh.SSHKey) -> None:
        self.home = home
        self.client_key = client_key
        self.commands: list[str] = []
        self.sftp_ops: list[tuple[str, str]] = []
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.live: set[Subprocess] = set()
        self.handlers: set[asyncio.Task[object]] = set()

    async def drop_connections(self, *, abort: bool) -> None:
        conns = list(self.connections)
        for conn in conns:
            if abort:
                conn.abort()
            else:
                conn.close()
        for conn in conns:
            await asyncio.wait_for(conn.wait_closed(), REAP_TIMEOUT_S)

    async def stop(self) -> None:
        """Close connections, kill what is still running and wait for every exec handler."""
        await self.drop_connections(abort=False)
        for proc in self.live:
            _signal_group(proc.pid, signal.SIGKILL)
        if self.handlers:
            await asyncio.wait(self.handlers, timeout=REAP_TIMEOUT_S)

    def sftp(self, chan: asyncssh.SSHServerChannel[bytes]) -> asyncssh.SFTPServer:
        return _RecordingSFTP(chan, chroot=os.fsencode(self.home), ops=self.sftp_ops)

    def env(self, process: asyncssh.SSHServerProcess[bytes]) -> dict[str, str]:
        base = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.home), "LANG": "C.UTF-8"}
        if "OMP_NUM_THREADS" in os.environ:  # the device's login environment keeps the suite's thread limit
            base["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
        return {**base, **process.env}

    async def run_exec(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """Process factory: run one exec command and report its exit status."""
        command = process.command
        if command is None or process.subsystem is not None:
            what = f"subsystem {process.subsystem!r}" if process.subsystem else "an interactive shell"
            process.stderr.write(f"The SSH stand-in runs exec commands only, not {what}.\n".encode())
            process.exit(1)
            return
        self.commands.append(command)
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            await self._run(process, command)
        finally:
            self.handlers.discard(task)

    async def _run(self, process: asyncssh.SSHServerProcess[bytes], command: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
            cwd=self.home,
            env=self.env(process),
            start_new_session=True,
        )
        self.live.add(proc)
        pumping = asyncio.ensure_future(_pump(process, proc))
        closing = asyncio.ensure_future(process.wait_closed())
        is_finished = False
        try:
            await asyncio.wait({pumping, closing}, return_when=asyncio.FIRST_COMPLETED)
            if pumping.done():
                _report_exit(process, pumping.result())
                is_finished = True
        finally:
            pumping.cancel()
            closing.cancel()
            await asyncio.gather(pumping, closing, return_exceptions=True)
            # The channel closed first: the client is gone, so its command goes too. A job that
            # the command detached with setsid sits in another session and survives.
            await _reap(proc, kill=not is_finished)
            self.live.discard(proc)


class _Auth(asyncssh.SSHServer):
    """Accepts the one generated client key for user "bashgym" and tracks the connection."""

    def __init__(self, peer: _Peer) -> None:
        self._peer = peer
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._peer.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._peer.connections.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == USER and key.public_data == self._peer.client_key.public_data


class _RecordingSFTP(asyncssh.SFTPServer):
    """SFTP chrooted to the home dir that records (op, client path) for each change or listing."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes], *, chroot: bytes, ops: list[tuple[str, str]]) -> None:
        super().__init__(chan, chroot=chroot)
        self._ops = ops

    def _record(self, op: str, path: bytes) -> None:
        self._ops.append((op, os.fsdecode(path)))

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        self._record("open:write" if pflags & asyncssh.FXF_WRITE else "open:read", path)
        return super().open(path, pflags, attrs)

    def remove(self, path: bytes) -> None:
        self._record("remove", path)
        super().remove(path)

    def mkdir(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        self._record("mkdir", path)
        super().mkdir(path, attrs)

    def rmdir(self, path: bytes) -> None:
        self._record("rmdir", path)
        super().rmdir(path)

    def rename(self, oldpath: bytes, newpath: bytes) -> None:
        self._record("rename", oldpath)
        super().rename(oldpath, newpath)

    def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
        self._record("rename", oldpath)
        super().posix_rename(oldpath, newpath)

    # Named scandir, not listdir: asyncssh calls a listdir() override through a legacy path.
    async def scandir(self, path: bytes) -> AsyncIterator[asyncssh.SFTPName]:
        self._record("listdir", path)
        async for name in super().scandir(path):
            yield name


async def _pump(process: asyncssh.SSHServerProcess[bytes], proc: Subprocess) -> int:
    """Copy stdin in and stdout/stderr out until the command exits and its pipes close."""
    assert proc.stdout is not None and proc.stderr is not None
    feeding = asyncio.ensure_future(_feed(process.stdin, proc))
    try:
        await asyncio.gather(_copy(proc.stdout, process.stdout), _copy(proc.stderr, process.stderr))
        return await proc.wait()
    finally:
        feeding.cancel()
        await asyncio.gather(feeding, return_exceptions=True)


async def _copy(src: asyncio.StreamReader, dst: asyncssh.SSHWriter[bytes]) -> None:
    while chunk := await src.read(CHUNK):
        try:
            dst.write(chunk)
            await dst.drain()
        except OSError:
            return  # the client closed the channel; the close handler ends the command


async def _feed(src: asyncssh.SSHReader[bytes], proc: Subprocess) -> None:
    assert proc.stdin is not None
    try:
        while True:
            try:
                chunk = await src.read(CHUNK)
            except asyncssh.SignalReceived as exc:
                # Signal the group: dash keeps the real program alive when only /bin/sh is hit.
                sig = getattr(signal, f"SIG{exc.signal}", None)
                if sig is not None:
                    _signal_group(proc.pid, sig)
                continue
            if not chunk:
                break
            proc.stdin.write(chunk)
            await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command closed its stdin; what the client sends next has nowhere to go
    finally:
        proc.stdin.close()


def _report_exit(process: asyncssh.SSHServerProcess[bytes], returncode: int) -> None:
    if returncode >= 0:
        process.exit(returncode)
    else:  # killed by a signal: sshd reports the signal's name, not a status
        process.exit_with_signal(signal.Signals(-returncode).name.removeprefix("SIG"))


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group has already exited
        os.killpg(pgid, sig)


async def _reap(proc: Subprocess, *, kill: bool) -> None:
    """Optionally kill the command's process group, then collect its exit and close its pipes."""
    assert proc.stdout is not None and proc.stderr is not None
    if kill:
        _signal_group(proc.pid, signal.SIGKILL)
    # Read the pipes to EOF: a paused pipe never closes and asyncio warns of an unclosed transport.
    # A timeout only hits when a detached job kept the pipes open; then the warning is deserved.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(proc.stdout.read(), proc.stderr.read()), REAP_TIMEOUT_S)
    await proc.wait()


def _write_private_key(key: asyncssh.SSHKey, path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.export_private_key("openssh"))


def _public_line(key: asyncssh.SSHKey) -> str:
    return key.export_public_key("openssh").decode().strip()


@contextlib.asynccontextmanager
async def ssh_server(root: Path) -> AsyncIterator[SshServer]:
    """Serve SSH on 127.0.0.1 (free port) until the block exits; keys live in root/keys."""
    home, keys = root / "home", root / "keys"
    home.mkdir(parents=True, exist_ok=True)
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    _write_private_key(client_key, keys / "id_ed25519")
    peer = _Peer(home, client_key)
    acceptor = await asyncssh.create_server(
        lambda: _Auth(peer),
        HOST,
        0,
        server_host_keys=[host_key],
        process_factory=peer.run_exec,
        sftp_factory=peer.sftp,
        encoding=None,
        allow_pty=False,
        agent_forwarding=False,
        x11_forwarding=False,
    )
    try:
        port = acceptor.get_port()
        known_hosts = keys / "known_hosts"
        known_hosts.write_text(f"[{HOST}]:{port} {_public_line(host_key)}\n")
        yield SshServer(
            host=HOST,
            port=port,
            user=USER,
            key_path=keys / "id_ed25519",
            known_hosts=known_hosts,
            host_key=_public_line(host_key),
            home=home,
            commands=peer.commands,
            sftp_ops=peer.sftp_ops,
            _peer=peer,
        )
    finally:
        acceptor.close()
        await peer.stop()
        await acceptor.wait_closed()
