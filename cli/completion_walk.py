"""What the hidden `bashgym __complete <shell> <index> -- <words...>` answers (the scripts of cli/completion.py ask
it): names and options from a parser, project, run and campaign ids from the daemon. It imports no command module,
so the console script answers a TAB from the command index (cli/command_index.py) without building the CLI."""

from __future__ import annotations

import argparse
import sys
from pathlib import PurePath
from typing import TYPE_CHECKING, NamedTuple

from bashgym.client.errors import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from collections.abc import Iterator

SHELLS = ("bash", "zsh", "fish")
# The whole answer when the word is a file name: the script then runs the shell's own file completion.
FILES = "__files__"
# Tab must answer at once: a daemon that takes longer gives no ids, never a hung prompt.
FETCH_BUDGET_S = 1.0
# Arguments (by dest) whose values are ids the daemon holds, and which list holds them.
ID_SOURCES = {
    "project": "projects",
    "dataset_project": "projects",
    "run": "runs",
    "runs": "runs",
    "campaign": "campaigns",
}
# Flags read off the whole line, wherever the cursor is: where to ask, as whom, and which project's ids.
LINE_FLAGS = ("--project", "--api", "--token", "--workspace")


# NamedTuple and a plain class, not dataclasses: importing dataclasses (inspect, ast) costs a TAB ~10 ms.
class Candidate(NamedTuple):
    value: str
    help: str = ""


class Want:
    """What the word under the cursor can be: fixed candidates, ids of one kind, or a file name."""

    def __init__(
        self,
        prefix: str = "",  # what is typed of the value so far
        lead: str = "",  # written before each value: `--project=` when the word holds the flag too
        candidates: list[Candidate] | None = None,
        ids: str | None = None,  # "projects", "runs" or "campaigns"
        is_file: bool = False,
    ) -> None:
        self.prefix, self.lead, self.candidates = prefix, lead, candidates or []
        self.ids, self.is_file = ids, is_file

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Want) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Want({vars(self)})"


# -- the walk over the parser: pure ----------------------------------------------------------------


def find_want(parser: argparse.ArgumentParser, words: list[str], cword: int) -> Want:
    """Follow `words` (the program first) down the parser to what `words[cword]` can be."""
    walk = _Walk(parser)
    for word in words[1:cword]:
        walk.take(word)
    current = words[cword] if cword < len(words) else ""
    return walk.want(current)


class _Walk:
    """The parser reached, the positional slot next, and the flag still waiting for its values."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser
        self.slot = 0
        self.slot_values = 0
        self.used: set[argparse.Action] = set()
        self.waiting: argparse.Action | None = None  # a flag whose values come next
        self.values_left: int | None = 0  # None: values until the next flag (nargs * and +)
        self.just_opened = False  # the last word was the flag: bash splits `--project=x` into three words
        self.is_lost = False  # a word named no command: nothing is offered past it

    def take(self, word: str) -> None:
        just_opened, self.just_opened = self.just_opened, False
        if self.waiting is not None:
            if word == "=" and just_opened:
                self.just_opened = True
                return
            if self.values_left is not None or not _is_flag(word):
                self._take_value()
                return
            self.waiting = None
        if _is_flag(word):
            self._take_flag(word)
        else:
            self._take_positional(word)

    def _take_value(self) -> None:
        if self.values_left is not None:
            self.values_left -= 1
            if self.values_left <= 0:
                self.waiting = None

    def _take_flag(self, word: str) -> None:
        name, has_value, _ = word.partition("=")
        action = _flag(self.parser, name)
        if action is None:
            return
        self.used.add(action)
        if action.nargs == 0 or has_value:
            return
        self.waiting, self.values_left, self.just_opened = action, _arity(action), True

    def _take_positional(self, word: str) -> None:
        action = self._slot_action()
        if action is None:
            return
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(word)
            if sub is None:
                self.is_lost = True
                return
            self.parser, self.slot, self.slot_values, self.used = sub, 0, 0, set()
            return
        self.slot_values += 1
        arity = _arity(action)
        if arity is not None and self.slot_values >= arity:
            self.slot, self.slot_values = self.slot + 1, 0

    def _slot_action(self) -> argparse.Action | None:
        positionals = [a for a in self.parser._actions if not a.option_strings]
        return positionals[self.slot] if self.slot < len(positionals) else None

    def want(self, current: str) -> Want:
        if self.is_lost:
            return Want()
        if self.waiting is not None and (self.values_left is not None or not _is_flag(current)):
            if current == "=" and self.just_opened:
                return values_of(self.waiting, prefix="", lead="=")
            return values_of(self.waiting, prefix=current)
        if current.startswith("--") and "=" in current:
            name, _, value = current.partition("=")
            action = _flag(self.parser, name)
            return values_of(action, prefix=value, lead=f"{name}=") if action and action.nargs != 0 else Want()
        if current.startswith("-"):  # `-` alone too: it asks for the flags
            return Want(prefix=current, candidates=list(_flags(self.parser, self.used)))
        action = self._slot_action()
        if isinstance(action, argparse._SubParsersAction):
            return Want(prefix=current, candidates=list(_commands(action)))
        if action is not None:
            return values_of(action, prefix=current)
        # Nothing positional is left: the command's flags are what can come next.
        return Want(prefix=current, candidates=list(_flags(self.parser, self.used)) if not current else [])


def values_of(action: argparse.Action, *, prefix: str, lead: str = "") -> Want:
    """What a value of `action` can be: its choices, a file, or ids the daemon holds."""
    want = Want(prefix=prefix, lead=lead)
    if action.choices is not None:
        want.candidates = [Candidate(str(choice)) for choice in action.choices]
    elif names_a_path(action.type):
        want.is_file = True
    else:
        want.ids = ID_SOURCES.get(action.dest)
    return want


def names_a_path(kind: object) -> bool:
    """Is the argument a path: `type=Path`, or a checking type function that returns one (`input_file`)?"""
    if isinstance(kind, type):
        return issubclass(kind, PurePath)
    if not callable(kind):
        return False
    from typing import get_type_hints  # here: only the real parser's types need it, not the index's

    try:
        returns = get_type_hints(kind).get("return")
    except (NameError, TypeError):  # an annotation that does not resolve says nothing about paths
        return False
    return isinstance(returns, type) and issubclass(returns, PurePath)


def _is_flag(word: str) -> bool:
    return word.startswith("-") and word != "-"


def _arity(action: argparse.Action) -> int | None:
    """How many values the action takes; None for as many as follow (`*`, `+`)."""
    if action.nargs is None or action.nargs == "?":
        return 1
    return action.nargs if isinstance(action.nargs, int) else None


def _flag(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    """The action a flag names, exactly or, where the parser allows abbreviations, by a unique prefix."""
    actions = parser._option_string_actions
    if name in actions or not parser.allow_abbrev:
        return actions.get(name)
    matches = {actions[s] for s in actions if s.startswith(name) and name.startswith("--")}
    return matches.pop() if len(matches) == 1 else None


def _flags(parser: argparse.ArgumentParser, used: set[argparse.Action]) -> Iterator[Candidate]:
    repeatable = (argparse._AppendAction, argparse._CountAction, argparse._ExtendAction)
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if action in used and not isinstance(action, repeatable):
            continue
        names = [s for s in action.option_strings if s.startswith("--")] or action.option_strings
        for name in names:
            yield Candidate(name, action.help or "")


def _commands(action: argparse._SubParsersAction[argparse.ArgumentParser]) -> Iterator[Candidate]:
    # A command's help is a %-template for argparse (cli/main.py escapes `%`): shown as the help prints it.
    helps = {choice.dest: (choice.help or "").replace("%%", "%") for choice in action._choices_actions}
    for name in action.choices:
        yield Candidate(name, helps.get(name, ""))


def line_flags(words: list[str], cword: int) -> dict[str, str]:
    """The values of LINE_FLAGS typed anywhere on the line but under the cursor, keyed without dashes."""
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        name, has_value, value = word.partition("=")
        if i == cword or name not in LINE_FLAGS:
            continue
        if not has_value:
            j = i + 2 if words[i + 1 : i + 2] == ["="] else i + 1  # bash's `--project = x`
            value = words[j] if j < len(words) and j != cword else ""
        if value:
            found[name.removeprefix("--")] = value
    return found


# -- the answer, one line per candidate --------------------------------------------------------------


def render(want: Want, shell: str) -> str:
    """The lines a completion script reads: values for bash, with their help for zsh and fish."""
    if want.is_file:
        return FILES + "\n"
    lines = []
    for candidate in want.candidates:
        if not candidate.value.startswith(want.prefix):
            continue
        value = want.lead + candidate.value
        description = " ".join(candidate.help.split())
        match shell:
            case "zsh":
                value = value.replace("\\", "\\\\").replace(":", "\\:")
                lines.append(f"{value}:{description}" if description else value)
            case "fish":
                lines.append(f"{value}\t{description}" if description else value)
            case _:
                lines.append(value)
    return "".join(f"{line}\n" for line in lines)


def complete(argv: list[str], environ: dict[str, str], parser: argparse.ArgumentParser) -> int:
    """`bashgym __complete <shell> <index of the current word> -- <words...>`: print the candidates."""
    if len(argv) < 3 or argv[0] not in SHELLS or not argv[1].isdigit() or argv[2] != "--":
        sys.stderr.write("usage: bashgym __complete bash|zsh|fish <index of the current word> -- <words...>\n")
        return EXIT_USAGE
    shell, cword, words = argv[0], int(argv[1]), argv[3:]
    if not 1 <= cword <= len(words):
        return EXIT_OK
    want = find_want(parser, words, cword)
    if want.ids is not None:
        want.candidates = fetch_ids(want.ids, line_flags(words, cword), environ)
    sys.stdout.write(render(want, shell))
    return EXIT_OK


# -- ids from the daemon -------------------------------------------------------------------------------


def fetch_ids(kind: str, line: dict[str, str], environ: dict[str, str]) -> list[Candidate]:
    """The ids of `kind` the daemon lists, or none when it is slow, down or refuses."""
    if kind != "projects" and "project" not in line:
        return []  # runs and campaigns are listed per project, and no project is on the line yet
    import asyncio  # here: ~15 ms that a TAB without ids does not pay

    try:
        return asyncio.run(_fetch_within_budget(kind, line, environ))
    except Exception:  # a completion prints nothing on failure: a traceback would land in the user's prompt
        return []


async def _fetch_within_budget(kind: str, line: dict[str, str], environ: dict[str, str]) -> list[Candidate]:
    import asyncio
    from urllib.parse import quote

    # Imported here: the settings and the client are what a TAB without ids must not pay for.
    from bashgym.cli.registry import Ctx
    from bashgym.daemon.settings import load_settings

    args = argparse.Namespace(api=line.get("api"), token=line.get("token"))
    ctx = Ctx(args=args, settings=load_settings(environ), environ=environ)
    project = quote(line.get("project", ""), safe="")
    path, params = {
        "projects": ("/v1/projects", {}),
        "runs": (f"/v1/projects/{project}/runs", {"limit": 1000}),
        "campaigns": (f"/v1/projects/{project}/campaigns", {}),
    }[kind]
    try:
        async with asyncio.timeout(FETCH_BUDGET_S):
            body = await ctx.client.request(
                "GET", path, params={"workspace": line.get("workspace"), **params}, timeout_s=FETCH_BUDGET_S
            )
    finally:
        if ctx._client is not None:
            await ctx._client.__aexit__(None, None, None)
    return ids_of(kind, body)


def ids_of(kind: str, body: object) -> list[Candidate]:
    """Candidates from a list answer: `[{project_id, name}]`, `[{run_id, ...}]`, `{"campaigns": [...]}`."""
    match kind, body:
        case "projects", list(rows):
            return [Candidate(str(r["project_id"]), str(r.get("name", ""))) for r in rows]
        case "runs", list(rows):
            return [Candidate(str(r["run_id"]), f"{r.get('method', '')} {r.get('status', '')}") for r in rows]
        case "campaigns", {"campaigns": list(rows)}:
            return [Candidate(str(r["campaign_id"]), f"{r.get('status', '')}: {r.get('title', '')}") for r in rows]
    return []
