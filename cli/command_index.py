"""The command index: every command path, its help, its options and the module that registers it, as data
(cli/commands.json), so the console script answers `bashgym --help`, `bashgym <command...> --help` and a TAB of
completion without importing the command modules (0.5 s of imports), and a command imports only its own module.
`make cli-index` writes it from the real parser; tests/unit/cli/test_command_index.py rebuilds it and compares, and
compares the help and completion answers of both parsers, so it cannot drift."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bashgym.cli.completion_walk import complete, names_a_path
from bashgym.cli.usage import Parser
from bashgym.client.errors import EXIT_OK, EXIT_USAGE

INDEX_PATH = Path(__file__).with_name("commands.json")
HELP_FLAGS = ("--help", "-h")
# The parser-level settings help formats; the rest of a parser is its actions.
_FORMATTERS: dict[str, type[argparse.HelpFormatter]] = {
    "HelpFormatter": argparse.HelpFormatter,
    "RawDescriptionHelpFormatter": argparse.RawDescriptionHelpFormatter,
}


# -- the index, from a parser ----------------------------------------------------------------------


def describe(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """A parser as data: what its help shows and what completion walks, its subcommands nested; a command's node
    names the module that registers it (`path` is the words that reach `parser`)."""
    from bashgym.cli.registry import MODULE_OF  # here: the quick answers never describe a parser

    is_command = "handler" in parser._defaults
    return {
        "prog": parser.prog,
        "description": parser.description,
        "epilog": parser.epilog,
        "formatter": parser.formatter_class.__name__,  # type: ignore[attr-defined]
        "is_command": is_command,
        "module": MODULE_OF[path] if is_command else None,
        "actions": [_action(action, path) for action in parser._actions],
        # Each group of options of which one may (or must) be named: the usage line shows `(--a A | --b B)`.
        "exclusive": [
            {"required": group.required, "actions": [parser._actions.index(a) for a in group._group_actions]}
            for group in parser._mutually_exclusive_groups
        ],
    }


def _action(action: argparse.Action, path: tuple[str, ...]) -> dict[str, Any]:
    described: dict[str, Any] = {
        "options": list(action.option_strings),
        "dest": action.dest,
        "kind": _kind(action),
        "help": action.help,
    }
    if isinstance(action, argparse._SubParsersAction):
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        described.update(metavar=action.metavar, required=action.required)
        described["commands"] = {
            name: {"help": helps.get(name), **describe(sub, (*path, name))} for name, sub in action.choices.items()
        }
        return described
    described.update(
        nargs=action.nargs,
        choices=None if action.choices is None else [str(choice) for choice in action.choices],
        metavar=list(action.metavar) if isinstance(action.metavar, tuple) else action.metavar,
        required=action.required,
        is_path=names_a_path(action.type),
    )
    return described


def _kind(action: argparse.Action) -> str:
    """What the skeleton rebuilds: the classes completion tells apart (repeatable flags), the rest by arity."""
    kinds: list[tuple[type[argparse.Action], str]] = [
        (argparse._SubParsersAction, "parsers"),
        (argparse._HelpAction, "help"),
        (argparse._VersionAction, "version"),
        (argparse._CountAction, "count"),
        (argparse._ExtendAction, "extend"),  # before append: an extend action is an append action
        (argparse._AppendAction, "append"),
        (argparse.BooleanOptionalAction, "boolean"),  # `--x | --no-x` in the usage line
    ]
    for cls, name in kinds:
        if isinstance(action, cls):
            return name
    return "flag" if action.nargs == 0 else "store"


def write(parser: argparse.ArgumentParser, path: Path = INDEX_PATH) -> None:
    path.write_text(json.dumps(describe(parser), indent=1, ensure_ascii=False) + "\n")


def load(path: Path | None = None) -> dict[str, Any] | None:
    """The index (INDEX_PATH's), or None where it is missing or unreadable (the console script then builds the real
    parser)."""
    try:
        index = json.loads((path or INDEX_PATH).read_text())
    except (OSError, ValueError):
        return None
    return index if isinstance(index, dict) else None


# -- a parser again, from the index ----------------------------------------------------------------


def skeleton(node: dict[str, Any], default_project: str | None = None) -> argparse.ArgumentParser:
    """A parser with the index's commands and options, enough for their help and for completion; its commands have
    no handlers."""
    return _sub_parser(node, default_project)


def _fill(parser: argparse.ArgumentParser, node: dict[str, Any], default_project: str | None) -> None:
    exclusive = [parser.add_mutually_exclusive_group(required=group["required"]) for group in node["exclusive"]]
    group_of = {index: exclusive[g] for g, group in enumerate(node["exclusive"]) for index in group["actions"]}
    for index, action in enumerate(node["actions"]):
        if action["kind"] == "parsers":
            _add_commands(parser, action, default_project)
        else:
            _add_action(group_of.get(index, parser), action)
    if node["is_command"]:
        parser.set_defaults(handler=None)  # a command, not a group: the console script hands it to the real CLI
        if default_project:
            apply_default_project(parser, default_project)


def _add_commands(parser: argparse.ArgumentParser, action: dict[str, Any], default_project: str | None) -> None:
    group = parser.add_subparsers(dest=action["dest"], metavar=action["metavar"], required=action["required"])
    nodes: dict[str, dict[str, Any]] = action["commands"]
    # A TAB or a group's help reads one path of the tree: the ~200 other parsers would cost ~40 ms to build.
    group._name_parser_map = group.choices = _LazyCommands(nodes, lambda node: _sub_parser(node, default_project))
    for name, node in nodes.items():
        if node["help"] is not None:
            group._choices_actions.append(group._ChoicesPseudoAction(name, (), node["help"]))


def _sub_parser(node: dict[str, Any], default_project: str | None) -> argparse.ArgumentParser:
    parser = Parser(
        prog=node["prog"],
        description=node["description"],
        epilog=node["epilog"],
        formatter_class=_FORMATTERS.get(node["formatter"], argparse.HelpFormatter),
        add_help=False,
    )
    _fill(parser, node, default_project)
    return parser


class _LazyCommands(dict[str, Any]):
    """A subcommand's name -> its parser, built from its index node when first asked for."""

    def __init__(self, nodes: dict[str, dict[str, Any]], build: Any) -> None:
        super().__init__(dict.fromkeys(nodes))
        self._nodes, self._build = nodes, build

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        parser = super().__getitem__(name)
        if parser is None:
            parser = self._build(self._nodes[name])
            super().__setitem__(name, parser)
        return parser  # type: ignore[no-any-return]

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default  # noqa: SIM401 (self.get is this method)

    def values(self) -> Any:
        return [self[name] for name in self]

    def items(self) -> Any:
        return [(name, self[name]) for name in self]


def _add_action(parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, action: dict[str, Any]) -> None:
    names, kind = action["options"], action["kind"]
    if kind in ("help", "version"):
        parser.add_argument(*names, action=kind, help=action["help"])
        return
    settings: dict[str, Any] = {"dest": action["dest"], "required": action["required"], "help": action["help"]}
    if kind in ("count", "flag"):
        parser.add_argument(*names, action={"count": "count", "flag": "store_true"}[kind], **settings)
        return
    if kind == "boolean":  # it makes each --no- spelling itself
        given = [name for name in names if not name.startswith("--no-")]
        parser.add_argument(*given, action=argparse.BooleanOptionalAction, **settings)
        return
    metavar = action["metavar"]
    options: dict[str, Any] = {
        "action": kind,
        "nargs": action["nargs"],
        "choices": action["choices"],
        "help": action["help"],
        "metavar": tuple(metavar) if isinstance(metavar, list) else metavar,
        "type": Path if action["is_path"] else None,
    }
    if names:
        parser.add_argument(*names, dest=action["dest"], required=action["required"], **options)
    else:
        parser.add_argument(action["dest"], **options)


# -- the module of the command a line runs ----------------------------------------------------------


def command_modules(index: dict[str, Any], argv: list[str]) -> dict[tuple[str, ...], str] | None:
    """The command `argv` runs and every command under it (`curate` and `curate receipt`), each with the module
    that registers it, or None where the index cannot tell that argparse will reach a command: a group, an unknown
    word, a help flag, an option other than a group's own flags and single values. The CLI then imports every module
    (a usage error lists every command, as before). Words are taken as argparse takes them (no abbreviations)."""
    node = index
    path: tuple[str, ...] = ()
    words = iter(argv)
    for word in words:
        if word.startswith("-"):
            action = next((a for a in node["actions"] if word.split("=", 1)[0] in a["options"]), None)
            if action is None or (action["kind"], action["nargs"]) not in (("flag", 0), ("store", None)):
                return None
            if action["kind"] == "flag" and "=" in word:
                return None
            if action["kind"] == "store" and "=" not in word:
                value = next(words, None)
                if value is None or value.startswith("-"):
                    return None
            continue
        commands = _commands_of(node)
        if word not in commands:
            return None
        node, path = commands[word], (*path, word)
        if node["is_command"]:
            return dict(_modules_under(node, path))
    return None


def _commands_of(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return next((a["commands"] for a in node["actions"] if a["kind"] == "parsers"), {})


def _modules_under(node: dict[str, Any], path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    if node["is_command"]:
        yield path, node["module"]
    for name, sub in _commands_of(node).items():
        yield from _modules_under(sub, (*path, name))


# -- the default project: read before any parser is built --------------------------------------------


def default_project(environ: dict[str, str]) -> str | None:
    """BASHGYM_PROJECT, else `project` in $BASHGYM_HOME/bashgym.toml (`bashgym project use P` writes it). Read
    before the settings, which a parser does not wait for; a broken file is reported when they load."""
    if environ.get("BASHGYM_PROJECT"):
        return environ["BASHGYM_PROJECT"]
    home = Path(environ.get("BASHGYM_HOME") or Path.home() / ".bashgym")
    import tomllib  # here: a TAB where BASHGYM_PROJECT is set does not pay for it

    try:
        value = tomllib.loads((home / "bashgym.toml").read_text()).get("project")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return value if isinstance(value, str) and value else None


def apply_default_project(parser: argparse.ArgumentParser, project: str) -> None:
    """A required --project becomes optional, defaulting to `project` (an optional one keeps its own meaning)."""
    for action in parser._actions:
        if "--project" in action.option_strings and action.required:
            action.required, action.default = False, project
            action.help = f"{action.help} (default {project}: BASHGYM_PROJECT or bashgym project use)"


# -- the console script's quick answers ---------------------------------------------------------------


def quick_answer(argv: list[str], environ: dict[str, str]) -> int | None:
    """The exit code of a line answered from the index (a TAB, the help of the program, a group or a command), or
    None for a line the real CLI must run."""
    is_completion = argv[:1] == ["__complete"]
    is_help = argv[-1:] and argv[-1] in HELP_FLAGS
    if not (argv == [] or is_completion or is_help):
        return None
    index = load()
    if index is None:
        return None
    parser = skeleton(index, default_project(environ))
    if is_completion:
        return complete(argv[1:], environ, parser)
    named = _named(parser, argv[:-1])
    if named is None:
        return None
    named.print_help()
    return EXIT_OK if argv else EXIT_USAGE  # bare `bashgym` prints the help as a usage error, as main does


def _named(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser | None:
    """The group or command that `words` name from the top (all of them command names), or None for anything
    else (a value, an option): the real CLI answers those."""
    for word in words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            return None
        parser = sub.choices[word]
    return parser
