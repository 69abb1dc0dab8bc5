"""Storage faults: a full disk, a read-only home and a write lock held by another process each get a
clear answer, the daemon keeps serving, and nothing acknowledged is lost or damaged."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import RunningDaemon, cli, running_daemon

DESCRIPTION = "x" * 4000  # the longest a project description may be: each write costs a few ledger pages


def test_a_full_disk_refuses_writes_plainly_keeps_reads_and_loses_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    acknowledged: list[str] = []
    with running_daemon(home, max_file_bytes=2 * 1024 * 1024) as daemon, daemon.client() as client:
        for i in range(5000):
            answer = client.post("/v1/projects", json={"project_id": f"p{i}", "name": "P", "description": DESCRIPTION})
            if answer.status_code != 201:
                break
            acknowledged.append(f"p{i}")
        refused_id = f"p{len(acknowledged)}"
        error = answer.json()["error"]
        # The same write again: a smaller one may still fit in the last free pages, as on a real disk.
        again = client.post("/v1/projects", json={"project_id": refused_id, "name": "P", "description": DESCRIPTION})
        listed = client.get("/v1/projects")
        health = client.get("/v1/health")
        daemon.stop()
    assert answer.status_code == 503 and error["code"] == "ledger_disk_full", answer.text
    assert "Nothing of this request was written" in error["message"] and "Free space" in error["hint"]
    assert again.status_code == 503, "the same write fails the same way while the disk is full"
    assert again.json()["error"]["code"] == "ledger_disk_full"
    assert listed.status_code == 200 and health.status_code == 200, "reads keep working"
    assert {p["project_id"] for p in listed.json()} >= set(acknowledged)
    assert len(acknowledged) > 10
    with running_daemon(home) as daemon, daemon.client() as client:  # space is back
        after = {p["project_id"] for p in client.get("/v1/projects").json()}
        retried = client.post("/v1/projects", json={"project_id": refused_id, "name": "P"})
        verified = cli(daemon.env(), "ledger", "verify")
    assert set(acknowledged) <= after and refused_id not in after
    assert retried.status_code == 201
    assert verified.code == 0, verified.stdout + verified.stderr


@pytest.fixture
def read_only_home(tmp_path: Path) -> Iterator[Path]:
    """A home the daemon cannot write to: a read-only tmpfs as root (root ignores file modes), else chmod."""
    home = tmp_path / "home"
    home.mkdir()
    if os.geteuid() != 0:
        home.chmod(0o500)
        yield home
        home.chmod(0o700)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(home)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"root without mount rights here, and root writes through file modes: {mounted.stderr!r}")
    try:
        yield home
    finally:
        subprocess.run(["umount", str(home)], check=True)


def test_a_read_only_home_stops_the_daemon_saying_what_to_do(read_only_home: Path) -> None:
    started = cli({**os.environ, "BASHGYM_HOME": str(read_only_home)}, "daemon", "--port", "0", timeout_s=30)
    assert started.code == 8
    assert f"cannot write to its home {read_only_home}" in started.stderr, started.stderr
    assert "writable" in started.stderr and "Traceback" not in started.stderr


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path / "home") as running:
        yield running


def hold_write_lock(ledger: Path, release: threading.Event) -> threading.Thread:
    """Another process's writer (a sqlite3 shell in BEGIN IMMEDIATE) holds the lock until `release` is set."""
    taken = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(ledger, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        taken.set()
        release.wait(60)
        conn.execute("ROLLBACK")
        conn.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert taken.wait(10)
    return holder


def test_a_briefly_locked_ledger_is_waited_for_and_a_long_lock_is_said_plainly(daemon: RunningDaemon) -> None:
    ledger = daemon.home / "ledger.sqlite3"
    with daemon.client() as client:
        released = threading.Event()
        brief = hold_write_lock(ledger, released)
        threading.Timer(1.0, released.set).start()  # well inside the 5 s the daemon waits
        waited = client.post("/v1/projects", json={"project_id": "waited", "name": "W"})
        brief.join()
        held = threading.Event()
        long = hold_write_lock(ledger, held)  # held until the daemon has given up
        refused = client.post("/v1/projects", json={"project_id": "refused", "name": "R"})
        read = client.get("/v1/projects")
        held.set()
        long.join()
        after = client.post("/v1/projects", json={"project_id": "refused", "name": "R"})
        cursor = client.get("/v1/ledger/health").json()["last_cursor"]
    assert waited.status_code == 201, waited.text
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "ledger_busy", refused.text
    assert "write lock for over 5 s" in refused.json()["error"]["message"]
    assert "bashgym ledger backup" in refused.json()["error"]["hint"]
    assert read.status_code == 200, "reads do not wait for the writer's lock"
    assert after.status_code == 201 and after.json()["replayed"] is False
    assert cli(daemon.env(), "ledger", "verify").code == 0 and cursor > 0
