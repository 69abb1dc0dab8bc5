"""The command index (cli/commands.json) is the real parser's, and the parser rebuilt from it gives the same help
for the program, every group and every command, and the same completion for every command, option and option
value."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.cli import command_index
from bashgym.cli.completion_walk import find_want, render
from bashgym.cli.main import build_parser
from bashgym.client.errors import EXIT_OK, EXIT_USAGE

PROJECT = "nightly"


@pytest.fixture(scope="module", params=[None, PROJECT], ids=["no default project", "default project"])
def parsers(request: pytest.FixtureRequest) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    index = command_index.load()
    assert index is not None
    return build_parser(request.param), command_index.skeleton(index, request.param)


@pytest.fixture
def environ(parsers: Any, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment of the parsers' default project (a home without bashgym.toml where there is none)."""
    project = request.node.callspec.params["parsers"]
    return {"BASHGYM_PROJECT": project} if project else {"BASHGYM_HOME": str(tmp_path)}


Node = tuple[tuple[str, ...], argparse.ArgumentParser]


def nodes(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Node]:
    """Every parser under `parser` with the words that reach it, the program's own first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in action.choices:
                yield from nodes(action.choices[name], (*path, name))


def test_the_index_on_disk_is_the_real_parsers() -> None:
    # A command or option added without `make cli-index` fails here, before help or TAB can go stale.
    assert command_index.load() == command_index.describe(build_parser()), "run `make cli-index` and commit the file"


@pytest.mark.parametrize("columns", ["80", "200"])
def test_the_program_and_every_group_and_command_print_the_same_help_from_the_index(
    parsers: tuple[argparse.ArgumentParser, argparse.ArgumentParser],
    environ: dict[str, str],
    columns: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    real, _ = parsers
    every = list(nodes(real))
    assert len(every) > 100
    for path, node in every:
        assert command_index.quick_answer([*path, "--help"], environ) == EXIT_OK
        assert capsys.readouterr().out == node.format_help(), path
    assert command_index.quick_answer([], environ) == EXIT_USAGE  # bare `bashgym`: the help, as a usage error
    assert capsys.readouterr().out == real.format_help()


def test_a_line_with_values_or_unknown_words_is_left_to_the_full_cli() -> None:
    for argv in (["run", "show", "r1", "--help"], ["nope", "--help"], ["run", "list"], ["--json", "run", "--help"]):
        assert command_index.quick_answer(argv, {}) is None, argv


def partial_lines(path: tuple[str, ...], node: argparse.ArgumentParser) -> Iterator[list[str]]:
    """Lines a user may TAB on at this command: its name half typed, a new word, dashes, each option's values."""
    words = ["bashgym", *path]
    if path:
        yield [*words[:-1], path[-1][:1]]
    yield [*words, ""]
    yield [*words, "-"]
    yield [*words, "--"]
    yield [*words, "x", ""]
    yield [*words, "x", "y", "-"]
    for action in node._actions:
        for name in action.option_strings:
            choices = [str(c) for c in action.choices or []]
            yield [*words, name, ""]
            yield [*words, name, "=", ""]
            yield [*words, f"{name}="]
            yield [*words, name, "x", ""]
            yield [*words, name, "x", "-"]
            yield [*words, name[:3]]
            if choices:
                yield [*words, name, choices[0][:1]]
                yield [*words, f"{name}={choices[-1][:1]}"]


def test_every_partial_line_completes_the_same_from_the_index(
    parsers: tuple[argparse.ArgumentParser, argparse.ArgumentParser],
) -> None:
    real, from_index = parsers
    count = 0
    for path, node in nodes(real):
        for words in partial_lines(path, node):
            cword = len(words) - 1
            want, answer = find_want(real, words, cword), find_want(from_index, words, cword)
            assert answer == want, words
            for shell in ("bash", "zsh"):
                assert render(answer, shell) == render(want, shell), (words, shell)
            count += 1
    assert count > 2000
