"""`bashgym logs --follow` reads the daemon's log across its rotation: each line once, in order, none lost."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.cli.processes import LogFollower
from bashgym.daemon.server import PrivateRotatingFileHandler


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[LogFollower]:
    opened = LogFollower(tmp_path / "daemon.log")
    try:
        yield opened
    finally:
        opened.close()


def append(path: Path, text: str) -> None:
    with path.open("a") as log:
        log.write(text)


def test_the_first_read_has_every_line_and_later_ones_only_what_came_since(follower: LogFollower) -> None:
    append(follower.path, "one\ntwo\n")
    assert follower.open()
    assert follower.read_new() == ["one", "two"]
    assert follower.read_new() == []
    append(follower.path, "three\n")
    assert follower.read_new() == ["three"]


def test_a_line_still_being_written_waits_for_its_newline(follower: LogFollower) -> None:
    append(follower.path, "one\ntw")
    assert follower.open()
    assert follower.read_new() == ["one"]
    append(follower.path, "o\n")
    assert follower.read_new() == ["two"]
    append(follower.path, "last, without a newline")
    assert follower.read_new() == []
    assert follower.rest() == ["last, without a newline"]


def test_a_missing_file_is_said_by_open(follower: LogFollower) -> None:
    assert not follower.open()
    assert follower.read_new() == []


def test_after_a_rotation_the_old_files_rest_comes_before_the_new_files_lines(follower: LogFollower) -> None:
    path = follower.path
    append(path, "one\n")
    assert follower.open()
    assert follower.read_new() == ["one"]
    append(path, "two\nthree")  # written, then the handler rolls over: the old file ends ...
    append(path, "\n")
    path.rename(path.with_name("daemon.log.1"))
    assert follower.read_new() == ["two", "three"]  # ... and nothing new has its name yet
    append(path, "four\n")
    assert follower.read_new() == ["four"]


def test_lines_written_between_two_reads_and_a_rotation_are_not_lost(follower: LogFollower) -> None:
    path = follower.path
    append(path, "one\n")
    assert follower.open()
    follower.read_new()
    append(path, "two\n")
    path.rename(path.with_name("daemon.log.1"))
    append(path, "three\n")
    assert follower.read_new() == ["two", "three"]


def test_a_truncated_file_is_read_again_from_its_start(follower: LogFollower) -> None:
    append(follower.path, "a long first line\nanother long line\n")
    assert follower.open()
    follower.read_new()
    follower.path.write_text("fresh\n")
    assert follower.read_new() == ["fresh"]


def test_the_daemons_own_rotating_handler_is_followed_line_by_line(follower: LogFollower) -> None:
    handler = PrivateRotatingFileHandler(follower.path, maxBytes=120, backupCount=2, delay=True)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.Logger("rotating")  # not registered: nothing of the process's logging changes
    logger.addHandler(handler)
    try:
        logger.info("the first line")
        assert follower.open()
        seen = follower.read_new()
        for i in range(40):
            logger.warning("line %d of the test", i)
            seen += follower.read_new()
    finally:
        handler.close()
    assert seen == ["the first line", *(f"line {i} of the test" for i in range(40))]
    assert follower.path.with_name("daemon.log.2").exists(), "it did rotate, more than once"
