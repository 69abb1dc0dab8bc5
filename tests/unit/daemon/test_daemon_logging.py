"""The daemon's log: its home's logs/daemon.log at log_level, quiet libraries, warnings only on stderr, every line
redacted; console notices only where asked for."""

from __future__ import annotations

import contextlib
import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.client.redaction import register_secret_values
from bashgym.daemon import server
from bashgym.daemon.server import CHATTY_LOGGERS, configure_logging, log_file
from bashgym.daemon.settings import Settings, load_settings

SECRET = "planted-log-secret-4f1c9a"


@pytest.fixture(autouse=True)
def restored_logging() -> Iterator[None]:
    """configure_logging sets the process's root logger: each test gets back the one it had."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    chatty = {name: logging.getLogger(name).level for name in CHATTY_LOGGERS}
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in chatty.items():
            logging.getLogger(name).setLevel(was)


def settings_for(home: Path, **values: object) -> Settings:
    return load_settings({}, home=str(home), **values)


def flush() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()


def test_info_goes_to_the_homes_log_file_and_only_warnings_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(tmp_path / "home")
    configure_logging(settings)
    logging.getLogger("bashgym.daemon").info("Created the admin token")
    logging.getLogger("bashgym.daemon").warning("A run lost its device")
    flush()
    text = settings.log_path.read_text()
    assert "INFO bashgym.daemon: Created the admin token" in text
    assert "WARNING bashgym.daemon: A run lost its device" in text
    err = capsys.readouterr().err
    assert "A run lost its device" in err and "Created the admin token" not in err
    assert log_file() == settings.log_path == tmp_path / "home" / "logs" / "daemon.log"


def test_the_log_folder_and_file_are_private_from_the_start(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "new-home")
    configure_logging(settings)
    assert stat.S_IMODE(settings.home.stat().st_mode) == 0o700
    assert stat.S_IMODE(settings.log_path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(settings.log_path.stat().st_mode) == 0o600


def test_a_rotated_log_keeps_a_few_private_files_of_a_bounded_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "LOG_MAX_BYTES", 400)
    settings = settings_for(tmp_path / "home")
    configure_logging(settings)
    for i in range(100):
        logging.getLogger("bashgym.daemon").info("line %d of a long day", i)
    flush()
    files = sorted(settings.log_path.parent.iterdir())
    assert [f.name for f in files] == ["daemon.log", *(f"daemon.log.{n}" for n in range(1, server.LOG_BACKUPS + 1))]
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert all(f.stat().st_size <= 400 for f in files)
    assert "line 99 of a long day" in settings.log_path.read_text()


@pytest.mark.parametrize(("log_level", "has_routine"), [("INFO", False), ("DEBUG", True)])
def test_apschedulers_routine_lines_are_left_out_unless_debugging(
    tmp_path: Path, log_level: str, has_routine: bool
) -> None:
    settings = settings_for(tmp_path / "home", log_level=log_level)
    configure_logging(settings)
    scheduler = logging.getLogger("apscheduler.executors.default")
    scheduler.info('Running job "ReportScheduler.sync" (trigger: interval[0:01:00])')
    scheduler.info('Job "ReportScheduler.sync" executed successfully')
    scheduler.warning("Run time of job was missed by 0:00:02")
    flush()
    text = settings.log_path.read_text()
    assert ("Running job" in text, "executed successfully" in text) == (has_routine, has_routine)
    assert "was missed" in text


def test_log_console_writes_the_whole_log_to_stderr_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = settings_for(tmp_path / "home", log_console=True)
    configure_logging(settings)
    logging.getLogger("bashgym.daemon").info("Created the admin token")
    flush()
    assert "INFO bashgym.daemon: Created the admin token" in capsys.readouterr().err
    assert "Created the admin token" in settings.log_path.read_text()


def test_every_line_of_the_file_is_redacted_tracebacks_included(tmp_path: Path) -> None:
    register_secret_values([SECRET])
    settings = settings_for(tmp_path / "home")
    configure_logging(settings)
    try:
        raise RuntimeError(f"401 for Bearer {SECRET} while pushing")
    except RuntimeError:
        logging.getLogger("bashgym.daemon").exception("Push of %s failed", SECRET)
    flush()
    text = settings.log_path.read_text()
    assert "Traceback" in text and "RuntimeError: 401 for Bearer [redacted] while pushing" in text
    assert SECRET not in text


def test_a_log_file_that_cannot_be_written_sends_the_log_to_stderr_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "logs").write_text("a file where the log folder belongs")
    configure_logging(settings_for(home))
    logging.getLogger("bashgym.daemon").info("Created the admin token")
    err = capsys.readouterr().err
    assert f"Cannot write the daemon's log at {home / 'logs' / 'daemon.log'}" in err
    assert "Created the admin token" in err
    assert log_file() is None


def test_notices_print_on_the_console_only_where_asked_for(tmp_path: Path) -> None:
    assert settings_for(tmp_path).console_notices is False
    assert load_settings({"BASHGYM_CONSOLE_NOTICES": "1"}, home=str(tmp_path)).console_notices is True
    assert load_settings({"BASHGYM_LOG_CONSOLE": "1"}, home=str(tmp_path)).log_console is True
    channel = server._console_channel(settings_for(tmp_path), ledger=None, environ={})  # type: ignore[arg-type]
    assert isinstance(channel, contextlib.nullcontext)
