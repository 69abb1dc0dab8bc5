"""The SSH stand-in behaves like a real host to the real asyncssh client."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import asyncssh
import pytest

from tests.support.ssh_standin import SshServer, ssh_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[SshServer]:
    async with ssh_server(tmp_path) as running:
        yield running


def connect(server: SshServer, **overrides: object) -> AbstractAsyncContextManager[asyncssh.SSHClientConnection]:
    options: dict[str, object] = {
        "username": server.user,
        "known_hosts": str(server.known_hosts),
        "client_keys": [str(server.key_path)],
        "agent_path": None,
        **overrides,
    }
    return asyncssh.connect(server.host, server.port, **options)


async def wait_for(predicate: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    """Poll the filesystem or process table, which offer nothing to await."""
    with anyio.fail_after(timeout_s):
        while True:
            if predicate():
                return
            await anyio.sleep(0.05)


def is_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_exec_runs_in_home_with_a_clean_env(server: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BASHGYM_LEAK", "host")
    async with connect(server, env={"BASHGYM_X": "1"}) as conn:
        result = await conn.run('echo $HOME; pwd; echo "$BASHGYM_X ${BASHGYM_LEAK-unset} $LANG"', check=True)
    assert result.stdout == f"{server.home}\n{server.home}\n1 unset C.UTF-8\n"
    assert server.commands[-1].startswith("echo $HOME")
    assert server.host_key.startswith("ssh-ed25519 AAAA")
    assert server.key_path.stat().st_mode & 0o777 == 0o600


async def test_exit_status_and_stderr_come_back(server: SshServer) -> None:
    async with connect(server) as conn:
        result = await conn.run("echo oops >&2; exit 3")
        killed = await conn.run("kill -TERM $$")
        shell = await conn.run()
    assert (result.exit_status, result.stderr) == (3, "oops\n")
    assert killed.exit_signal is not None and killed.exit_signal[0] == "TERM"
    assert shell.exit_status == 1


async def test_unknown_host_key_is_refused(server: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with connect(server, known_hosts=str(empty)):
            pass


async def test_other_key_or_user_is_refused(server: SshServer) -> None:
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        async with connect(server, client_keys=[stranger]):
            pass
    with pytest.raises(asyncssh.PermissionDenied):
        async with connect(server, username="root"):
            pass


async def test_sftp_relative_paths_land_in_exec_cwd(server: SshServer, tmp_path: Path) -> None:
    local = tmp_path / "x.txt"
    local.write_text("hello\n")
    async with connect(server) as conn, conn.start_sftp_client() as sftp:
        await sftp.mkdir("work")
        await sftp.put(str(local), "work/x.txt")
        await sftp.get("work/x.txt", str(tmp_path / "back.txt"))
        names = await sftp.listdir("work")
        seen = await conn.run("cat work/x.txt", check=True)
    assert (server.home / "work" / "x.txt").read_text() == "hello\n"
    assert (tmp_path / "back.txt").read_text() == seen.stdout == "hello\n"
    assert "x.txt" in names
    for op in [("mkdir", "work"), ("open:write", "work/x.txt"), ("open:read", "work/x.txt"), ("listdir", "work")]:
        assert op in server.sftp_ops


async def test_detached_job_outlives_command_and_connection(server: SshServer) -> None:
    started = time.monotonic()
    async with connect(server) as conn:
        await conn.run("setsid sh -c 'sleep 1; echo done > out.txt' > /dev/null 2>&1 < /dev/null &", check=True)
    assert time.monotonic() - started < 0.9
    assert not (server.home / "out.txt").exists()
    await wait_for(lambda: (server.home / "out.txt").exists() and (server.home / "out.txt").read_text() == "done\n")


async def test_client_that_stops_reading_gets_its_command_killed(server: SshServer) -> None:
    async with connect(server) as conn:
        proc = await conn.create_process("echo $$ > pgid.txt; exec yes")
        assert (await proc.stdout.read(1000)).startswith("y\n")
        proc.close()
        await proc.wait_closed()
        pgid = int((server.home / "pgid.txt").read_text())
        await wait_for(lambda: not is_group_alive(pgid))
        result = await conn.run("echo still here", check=True)
    assert result.stdout == "still here\n"


async def test_drop_connections_cuts_client_and_kills_command(server: SshServer) -> None:
    async with connect(server) as conn:
        proc = await conn.create_process("echo $$ > pgid.txt; echo started; exec sleep 30")
        assert await proc.stdout.readline() == "started\n"
        await server.drop_connections()
        with anyio.fail_after(5):
            await conn.wait_closed()
        assert proc.exit_status is None
    pgid = int((server.home / "pgid.txt").read_text())
    await wait_for(lambda: not is_group_alive(pgid))
