"""The daemon as a user meets it: start, status, health, auth errors, one per home, SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
from pathlib import Path

import httpx

from tests.support.helpers import BASHGYM, RunningDaemon, cli, running_daemon, start_daemon


def test_status_json_reports_a_healthy_daemon(daemon: RunningDaemon) -> None:
    result = cli(daemon.env(), "status", "--json")
    assert result.code == 0, result.stderr
    status = result.json()
    assert status["status"] == "ok"
    assert status["ledger"] == "ok"
    assert status["ledger_detail"]["journal_mode"] == "wal"


def test_status_finds_a_port_zero_daemon_without_api_flag(daemon: RunningDaemon) -> None:
    env = {k: v for k, v in daemon.env().items() if k != "BASHGYM_API"}
    result = cli(env, "status", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["api"] == daemon.url


def test_health_needs_no_token_but_other_routes_answer_401_in_the_error_shape(daemon: RunningDaemon) -> None:
    health = httpx.get(f"{daemon.url}/v1/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    denied = httpx.get(f"{daemon.url}/v1/projects")
    assert denied.status_code == 401
    error = denied.json()["error"]
    assert error["code"] == "authentication_required"
    assert error["message"] and error["hint"]
    assert denied.headers["x-correlation-id"].startswith("cor-")


def test_admin_token_is_created_private_on_first_start(daemon: RunningDaemon) -> None:
    mode = stat.S_IMODE((daemon.home / "admin.token").stat().st_mode)
    assert mode == 0o600
    with daemon.client() as client:
        assert client.get("/v1/auth/whoami").json()["actor_id"] == "admin"


def test_second_daemon_on_the_same_home_refuses_naming_the_pid(daemon: RunningDaemon) -> None:
    result = cli(daemon.env(), "daemon", "--port", "0", timeout_s=30)
    assert result.code == 6
    assert f"pid {daemon.proc.pid}" in result.stderr


def test_sigterm_stops_the_daemon_with_exit_zero(tmp_path: Path) -> None:
    running = start_daemon(tmp_path / "home")
    try:
        assert running.stop(signal.SIGTERM, timeout_s=5) == 0
    finally:
        running.close()
    assert not (tmp_path / "home" / "daemon.json").exists()


def test_status_without_a_daemon_says_how_to_start_one_and_exits_8(tmp_path: Path) -> None:
    env = {**os.environ, "BASHGYM_HOME": str(tmp_path), "BASHGYM_API": "http://127.0.0.1:9"}
    result = cli(env, "status")
    assert result.code == 8
    assert "bashgym daemon" in result.stderr


def test_status_json_error_is_one_json_document(tmp_path: Path) -> None:
    env = {**os.environ, "BASHGYM_HOME": str(tmp_path), "BASHGYM_API": "http://127.0.0.1:9"}
    result = cli(env, "status", "--json")
    assert result.code == 8
    assert result.json()["error"]["code"] == "daemon_unreachable"


def test_daemon_serves_on_a_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "bg.sock"
    proc = subprocess.Popen(
        [*BASHGYM, "daemon", "--uds", str(sock)],
        env={**os.environ, "BASHGYM_HOME": str(tmp_path / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "listening on unix:" in proc.stdout.readline()
        result = cli({**os.environ, "BASHGYM_HOME": str(tmp_path / "home")}, "status", "--json")
        assert result.code == 0, result.stderr
        assert result.json()["api"] == f"unix:{sock}"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stdout.close()  # type: ignore[union-attr]


def test_up_without_discord_runs_the_daemon_and_says_how_to_add_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "BASHGYM_DISCORD_TOKEN"}
    with running_daemon(tmp_path / "home", env=env) as running:
        assert httpx.get(f"{running.url}/v1/health").status_code == 200
    proc = subprocess.Popen(
        [*BASHGYM, "up", "--port", "0"],
        env={**env, "BASHGYM_HOME": str(tmp_path / "h2")},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "Discord is not configured" in first
        assert "BASHGYM_DISCORD_TOKEN" in first
        assert "listening on" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()  # type: ignore[union-attr]


def test_a_taken_port_is_said_plainly_and_leaves_the_home_free(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "BASHGYM_HOME": str(tmp_path / "home")}
        result = cli(env, "daemon", "--port", str(port))
    assert result.code == 6, result.stderr
    assert f"Port {port} on 127.0.0.1 is already in use" in result.stderr and "Traceback" not in result.stderr
    assert "--port N" in result.stderr
    with running_daemon(tmp_path / "home") as daemon:  # the lock was released: the next start works
        assert cli(daemon.env(), "status").code == 0
