"""Guard: the docs name only commands that exist, and every command is documented somewhere.

README.md, every docs/**/*.md and every skills/**/*.md are scanned for `bashgym <words>` (in code blocks and inline
code) and `/<group> <sub>` slash commands, including docs/discord.md's table of slash groups and their subcommands.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.bot.commands import GROUPS
from bashgym.cli.main import build_parser
from bashgym.cli.registry import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "skills").rglob("*.md"))]

WORD = re.compile(r"[a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)*")
# `bashgym` as a word of its own: not `bashgym.trainers`, `bashgym-0.1.whl` or `python/bashgym`.
CLI_MENTION = re.compile(r"(?<![\w./-])bashgym(?![\w.-])([^`\n]*)")
# `/group` or `/group sub|sub`, not a path segment (`/v1/notices`, `~/.ssh`, `/tmp/x`).
SLASH_MENTION = re.compile(
    r"(?<![\w/.~:<>{}$-])/([a-z][a-z0-9-]*)(?![\w/.{}-])(?:[ \t]+([a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)*))?"
)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
TABLE_ROW = re.compile(r"^\|\s*`/([a-z][a-z0-9-]*)`\s*\|(.*)\|\s*$")


# -- what exists ---------------------------------------------------------------------------------


def cli_commands() -> set[tuple[str, ...]]:
    build_parser()  # imports every command module, which fills the registry
    return set(COMMANDS)


def slash_commands() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for make in GROUPS:
        group = make()
        found[group.name] = {command.qualified_name.split(" ", 1)[1] for command in group.walk_commands()}
    return found


# -- what the docs mention -----------------------------------------------------------------------


def code_fragments(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every code-block line and every inline code span."""
    in_block = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            yield number, line
        else:
            for span in INLINE_CODE.findall(line):
                yield number, span


def resolve(
    path: tuple[str, ...], words: list[str], commands: set[tuple[str, ...]]
) -> tuple[set[tuple[str, ...]], list[str]]:
    """Walk `bashgym <words>` down the command tree: the commands it names, and the ones that do not exist.

    A word may be `a|b` alternatives; a command's own arguments and flags follow it and end the walk.
    """
    is_command = path in commands
    children = {c[len(path)] for c in commands if len(c) > len(path) and c[: len(path)] == path}
    if not words or not WORD.fullmatch(words[0]):
        return ({path} if is_command else set()), []
    alternatives = words[0].split("|")
    if is_command and not all(a in children for a in alternatives):
        return {path}, []  # the rest are the command's arguments
    named: set[tuple[str, ...]] = set()
    missing = [" ".join(("bashgym", *path, a)) for a in alternatives if a not in children]
    for alternative in alternatives:
        if alternative in children:
            more, unknown = resolve((*path, alternative), words[1:], commands)
            named |= more
            missing += unknown
    return named, missing


def cli_mentions(text: str, commands: set[tuple[str, ...]]) -> Iterator[tuple[int, set[tuple[str, ...]], list[str]]]:
    for number, fragment in code_fragments(text):
        for match in CLI_MENTION.finditer(fragment):
            words = match.group(1).split()
            if words:
                named, missing = resolve((), words, commands)
                yield number, named, missing


def slash_mentions(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line, group, subcommands) of every slash mention; an empty list names the group alone."""
    for number, line in enumerate(text.splitlines(), start=1):
        row = TABLE_ROW.match(line)
        if row:
            # docs/discord.md's table: `/group` | `sub` (notes), `sub`*, ...; code spans in notes are not subcommands.
            cells = re.sub(r"\([^)]*\)", "", row.group(2))
            yield number, row.group(1), INLINE_CODE.findall(cells)
    for number, fragment in code_fragments(text):
        if TABLE_ROW.match(text.splitlines()[number - 1]):
            continue
        for match in SLASH_MENTION.finditer(fragment):
            subs = match.group(2)
            yield number, match.group(1), subs.split("|") if subs else []


# -- the guard -----------------------------------------------------------------------------------


def scan() -> tuple[set[tuple[str, ...]], set[tuple[str, str]], list[str]]:
    commands = cli_commands()
    slash = slash_commands()
    cli_named: set[tuple[str, ...]] = set()
    slash_named: set[tuple[str, str]] = set()
    wrong: list[str] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        where = doc.relative_to(ROOT)
        for number, named, missing in cli_mentions(text, commands):
            cli_named |= named
            wrong += [f"{where}:{number}: `{m}` is not a command" for m in missing]
        for number, group, subs in slash_mentions(text):
            if group not in slash:
                # A lone `/word` is as likely a path or `/v1`; with a subcommand after it, it reads as a command.
                wrong += [f"{where}:{number}: `/{group} {sub}` is not a slash command" for sub in subs]
                continue
            for sub in subs:
                if sub in slash[group]:
                    slash_named.add((group, sub))
                else:
                    wrong.append(f"{where}:{number}: `/{group} {sub}` is not a slash command")
    return cli_named, slash_named, wrong


def test_docs_mention_only_commands_and_slash_commands_that_exist() -> None:
    _, _, wrong = scan()
    assert not wrong, "\n".join(wrong)


def test_every_cli_command_is_documented() -> None:
    named, _, _ = scan()
    undocumented = sorted(" ".join(("bashgym", *c)) for c in cli_commands() - named)
    assert not undocumented, f"mentioned in no doc (README.md, docs/, skills/): {undocumented}"


def test_every_slash_command_is_documented() -> None:
    _, named, _ = scan()
    every = {(group, sub) for group, subs in slash_commands().items() for sub in subs}
    undocumented = sorted(f"/{group} {sub}" for group, sub in every - named)
    assert not undocumented, f"mentioned in no doc (README.md, docs/, skills/): {undocumented}"


@pytest.mark.parametrize(
    ("mention", "named", "missing"),
    [
        ("bashgym campaign schedule set|show c", {("campaign", "schedule", x) for x in ("set", "show")}, []),
        ("bashgym runcard show|validate --project p", {("runcard", "show"), ("runcard", "validate")}, []),
        ("bashgym training status <run-id>", {("training", "status")}, []),
        ("bashgym curate receipt FILE", {("curate", "receipt")}, []),
        ("bashgym curate --root DIR", {("curate",)}, []),
        ("bashgym training launch --strategy sft", set(), ["bashgym training launch"]),
        ("bashgym campaign start|frobnicate c", {("campaign", "start")}, ["bashgym campaign frobnicate"]),
        ("bashgym frobnicate", set(), ["bashgym frobnicate"]),
        ("bashgym CLI", set(), []),
    ],
)  # fmt: skip
def test_mentions_resolve_through_alternatives_arguments_and_typos(
    mention: str, named: set[tuple[str, ...]], missing: list[str]
) -> None:
    found = list(cli_mentions(f"`{mention}`", cli_commands()))
    assert [(n, m) for _, n, m in found] == [(named, missing)]


def test_slash_mentions_are_found_in_code_and_in_the_table_but_not_in_paths() -> None:
    text = (
        "| `/run` | `start` (config with `tracking_context`), `stop`* |\n"
        "Run `/campaign schedule` here; `GET /v1/notices`, `--uds /tmp/bg.sock`, `~/.ssh/key`.\n"
        "```\n/runcard show|validate\n```\n"
    )
    assert [(g, s) for _, g, s in slash_mentions(text)] == [
        ("run", ["start", "stop"]),
        ("campaign", ["schedule"]),
        ("runcard", ["show", "validate"]),
    ]
