"""A quiet daemon: started in a terminal it prints one line when ready and warnings only; its log, INFO lines
and all, redacted, goes to $BASHGYM_HOME/logs/daemon.log. --log-console brings the log back to stderr."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

import httpx

from tests.support.helpers import BASHGYM, running_daemon

PLANTED_HF = "hf_" + "PlantedLogSecret" * 3  # the shape of a Hugging Face token, in the daemon's environment


def test_the_daemon_prints_one_ready_line_that_says_where_its_log_is(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = subprocess.Popen(
        [*BASHGYM, "daemon", "--port", "0"],
        env={**os.environ, "BASHGYM_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        url = ready.split("listening on ", 1)[1].split()[0]
        assert httpx.get(f"{url}/v1/health").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert ready.startswith("BashGym daemon listening on http://127.0.0.1:")
    assert ready.rstrip("\n").endswith(f"(pid {proc.pid}, home {home}); log: {home / 'logs' / 'daemon.log'}")
    assert out == "", "the ready line is the only line on stdout"
    assert err == "", "stderr gets warnings and errors only, and there were none"


def test_the_log_file_holds_the_info_lines_redacted_and_stderr_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_daemon(home, env={"HF_TOKEN": PLANTED_HF}) as daemon:
        token = daemon.token
        with daemon.client() as client:
            assert client.post("/v1/projects", json={"project_id": "nightly", "name": "Nightly"}).status_code == 201
        with daemon.client(token=PLANTED_HF) as stranger:
            assert stranger.get("/v1/projects").status_code == 401
        assert daemon.stop() == 0
    log = home / "logs" / "daemon.log"
    text = log.read_text()
    assert "INFO bashgym.daemon: Created the admin token" in text
    assert "INFO bashgym.daemon: BashGym daemon stopped." in text
    assert "apscheduler" not in text, "the scheduler's routine lines are left out below DEBUG"
    for secret in (token, PLANTED_HF):
        assert secret not in text
    assert daemon.console == [], "nothing on stdout after the ready line: no notices unless asked for"
    stderr = (home / "daemon.log").read_text()  # the helper keeps the daemon's stderr there
    assert " INFO " not in stderr, "stderr gets no INFO lines"
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700 and stat.S_IMODE(log.stat().st_mode) == 0o600


def test_log_console_writes_the_log_to_stderr_as_well(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_daemon(home, "--log-console") as daemon:
        assert daemon.stop() == 0
    for where in ((home / "daemon.log").read_text(), (home / "logs" / "daemon.log").read_text()):
        assert "INFO bashgym.daemon: Created the admin token" in where
        assert "INFO bashgym.daemon: BashGym daemon stopped." in where
