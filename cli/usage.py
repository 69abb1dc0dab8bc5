"""Usage errors that name the mistake: an unknown option with the closest real one, a mistyped command with
"did you mean", the usage of the command that was typed (not the top level's), and no silent abbreviations."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from bashgym.client.errors import EXIT_USAGE, BashGymError


class UsageError(BashGymError):
    """The command line itself is wrong (an unknown option, a missing file): exit 2 with the command's usage."""

    code = "usage_error"
    status = 400

    def __init__(self, message: str, *, parser: argparse.ArgumentParser | None = None, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (`--proj` is not `--project`), whose errors are raised, not printed, so the
    one place that reports errors says them with the right command's usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(_sentence(message), parser=self)


def input_file(text: str) -> Path:
    """An argparse type for a file the user names: a missing one is a usage error, said before anything runs."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def check_words(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Walk the words as argparse will, and stop at the first that names nothing: an unknown option (with the
    closest real one) or an unknown command (with "did you mean"). argparse itself reports a missing required
    option first, which hides the typo that caused it (`--projet demo` → "--project is required")."""
    current, path = parser, [parser.prog]
    words = iter(argv)
    for word in words:
        if word == "--":
            return
        if word.startswith("-") and len(word) > 1 and not _number(word):
            name = word.split("=", 1)[0]
            action = current._option_string_actions.get(name)
            if action is None and not name.startswith("--") and len(name) > 2:
                action = current._option_string_actions.get(name[:2])  # -n5, short option with its value
                if action is not None:
                    continue
            if action is None:
                known = list(current._option_string_actions)
                raise UsageError(f"unknown option {name}{_closest(name, known)}", parser=current)
            if "=" not in word and action.nargs != 0 and not isinstance(action, argparse._HelpAction):
                next(words, None)
            continue
        commands = _subcommands(current)
        if commands is None:
            continue  # a positional value of the command
        if word not in commands:
            if _takes_positionals(current):
                continue
            where = " ".join(path)
            raise UsageError(f"unknown command '{word}' for '{where}'{_closest(word, list(commands))}", parser=current)
        current = commands[word]
        path.append(word)


def report(exc: UsageError, argv: list[str]) -> int:
    """Print a usage error: the command's usage line, the error, and how to see the command's help."""
    parser = exc.parser
    if "--json" in argv:
        sys.stdout.write(json.dumps({"error": {"code": exc.code, "message": exc.message, "hint": exc.hint}}) + "\n")
    if parser is not None:
        sys.stderr.write(parser.format_usage())
    sys.stderr.write(f"error: {exc.message}\n")
    where = parser.prog if parser is not None else "bashgym"
    lists = "its commands" if parser is None or _subcommands(parser) is not None else "its options"
    sys.stderr.write(f"hint: {exc.hint or f'{where} --help lists {lists}.'}\n")
    return EXIT_USAGE


def _closest(word: str, known: list[str]) -> str:
    """The end of the sentence: the closest known word as a question, or a full stop."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else "."


def _sentence(message: str) -> str:
    """argparse's messages, as a sentence: `the following arguments are required: --run` ends with a full stop."""
    return message if message.endswith((".", "?", "!")) else f"{message}."


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def _takes_positionals(parser: argparse.ArgumentParser) -> bool:
    return any(
        not action.option_strings and not isinstance(action, argparse._SubParsersAction) for action in parser._actions
    )


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
