"""`bashgym logs [--follow] [--lines N]`: the daemon's log as its operator reads it, from the CLI of its home;
--follow runs until Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.helpers import RunningDaemon, cli

# `bashgym` as a terminal starts it in the foreground: SIGINT at its default, which Python makes KeyboardInterrupt.
# Where the suite itself runs with SIGINT ignored (started in the background by a non-interactive shell, as in
# `make test &`), the command inherits it ignored and Python leaves it so: no Ctrl-C reaches it and --follow rightly
# runs on (wait() timed out after 30 s). So the command restores what a terminal gives it, then runs the entry point.
IN_A_TERMINAL = [
    sys.executable,
    "-c",
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from bashgym.cli.main import main; main()",
]


def home_env(home: Path) -> dict[str, str]:
    return {**os.environ, "BASHGYM_HOME": str(home)}


def read_lines(proc: subprocess.Popen[str], into: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    with proc.stdout:  # closed at EOF, when the command has been killed
        for line in proc.stdout:
            into.put(line)


def test_logs_prints_the_last_lines_of_the_homes_daemon_log(daemon: RunningDaemon) -> None:
    log = daemon.home / "logs" / "daemon.log"
    last = log.read_text().splitlines()[-2:]
    shown = cli(home_env(daemon.home), "logs", "--lines", "2")
    assert shown.code == 0, shown.stderr
    assert shown.stdout.splitlines() == last
    assert "Created the admin token" in cli(home_env(daemon.home), "logs").stdout, "the default shows 50 lines"
    as_json = cli(home_env(daemon.home), "logs", "--lines", "1", "--json")
    assert as_json.code == 0, as_json.stderr
    assert as_json.json() == {"path": str(log), "lines": last[-1:]}


def test_logs_follow_prints_the_lines_the_daemon_writes_later(daemon: RunningDaemon) -> None:
    follow = subprocess.Popen(
        [*IN_A_TERMINAL, "logs", "--follow", "--lines", "1"],
        env=home_env(daemon.home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=read_lines, args=(follow, printed), daemon=True)
    reader.start()
    try:
        tail = printed.get(timeout=30)  # the log's last line: it has opened the file and read it
        assert "stopped" not in tail
        assert daemon.stop() == 0  # the daemon writes its last line after that
        later = [printed.get(timeout=30)]
        while "BashGym daemon stopped." not in later[-1]:
            later.append(printed.get(timeout=30))
        follow.send_signal(signal.SIGINT)  # Ctrl-C
        assert follow.wait(timeout=30) == 130, follow.stderr.read()  # type: ignore[union-attr]
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(timeout=10)
        reader.join(timeout=10)
        follow.stderr.close()  # type: ignore[union-attr]


def test_follow_with_json_is_a_usage_error(tmp_path: Path) -> None:
    refused = cli(home_env(tmp_path), "logs", "--follow", "--json")
    assert refused.code == 2
    assert refused.json()["error"]["code"] == "usage_error"
    assert "--follow" in refused.stderr and "Drop --json" in refused.stderr


def test_a_home_without_a_log_says_where_it_looked_and_how_to_start_a_daemon(tmp_path: Path) -> None:
    missing = cli(home_env(tmp_path / "home"), "logs")
    assert missing.code == 5
    assert f"no daemon log at {tmp_path / 'home' / 'logs' / 'daemon.log'}" in missing.stderr
    assert "bashgym up" in missing.stderr
    as_json = cli(home_env(tmp_path / "home"), "logs", "--json")
    assert as_json.code == 5 and as_json.json()["error"]["code"] == "not_found"
