"""The completion walker: which candidates the word under the cursor gets, and how each shell reads them."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from bashgym.cli import completion
from bashgym.cli.completion_walk import FILES, Candidate, Want, fetch_ids, find_want, ids_of, line_flags, render
from bashgym.cli.main import build_parser, run
from bashgym.client.errors import EXIT_OK, EXIT_USAGE


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def offered(parser: argparse.ArgumentParser, line: str, shell: str = "bash") -> list[str]:
    """What bash is offered for `line`; a trailing space means the cursor is on a new, empty word."""
    words = line.split(" ")
    return render(find_want(parser, words, len(words) - 1), shell).splitlines()


def test_the_first_word_offers_every_top_level_command_and_not_the_hidden_one(parser: argparse.ArgumentParser) -> None:
    commands = offered(parser, "bashgym ")
    assert {"campaign", "completion", "ledger", "training", "project"} <= set(commands)
    assert not any(c.startswith("__") for c in commands)
    assert "__complete" not in parser.format_help()


def test_a_prefix_narrows_commands_at_every_depth(parser: argparse.ArgumentParser) -> None:
    assert offered(parser, "bashgym camp") == ["campaign"]
    assert offered(parser, "bashgym campaign l") == ["list"]
    assert offered(parser, "bashgym ledger con") == ["context"]
    assert offered(parser, "bashgym campaign schedule s") == ["set", "show"]


def test_zsh_and_fish_get_each_command_with_its_help(parser: argparse.ArgumentParser) -> None:
    assert offered(parser, "bashgym campaign l", "zsh") == ["list:the project's campaigns and their states"]
    assert offered(parser, "bashgym campaign l", "fish") == ["list\tthe project's campaigns and their states"]


def test_a_dash_offers_the_subcommands_flags_and_drops_ones_already_given(parser: argparse.ArgumentParser) -> None:
    flags = offered(parser, "bashgym campaign list -")
    assert {"--project", "--json", "--api", "--help"} <= set(flags)
    assert "--spec" not in flags  # campaign create's, not list's
    assert "--project" not in offered(parser, "bashgym campaign list --project p -")
    # A flag that may repeat stays on offer.
    assert "--run" in offered(parser, "bashgym ledger compare --project p --run a --")


def test_flags_come_next_when_no_positional_is_left(parser: argparse.ArgumentParser) -> None:
    assert "--project" in offered(parser, "bashgym ledger runs ")
    assert offered(parser, "bashgym ledger runs x") == []


def test_an_options_choices_are_offered_in_each_spelling(parser: argparse.ArgumentParser) -> None:
    assert offered(parser, "bashgym eval run --split ") == ["all", "holdout"]
    assert offered(parser, "bashgym eval run --split h") == ["holdout"]
    assert offered(parser, "bashgym eval run --split=h", "fish") == ["--split=holdout"]
    # bash splits `--split=h` at the `=`: it replaces `h`, or the `=` itself when nothing follows it.
    assert offered(parser, "bashgym eval run --split = h") == ["holdout"]
    assert offered(parser, "bashgym eval run --split =") == ["=all", "=holdout"]
    assert offered(parser, "bashgym completion ") == ["bash", "zsh", "fish"]


def test_a_value_already_given_moves_the_walk_on(parser: argparse.ArgumentParser) -> None:
    assert offered(parser, "bashgym eval run --split all --spl") == []  # used, so not offered again
    assert "--samples" in offered(parser, "bashgym eval run --split all --sa")
    assert offered(parser, "bashgym --json campaign l") == ["list"]


def test_a_path_argument_asks_the_shell_for_file_names(parser: argparse.ArgumentParser) -> None:
    assert offered(parser, "bashgym campaign create --spec ") == [FILES]
    assert offered(parser, "bashgym curate receipt ") == [FILES]
    assert offered(parser, "bashgym campaign create --spec=x", "zsh") == [FILES]


def existing_file(text: str) -> Path:
    return Path(text)


def test_a_type_function_that_returns_a_path_asks_for_files_and_abbreviations_follow_the_parser() -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--spec", type=existing_file)
    parser.add_argument("--limit", type=int)
    assert render(find_want(parser, ["tool", "--spec", ""], 2), "bash") == f"{FILES}\n"
    assert render(find_want(parser, ["tool", "--limit", ""], 2), "bash") == ""
    # argparse takes `--sp` for `--spec` unless abbreviations are off, as they are in bashgym's parser.
    assert find_want(parser, ["tool", "--sp", ""], 2).is_file
    parser.allow_abbrev = False
    assert not find_want(parser, ["tool", "--sp", ""], 2).is_file


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("bashgym ledger runs --project ", "projects"),
        ("bashgym project show ", "projects"),
        ("bashgym ledger run ", "runs"),
        ("bashgym ledger trend --run ", "runs"),
        ("bashgym ledger compare --run a --run ", "runs"),
        ("bashgym campaign show ", "campaigns"),
        ("bashgym budget show --campaign ", "campaigns"),
    ],
)
def test_id_arguments_ask_the_daemon_for_their_kind(parser: argparse.ArgumentParser, line: str, kind: str) -> None:
    words = line.split(" ")
    assert find_want(parser, words, len(words) - 1).ids == kind


def test_an_unknown_command_offers_nothing_past_it(parser: argparse.ArgumentParser) -> None:
    assert offered(parser, "bashgym nope ") == []
    assert offered(parser, "bashgym campaign nope -") == []


def test_the_project_and_daemon_flags_are_read_anywhere_on_the_line() -> None:
    words = ["bashgym", "ledger", "run", "", "--project", "nightly", "--api=http://h:1"]
    assert line_flags(words, 3) == {"project": "nightly", "api": "http://h:1"}
    assert line_flags(["bashgym", "ledger", "run", "--project", "=", "p", ""], 6) == {"project": "p"}
    # The word under the cursor is still being typed: it is no value yet.
    assert line_flags(["bashgym", "ledger", "run", "--project", "nigh"], 4) == {}


def test_runs_and_campaigns_without_a_project_ask_nothing() -> None:
    # No project on the line: nothing to list, and nothing is sent (an unreachable address would raise no error).
    assert fetch_ids("runs", {"api": "http://192.0.2.1:9"}, {}) == []
    assert fetch_ids("campaigns", {}, {}) == []


def test_ids_are_read_from_each_list_answer() -> None:
    assert ids_of("projects", [{"project_id": "nightly", "name": "Nightly"}]) == [Candidate("nightly", "Nightly")]
    assert ids_of("runs", [{"run_id": "run-1", "method": "sft", "status": "completed"}]) == [
        Candidate("run-1", "sft completed")
    ]
    campaigns = {"campaigns": [{"campaign_id": "q4", "status": "draft", "title": "Better bash"}]}
    assert ids_of("campaigns", campaigns) == [Candidate("q4", "draft: Better bash")]
    assert ids_of("campaigns", [{"campaign_id": "q4"}]) == []  # an answer of another shape gives nothing


def test_zsh_lines_escape_colons_and_every_shell_gets_one_line_of_help() -> None:
    want = Want(prefix="a", candidates=[Candidate("a:b", "two\nlines"), Candidate("zz", "filtered out")])
    assert render(want, "zsh") == "a\\:b:two lines\n"
    assert render(want, "fish") == "a:b\ttwo lines\n"
    assert render(want, "bash") == "a:b\n"


def test_the_hidden_command_answers_through_run_and_refuses_a_malformed_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["__complete", "bash", "2", "--", "bashgym", "campaign", "l"], {}) == EXIT_OK
    assert capsys.readouterr().out == "list\n"
    assert run(["__complete", "tcsh", "1", "--", "bashgym", ""], {}) == EXIT_USAGE
    assert run(["__complete", "bash", "9", "--", "bashgym", ""], {}) == EXIT_OK
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_script_says_how_to_install_it_and_asks_the_program(shell: str) -> None:
    script = completion.SCRIPTS[shell]
    assert f"bashgym completion {shell}" in script.splitlines()[1] + script.splitlines()[2]
    assert f"__complete {shell}" in script
