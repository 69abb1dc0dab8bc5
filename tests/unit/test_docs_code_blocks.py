"""Every fenced code block of README.md and docs/**/*.md is checked by the rule of its language tag.

Issue 52: README's `ledger context` example had gone stale, and nothing ran or parsed the docs' commands. Here each
`bashgym ...` command of a shell block parses against the CLI's own parser (the command exists, its options and
their values are valid), each `make X` names a Makefile target, JSON and TOML blocks load, Python blocks compile,
and a block a test runs as written names that test. A block with no tag, or a tag without a rule, fails: give it
one (`text` for output and diagrams).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import pytest
from bashgym.cli.main import build_parser
from bashgym.cli.usage import UsageError, check_words, input_file

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Blocks a test runs as written: (doc, the heading the block sits under) -> (the file that runs it, what that file
# reads the block by, so a renamed heading or a dropped runner fails here).
RUN_BY = {
    ("README.md", "### From the terminal"): ("tests/e2e/cli/test_readme_quickstart.py", "### From the terminal"),
    ("README.md", "## Two commands on a fresh machine"): (".ci/run", "stage test make test"),
}

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
PLACEHOLDER = re.compile(r"<(?!<)[A-Za-z][^<>\n]*>")  # <run-id>, <the home the demo printed>; not a heredoc's <<
ALTERNATIVES = re.compile(r"(?<=[^\s|])\|(?=[^\s|])")  # `bash|zsh|fish`, never a pipe written with spaces
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
HEREDOC = re.compile(r"<<-?\s*'?\"?([A-Za-z_]+)'?\"?")
QUOTED = re.compile(r"'([^']*)'")  # the value an argparse error names
WRITTEN = "1"  # what a placeholder (N, S, PLACEHOLDER) stands for where an option wants a number
ELIDED = "..."  # `bashgym run start|plan ...`: the rest as shown elsewhere, so only what is written is checked


@dataclass(frozen=True)
class Block:
    doc: str  # its path from the repository root
    line: int  # the line of its opening fence
    tag: str
    heading: str  # the nearest heading above it
    text: str


def blocks(path: Path) -> Iterator[Block]:
    """The fenced blocks of a Markdown file, indented ones (in a list) included."""
    heading, opened, lines = "", None, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fence = FENCE.match(line)
        if opened is None:
            if fence:
                opened, lines = (number, fence.group(2), len(fence.group(1))), []
            elif line.startswith("#"):
                heading = line.strip()
        elif fence and not fence.group(2):
            start, tag, indent = opened
            yield Block(str(path.relative_to(ROOT)), start, tag, heading, "\n".join(x[indent:] for x in lines))
            opened = None
        else:
            lines.append(line)
    assert opened is None, f"{path.relative_to(ROOT)}:{opened[0]}: a code block that never closes"


# -- shell blocks ------------------------------------------------------------------------------------------------


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(offset in the block, line) with continuations joined and heredoc bodies left out."""
    lines, i = text.splitlines(), 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        heredoc = HEREDOC.search(line)
        if heredoc:
            while i + 1 < len(lines) and lines[i + 1].strip() != heredoc.group(1):
                i += 1
            i += 1
        yield start, line
        i += 1


def commands(line: str) -> Iterator[list[str]]:
    """The words of each simple command on a shell line: split at pipes, lists, subshells and redirections."""
    line = PLACEHOLDER.sub("PLACEHOLDER", line).replace("$(", " ( ")
    line = re.sub(r"(?<=\s)\d+(?=[<>])", " ", line)  # `2>/dev/null`: the descriptor is no word either
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    words: list[str] = []
    redirected = False
    for token in lexer:
        if token and set(token) <= set("|&;()<>"):
            if words:
                yield words
            words, redirected = [], token.startswith((">", "<"))
            continue
        if redirected:  # the file a redirection names is no word of the command
            redirected = False
            continue
        words.append(token)
    if words:
        yield words


def variants(line: str) -> list[str]:
    """A synopsis line as runnable lines: `[--opt X]` brackets dropped, each `a|b` alternative in turn."""
    line = re.sub(r"(?<=\s)\[|\](?=[\s\]]|$)", "", line)
    tokens = line.split(" ")
    choices = [ALTERNATIVES.split(token) for token in tokens]
    widest = max(len(c) for c in choices)
    return [" ".join(c[min(i, len(c) - 1)] for c in choices) for i in range(widest)]


def lenient(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser with file arguments taken as written: a file a doc names exists on the reader's machine."""
    for action in parser._actions:
        if action.type is input_file:
            action.type = None
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                lenient(sub)
    return parser


@functools.cache
def parser_for(default_project: str | None) -> argparse.ArgumentParser:
    return lenient(build_parser(default_project))


def parse_error(argv: list[str], default_project: str | None) -> str | None:
    """Why `bashgym ARGV` does not parse, or None when it does. A placeholder where a number is wanted is read as 1;
    a line with `...` elides required arguments, so only its command and the options it writes are checked."""
    parser = parser_for(default_project)
    elided = ELIDED in argv
    argv = [word for word in argv if word != ELIDED]
    for _ in range(len(argv) + 1):
        try:
            with redirect_stdout(StringIO()), redirect_stderr(StringIO()):
                check_words(parser, argv)
                if elided:
                    return None
                args = parser.parse_args(argv)
        except UsageError as exc:
            named = [value for value in QUOTED.findall(str(exc)) if value in argv and placeholder(value)]
            if named:
                argv = [WRITTEN if word == named[0] else word for word in argv]
                continue
            return str(exc)
        except SystemExit as exc:  # --help and --version print and exit 0; anything else is a refusal
            return None if exc.code == 0 else f"argparse exited {exc.code}"
        return None if getattr(args, "handler", None) else "names a group, not a command"
    return "too many placeholders"


def placeholder(word: str) -> bool:
    """N, DIR, RUN_ID or a <placeholder> as written in a synopsis; never a real value like `many` or `0.5`."""
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", word))


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {name for line in text.splitlines() for name in re.findall(r"^([\w-]+):", line)}


def check_shell(block: Block) -> list[str]:
    wrong, default_project, targets = [], None, make_targets()
    for offset, line in logical_lines(block.text):
        where = f"{block.doc}:{block.line + 1 + offset}"
        for variant in variants(line):
            for words in commands(variant):
                while words and ASSIGNMENT.match(words[0]):
                    words = words[1:]
                if not words:
                    continue
                if words[0] == "make":
                    wrong += [f"{where}: `make {t}` is no Makefile target" for t in words[1:2] if t not in targets]
                elif Path(words[0]).name == "bashgym":
                    error = parse_error(words[1:], default_project)
                    if error:
                        wrong.append(f"{where}: `{' '.join(words)}` does not parse: {error}")
                    elif words[1:3] == ["project", "use"] and len(words) > 3:
                        default_project = words[3]  # the block's later commands take it, as the CLI would
    return wrong


# -- the other languages -----------------------------------------------------------------------------------------


def loads(load: Callable[[str], object]) -> Callable[[Block], list[str]]:
    def check(block: Block) -> list[str]:
        try:
            load(block.text)
        except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
            return [f"{block.doc}:{block.line}: the {block.tag} block does not load: {exc}"]
        return []

    return check


def compiles(block: Block) -> list[str]:
    try:
        compile(block.text, f"{block.doc}:{block.line}", "exec")
    except SyntaxError as exc:
        return [f"{block.doc}:{block.line}: the python block does not compile: {exc}"]
    return []


def shown(block: Block) -> list[str]:
    """Output and diagrams: what a command printed is held by the test that prints it, not here."""
    return []


RULES: dict[str, Callable[[Block], list[str]]] = {
    "bash": check_shell,
    "json": loads(json.loads),
    "toml": loads(tomllib.loads),
    "python": compiles,
    "text": shown,
}


def check(block: Block) -> list[str]:
    rule = RULES.get(block.tag)
    if rule is None:
        told = f"tag `{block.tag}`" if block.tag else "no language tag"
        return [f"{block.doc}:{block.line}: a block with {told}; tag it with one of {sorted(RULES)}"]
    return rule(block)


# -- the tests ---------------------------------------------------------------------------------------------------


def every_block() -> list[Block]:
    return [block for doc in DOCS for block in blocks(doc)]


def test_every_code_block_of_readme_and_docs_passes_its_rule() -> None:
    found = every_block()
    assert len(found) > 30 and {b.doc for b in found} >= {"README.md", "docs/cli.md"}, "the docs went missing"
    wrong = [problem for block in found for problem in check(block)]
    assert not wrong, "\n".join(wrong)


def test_blocks_a_test_runs_name_a_runner_that_reads_them() -> None:
    found = {(b.doc, b.heading) for b in every_block()}
    for (doc, heading), (runner, reads) in RUN_BY.items():
        assert (doc, heading) in found, f"{doc} has no code block under {heading!r}, which {runner} runs"
        assert reads in (ROOT / runner).read_text(encoding="utf-8"), f"{runner} no longer reads {heading!r}"


def doc_of(markdown: str, tmp_path: Path) -> list[str]:
    path = ROOT / "docs" / f"{tmp_path.name}.md"  # blocks() names files by their place in the repository
    try:
        path.write_text(markdown)
        return [problem for block in blocks(path) for problem in check(block)]
    finally:
        path.unlink()


@pytest.mark.parametrize(
    ("markdown", "says"),
    [
        ("# T\n\n```bash\nbashgym training start --projet p --method sft\n```\n", ":4: `bashgym training start"),
        ("```bash\nbashgym run lst --project p\n```\n", "does not parse"),
        ("```bash\nbashgym eval run --project p --limit-tasks many\n```\n", "--limit-tasks"),
        ("```bash\nbashgym training list\n```\n", "--project"),
        ("```bash\nbashgym\n```\n", "names a group"),
        ("```bash\nmake frobnicate\n```\n", "`make frobnicate` is no Makefile target"),
        ("```bash\nRUN=$(bashgym ledger runz --project p --json | python3 -c 'x')\n```\n", "ledger runz"),
        ("```bash\nbashgym completion bash|zsh|fsh\n```\n", "completion fsh"),
        ("```json\n{\"a\": 1,}\n```\n", "the json block does not load"),
        ("```toml\nproject = \n```\n", "the toml block does not load"),
        ("```python\ndef f(:\n```\n", "the python block does not compile"),
        ("```yaml\na: 1\n```\n", "a block with tag `yaml`"),
        ("```\nplain\n```\n", "a block with no language tag"),
    ],
)  # fmt: skip
def test_a_wrong_block_fails_with_its_file_and_line(markdown: str, says: str, tmp_path: Path) -> None:
    wrong = doc_of(markdown, tmp_path)
    assert wrong and says in "\n".join(wrong), wrong
    assert all(w.startswith(f"docs/{tmp_path.name}.md:") for w in wrong), wrong


def test_right_blocks_pass_placeholders_synopses_and_a_default_project_included(tmp_path: Path) -> None:
    markdown = (
        "```bash\n"
        "bashgym demo [--home DIR] [--json] [--steps N] [--limit-tasks N]\n"
        "bashgym training status <run-id> --project nightly   # a comment\n"
        "bashgym runcard show|validate --project p --run R 2>/dev/null\n"
        "BASHGYM_HOME=<the home> bashgym up\n"
        "bashgym project use quickstart\n"
        'CAND=$(bashgym eval run --run "$RUN" --limit-tasks 11 --json \\\n'
        "  | python3 -c 'import json,sys; print(1)')\n"
        "cat > x.jsonl <<'EOF'\n"
        "bashgym not a command inside a heredoc\n"
        "EOF\n"
        "make test\n"
        "```\n"
        '```json\n{"max_steps": 5}\n```\n'
    )
    assert doc_of(markdown, tmp_path) == []
