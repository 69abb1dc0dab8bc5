"""The command index (cli/commands.json) is the real parser's, and the parser rebuilt from it gives the same help
for the program, every group and every command, and the same completion for every command, option and option
value. A command line imports only the module the index names for its command, which registers it, and gets the
same parse and the same usage errors as with every module imported; a stale index falls back to all of them."""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.cli import command_index, main
from bashgym.cli.completion_walk import find_want, render
from bashgym.cli.main import COMMAND_MODULES, build_parser, registered_parser
from bashgym.cli.registry import COMMANDS, MODULE_OF
from bashgym.cli.usage import UsageError, check_words
from bashgym.cli.usage import report as report_usage
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


# -- a command imports its own module ----------------------------------------------------------------


def test_importing_the_module_the_index_names_registers_each_command() -> None:
    build_parser()
    saved, saved_modules = dict(COMMANDS), dict(MODULE_OF)
    registered_by: dict[tuple[str, ...], str] = {}
    try:
        for module in COMMAND_MODULES:
            before = dict(COMMANDS)
            # Its own code run again (its imports are done): the commands that importing it registers.
            spec = importlib.util.find_spec(module)
            assert spec is not None and spec.loader is not None
            exec(spec.loader.get_code(module), {"__name__": module, "__file__": spec.origin})  # type: ignore[attr-defined]
            registered_by.update({p: module for p, entry in COMMANDS.items() if before.get(p) is not entry})
    finally:
        COMMANDS.clear(), COMMANDS.update(saved), MODULE_OF.clear(), MODULE_OF.update(saved_modules)
    index = command_index.load()
    assert index is not None
    in_index = dict(command_index._modules_under(index, ()))
    assert registered_by == in_index == MODULE_OF
    assert len(in_index) > 100


def lines(path: tuple[str, ...]) -> Iterator[list[str]]:
    """Lines that run the command at `path`, right or wrong, with the global options before and after it."""
    yield [*path]
    yield [*path, "--json"]
    yield ["--json", *path, "--bogus"]
    yield ["--api", "http://127.0.0.1:9", *path, "x", "y"]
    yield [*path, "--project", "p", "--projet"]
    yield ["--workspace=w", *path, "--", "-x"]


def outcome(parser: argparse.ArgumentParser, argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    """What the user gets from `argv` before the handler runs: the parsed arguments, or the usage error's text."""
    try:
        check_words(parser, argv)
        return vars(parser.parse_args(argv))
    except UsageError as exc:
        code = report_usage(exc, argv)
        return code, capsys.readouterr()


def test_a_parser_of_only_the_commands_modules_parses_and_refuses_as_the_whole_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    index = command_index.load()
    assert index is not None
    whole = build_parser(PROJECT)
    every = dict(COMMANDS)
    compared = 0
    for path in every:
        for argv in lines(path):
            wanted = command_index.command_modules(index, argv)
            assert wanted is not None and wanted[path] == MODULE_OF[path], argv
            modules = set(wanted.values())
            only = {p: entry for p, entry in every.items() if MODULE_OF[p] in modules}
            monkeypatch.setattr(main, "COMMANDS", only)
            assert outcome(registered_parser(PROJECT), argv, capsys) == outcome(whole, argv, capsys), argv
            compared += 1
    assert compared > 600


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["project"],  # a group: its usage error lists its commands
        ["projet", "list"],
        ["project", "lst"],
        ["project", "--help", "list"],
        ["--version", "project", "list"],
        ["--api", "project", "list"],  # argparse takes `project` as the URL
        ["--api", "--json", "project", "list"],
        ["--json=1", "project", "list"],
        ["--", "project", "list"],
        ["-x", "project", "list"],
    ],
)
def test_a_line_that_names_no_command_imports_every_module(argv: list[str]) -> None:
    index = command_index.load()
    assert index is not None
    assert command_index.command_modules(index, argv) is None


def test_a_stale_index_imports_every_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    imported: list[str] = []
    monkeypatch.setattr(main.importlib, "import_module", imported.append)
    main.import_commands(["project", "list", "--json"])
    assert imported == ["bashgym.cli.lineage"]

    index = command_index.load()
    assert index is not None
    project = index["actions"][-1]["commands"]["project"]["actions"][-1]["commands"]
    for module in ("bashgym.cli.auth", "os"):  # the command moved, or a module that is no command module
        project["list"]["module"] = module
        stale = tmp_path / "commands.json"
        stale.write_text(json.dumps(index))
        monkeypatch.setattr(command_index, "INDEX_PATH", stale)
        imported.clear()
        main.import_commands(["project", "list", "--json"])
        assert "os" not in imported
        assert imported[-len(COMMAND_MODULES) :] == list(COMMAND_MODULES), module
