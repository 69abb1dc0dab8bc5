"""Terminal-task environments: small shell tasks BashGym evaluates and rewards models on.

A task is data: input files, an optional setup script, a private verifier and a gold command. The
judge runs the model's command with `bash -c` as an unprivileged user in a sandbox holding only the
task's files (after `setup` ran there), saves its stdout to $OUTPUT, then runs `verifier` with cwd =
a private directory of `fixtures`, $SANDBOX, $OUTPUT and $FIXTURES set; exit 0 means passed. A task
whose verifier came from data someone else wrote (`verifier_trust="untrusted"`) has no fixtures, and
its verifier runs inside the attempt's own sandbox instead (trainers/environments/sandbox.py). Setup and
verifiers are POSIX sh over coreutils, grep, sed, awk, find, tar and gzip only, so any sandbox image
can judge them. Standard library and pydantic only: the daemon and evaluators import this without torch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FAMILIES: tuple[str, ...] = (
    "count_lines",
    "extract_field",
    "rename_files",
    "find_by_pattern",
    "sort_lines",
    "sum_column",
    "archive",
    "permissions",
    "text_substitution",
    "json_query",
    "csv_query",
)

STEMS = (
    "notes", "access", "orders", "inventory", "metrics", "server", "backup", "events", "report", "sales",
    "users", "tasks", "audit", "billing", "deploy", "traffic", "payroll", "catalog", "tickets", "builds",
)  # fmt: skip
# No word here contains another, so a literal substitution or grep for one never hits a second.
WORDS = (
    "apple", "birch", "cedar", "delta", "ember", "fjord", "glade", "harbor", "island", "jasper", "kettle",
    "lumen", "maple", "nectar", "orbit", "pepper", "quartz", "river", "summit", "tundra", "violet",
    "willow", "yonder", "zephyr", "copper", "falcon", "granite", "meadow",
)  # fmt: skip
PEOPLE = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "oscar", "peggy")
ITEMS = ("bolt", "nut", "screw", "washer", "hinge", "bracket", "spring", "gear", "valve", "pulley", "clamp", "rivet")
CATEGORIES = ("tools", "garden", "kitchen", "office", "sports")
ACTIONS = ("logged in", "uploaded a file", "changed settings", "logged out", "requested a report")
SETTINGS = ("host", "port", "user", "timeout", "retries", "mode", "region", "owner", "workers", "cache")

# Printed answers are compared after trimming trailing whitespace on each line and trailing blank lines
# (command substitution drops those); numbers may carry surrounding whitespace only.
_SAME_TEXT = """[ "$(sed 's/[[:space:]]*$//' "$OUTPUT")" = "$(cat expected.txt)" ]"""
_SAME_SET = """[ "$(sed 's/[[:space:]]*$//; s|^\\./||; /^$/d' "$OUTPUT" | LC_ALL=C sort)" = "$(cat expected.txt)" ]"""
_SAME_NUMBER = 'set -f\nset -- $(cat "$OUTPUT")\n[ "$#" -eq 1 ] && [ "$1" = "$(cat expected.txt)" ]'

RelativePath = Annotated[str, Field(min_length=1)]


def _check_relative(paths: dict[str, str]) -> dict[str, str]:
    for name in paths:
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or "\\" in name:
            raise ValueError(
                f"file path {name!r} must be relative and stay inside its directory; use e.g. 'logs/a.log'"
            )
    return paths


def _canonical_digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class TerminalTask(BaseModel):
    """One shell task: files for the sandbox, a gold command that solves it and a verifier that judges it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: Annotated[str, Field(pattern=r"^[a-z_]+-\d{3}$")]
    task_family: str
    instruction: str
    files: dict[RelativePath, str]
    setup: str = ""
    verifier: str
    fixtures: dict[RelativePath, str]
    gold: str
    timeout_s: Annotated[float, Field(gt=0)] = 10.0
    # "trusted": we wrote the verifier (the shipped suite); it runs outside the sandbox with the fixtures.
    # "untrusted": it came with the data (a dataset row's inline check); it runs inside the attempt's sandbox.
    verifier_trust: Literal["trusted", "untrusted"] = "trusted"

    @field_validator("files", "fixtures")
    @classmethod
    def _paths_stay_inside(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_relative(value)

    @model_validator(mode="after")
    def _untrusted_has_no_fixtures(self) -> TerminalTask:
        if self.verifier_trust == "untrusted" and self.fixtures:
            raise ValueError(
                "an untrusted verifier runs inside the sandbox, where private fixtures cannot be; "
                "put what it compares against in `files` or drop the fixtures"
            )
        return self

    def content(self) -> dict[str, Any]:
        """The task as JSON for digests; a trusted verifier leaves its default out, so older digests still hold."""
        data = self.model_dump(mode="json")
        if self.verifier_trust == "trusted":
            del data["verifier_trust"]
        return data

    def definition_digest(self) -> str:
        """Hash of everything but the id: the same content under two ids is the same task."""
        return _canonical_digest({k: v for k, v in self.content().items() if k != "task_id"})


# The shipped suite's scoring contract: pass@1 decides; timeouts and tampering may not regress.
TERMINAL_CONTRACT = {
    "primary_metric": "pass@1",
    "metrics": {
        "pass@1": {"direction": "maximize"},
        "mean_success": {"direction": "maximize"},
        "timeout_rate": {"direction": "minimize", "max_regression": 0.05},
        "tamper_rate": {"direction": "minimize", "max_regression": 0.0},
    },
}


class SuiteDefinition(BaseModel):
    """A named, versioned list of tasks with the family-grouped holdout split that goes with it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suite_id: str = "bash-tasks-v1"
    holdout_fraction: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.3
    split_seed: int = 13
    tasks: list[TerminalTask]

    @model_validator(mode="after")
    def _ids_are_unique(self) -> SuiteDefinition:
        seen: set[str] = set()
        for task in self.tasks:
            if task.task_id in seen:
                raise ValueError(
                    f"task id {task.task_id!r} appears twice in suite {self.suite_id!r}; ids must be unique"
                )
            seen.add(task.task_id)
        return self

    def digest(self) -> str:
        """Hash of the whole definition, tasks and split settings included."""
        return _canonical_digest({**self.model_dump(mode="json"), "tasks": [t.content() for t in self.tasks]})

    def registration(self) -> dict[str, Any]:
        """How the suite is registered in the ledger (an EvalSuiteSpec): its scoring contract, pinned by its digest."""
        return {
            "suite_id": self.suite_id,
            "kind": "terminal_tasks",
            "scoring_contract": TERMINAL_CONTRACT,
            "code_digest": self.digest(),
        }


@dataclass(frozen=True)
class _Draft:
    instruction: str
    files: dict[str, str]
    verifier: str
    fixtures: dict[str, str]
    gold: str
    setup: str = ""


Builder = Callable[[random.Random, str, int], _Draft]


def _text(rows: Sequence[str]) -> str:
    return "".join(f"{row}\n" for row in rows)


def _q(path: str) -> str:
    return shlex.quote(path)


def _in_sandbox(path: str) -> str:
    return f'"$SANDBOX"/{_q(path)}'


def _checks(lines: Sequence[str]) -> str:
    """A verifier of one check per line; the first failing check fails it."""
    return "\n".join(["set -e", *lines])


def _printed(instruction: str, files: dict[str, str], gold: str, expected: str, compare: str) -> _Draft:
    return _Draft(instruction, files, compare, {"expected.txt": expected + "\n"}, gold)


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(2, 5)))


def _log_line(rng: random.Random, level: str) -> str:
    stamp = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    return f"{stamp} {level} {rng.choice(PEOPLE)} {rng.choice(ACTIONS)}"


def _log(rng: random.Random, levels: Sequence[str], must_have: str, count: int) -> list[str]:
    rows = [_log_line(rng, rng.choice(levels)) for _ in range(count)]
    rows[rng.randrange(count)] = _log_line(rng, must_have)
    return rows


def _other_stem(rng: random.Random, stem: str) -> str:
    return rng.choice([s for s in STEMS if s != stem])


def _count_lines(rng: random.Random, stem: str, variant: int) -> _Draft:
    other = f"{_other_stem(rng, stem)}.txt"
    files = {other: _text([_sentence(rng) for _ in range(rng.randint(3, 12))])}
    ending = rng.choice((" Print only the number.", " Print just the number, nothing else."))
    match variant % 3:
        case 0:
            name = f"{stem}.txt"
            rows = [_sentence(rng) for _ in range(rng.randint(13, 40))]
            ask = rng.choice(("How many lines does {f} have?", "Count the lines in {f}."))
            expected, gold = len(rows), f"wc -l < {name}"
        case 1:
            name = f"{stem}.log"
            rows = _log(rng, ("INFO", "WARN", "ERROR"), "ERROR", rng.randint(8, 40))
            ask = rng.choice(("How many lines of {f} contain ERROR?", "Count the lines in {f} that mention ERROR."))
            expected, gold = sum("ERROR" in row for row in rows), f"grep -c ERROR {name}"
        case _:
            name = f"{stem}.md"
            rows = [_sentence(rng) if rng.random() < 0.7 else "" for _ in range(rng.randint(8, 40))]
            rows[0] = _sentence(rng)
            ask = rng.choice(("How many non-empty lines does {f} have?", "Count the lines of {f} that are not blank."))
            expected, gold = sum(bool(row) for row in rows), f"grep -c . {name}"
    files[name] = _text(rows)
    return _printed(ask.format(f=name) + ending, files, gold, str(expected), _SAME_NUMBER)


def _extract_field(rng: random.Random, stem: str, variant: int) -> _Draft:
    match variant % 3:
        case 0:
            name = f"{stem}.conf"
            keys = rng.sample(SETTINGS, rng.randint(4, 8))
            values = {key: str(rng.randint(1, 9000)) if rng.random() < 0.5 else rng.choice(WORDS) for key in keys}
            key = rng.choice(keys)
            ask = rng.choice(
                ("Print the value of the {k} setting in {f}.", "What is {k} set to in {f}? Print the value.")
            )
            rows = [f"{k}={v}" for k, v in values.items()]
            return _printed(
                ask.format(k=key, f=name) + " Lines look like key=value.",
                {name: _text(["# generated settings", *rows])},
                f"sed -n 's/^{key}=//p' {name}",
                values[key],
                _SAME_TEXT,
            )
        case 1:
            name = f"{stem}.db"
            people = rng.sample(PEOPLE, rng.randint(3, 10))
            teams = [rng.choice(CATEGORIES) for _ in people]
            rows = [f"{p}:{1000 + i}:{t}" for i, (p, t) in enumerate(zip(people, teams, strict=True))]
            ask = rng.choice(("Each line of {f} is name:id:team.", "The lines of {f} have the form name:id:team."))
            return _printed(
                ask.format(f=name) + " Print the team of every line, one per line, in file order.",
                {name: _text(rows)},
                f"cut -d: -f3 {name}",
                "\n".join(teams),
                _SAME_TEXT,
            )
        case _:
            name = f"{stem}.txt"
            hosts = rng.sample(WORDS, rng.randint(3, 10))
            loads = [str(rng.randint(1, 99)) for _ in hosts]
            rows = [f"{h}  {load}  {rng.randint(100, 999)}" for h, load in zip(hosts, loads, strict=True)]
            ask = rng.choice(("Print the second column of {f}", "Print column 2 of {f}"))
            return _printed(
                ask.format(f=name) + " (columns are separated by spaces), one value per line, in file order.",
                {name: _text(rows)},
                f"awk '{{print $2}}' {name}",
                "\n".join(loads),
                _SAME_TEXT,
            )


def _renamed(files: dict[str, str], moves: dict[str, str], instruction: str, gold: str) -> _Draft:
    """A rename task: each moved file exists under its new name with its content, the old name is gone."""
    checks, fixtures = [], {}
    for old, new in moves.items():
        fixtures[f"expected/{new}"] = files[old]
        checks += [f"cmp -s {_q('expected/' + new)} {_in_sandbox(new)}", f"test ! -e {_in_sandbox(old)}"]
    for kept in sorted(set(files) - set(moves)):
        fixtures[f"expected/{kept}"] = files[kept]
        checks.append(f"cmp -s {_q('expected/' + kept)} {_in_sandbox(kept)}")
    return _Draft(instruction, files, _checks(checks), fixtures, gold)


def _rename_files(rng: random.Random, stem: str, variant: int) -> _Draft:
    bases = rng.sample(WORDS, rng.randint(4, 7))
    content = {base: _text([_sentence(rng) for _ in range(rng.randint(3, 6))]) for base in bases}
    keep = bases.pop()
    match variant % 3:
        case 0:
            files = {f"{stem}/{b}.txt": content[b] for b in bases} | {f"{stem}/{keep}.csv": content[keep]}
            moves = {f"{stem}/{b}.txt": f"{stem}/{b}.md" for b in bases}
            ask = rng.choice(("Rename every .txt file in {d}/ to", "Change the extension of each .txt file in {d}/ to"))
            instruction = ask.format(d=stem) + " .md, keeping the base names."
            gold = f'for f in {stem}/*.txt; do mv "$f" "${{f%.txt}}.md"; done'
        case 1:
            files = {f"{stem}/{b}.log": content[b] for b in bases} | {f"{stem}/{keep}.txt": content[keep]}
            moves = {f"{stem}/{b}.log": f"{stem}/old_{b}.log" for b in bases}
            ask = rng.choice(
                ("Add the prefix old_ to the name of every .log file in {d}/", "Prefix each .log file in {d}/")
            )
            instruction = ask.format(d=stem) + " (e.g. a.log becomes old_a.log)."
            gold = f'cd {stem} && for f in *.log; do mv "$f" "old_$f"; done'
        case _:
            suffix = rng.choice(WORDS)
            files = {f"{stem}/{b} {suffix}.txt": content[b] for b in bases} | {f"{stem}/{keep}.txt": content[keep]}
            moves = {f"{stem}/{b} {suffix}.txt": f"{stem}/{b}_{suffix}.txt" for b in bases}
            ask = rng.choice(("In {d}/, replace the spaces in file names", "Rename the files in {d}/ so that spaces"))
            instruction = ask.format(d=stem) + " with underscores (only the names change)."
            gold = f"cd {stem} && for f in *' '*; do mv \"$f\" \"$(printf '%s' \"$f\" | tr ' ' _)\"; done"
    return _renamed(files, moves, instruction, gold)


def _find_by_pattern(rng: random.Random, stem: str, variant: int) -> _Draft:
    dirs = [stem, *(f"{stem}/{d}" for d in rng.sample(WORDS, 2))]
    names = rng.sample(WORDS, rng.randint(5, 9))
    paths = [f"{rng.choice(dirs)}/{name}" for name in names]
    hits = set(rng.sample(range(len(paths)), rng.randint(1, len(paths) - 2)))
    match variant % 3:
        case 0:
            files = {}
            for i, path in enumerate(paths):
                files[path + (".log" if i in hits else rng.choice((".txt", ".conf")))] = _text([_sentence(rng)])
            expected = sorted(p for p in files if p.endswith(".log"))
            ask = rng.choice(("List every .log file under {d}/", "Find all files ending in .log under {d}/"))
            gold = f"find {stem} -type f -name '*.log'"
        case 1:
            files = {}
            for i, path in enumerate(paths):
                rows = [_sentence(rng) for _ in range(rng.randint(2, 5))]
                if i in hits:
                    rows.insert(rng.randrange(len(rows)), f"TODO: {_sentence(rng)}")
                files[path + ".txt"] = _text(rows)
            expected = sorted(p for p in files if "TODO" in files[p])
            ask = rng.choice(("List the files under {d}/ that contain TODO", "Which files under {d}/ mention TODO?"))
            gold = f"grep -rl TODO {stem}"
        case _:
            files = {}
            for i, path in enumerate(paths):
                head, _, tail = path.rpartition("/")
                files[f"{head}/{'draft_' if i in hits else ''}{tail}.md"] = _text([_sentence(rng)])
            expected = sorted(p for p in files if p.rpartition("/")[2].startswith("draft_"))
            ask = rng.choice(
                ("List every file under {d}/ whose name starts with draft_", "Find the draft_* files under {d}/")
            )
            gold = f"find {stem} -type f -name 'draft_*'"
    instruction = ask.format(d=stem) + f", searching subdirectories too. Print one path per line, like {stem}/<name>."
    return _printed(instruction, files, gold, "\n".join(expected), _SAME_SET)


def _shuffled(rng: random.Random, rows: list[str], ordered: list[str]) -> list[str]:
    rng.shuffle(rows)
    return rows[::-1] if rows == ordered else rows


def _sort_lines(rng: random.Random, stem: str, variant: int) -> _Draft:
    name = f"{stem}.txt"
    match variant % 3:
        case 0:
            words = rng.sample(WORDS, rng.randint(5, 20))
            rows, expected = _shuffled(rng, words, sorted(words)), sorted(words)
            ask = rng.choice(("Print the lines of {f} sorted alphabetically.", "Sort the lines of {f} in A-Z order."))
            gold = f"sort {name}"
        case 1:
            numbers = rng.sample(range(1, 1000), rng.randint(5, 25))
            expected = [str(n) for n in sorted(numbers, reverse=True)]
            rows = _shuffled(rng, [str(n) for n in numbers], expected)
            ask = rng.choice(
                ("Print the numbers in {f} from largest to smallest.", "Sort {f} numerically, descending.")
            )
            gold = f"sort -nr {name}"
        case _:
            words = rng.sample(WORDS, rng.randint(4, 10))
            rows = words + rng.choices(words, k=rng.randint(3, 12))
            expected = sorted(set(words))
            rows = _shuffled(rng, rows, expected)
            ask = rng.choice(("Print the distinct lines of {f}, sorted.", "Sort {f} and drop duplicate lines."))
            gold = f"sort -u {name}"
    instruction = ask.format(f=name) + " Print the result; do not change the file."
    return _printed(instruction, {name: _text(rows)}, gold, "\n".join(expected), _SAME_TEXT)


def _sum_column(rng: random.Random, stem: str, variant: int) -> _Draft:
    count = rng.randint(3, 30)
    category = rng.choice(CATEGORIES)
    ending = rng.choice((" Print only the total.", " Print just the number."))
    match variant % 3:
        case 0:
            name = f"{stem}.csv"
            rows = [(i + 1, rng.choice(ITEMS), rng.randint(1, 50), rng.randint(1, 300)) for i in range(count)]
            lines = ["id,item,quantity,price", *(f"{a},{b},{c},{d}" for a, b, c, d in rows)]
            ask = rng.choice(("Add up the quantity column of {f}.", "What is the total quantity in {f}?"))
            total, gold = sum(row[2] for row in rows), f"awk -F, 'NR>1 {{s+=$3}} END {{print s}}' {name}"
        case 1:
            name = f"{stem}.txt"
            amounts = [rng.randint(1, 500) for _ in range(count)]
            lines = [f"{rng.choice(PEOPLE)} {amount}" for amount in amounts]
            ask = rng.choice(
                ("Sum the second column of {f}.", "Each line of {f} is a name and an amount; sum the amounts.")
            )
            total, gold = sum(amounts), f"awk '{{s+=$2}} END {{print s}}' {name}"
        case _:
            name = f"{stem}.csv"
            spent = [(rng.choice(CATEGORIES), rng.randint(1, 400)) for _ in range(count)]
            spent[rng.randrange(count)] = (category, rng.randint(1, 400))
            lines = ["date,category,amount", *(f"2024-03-{day:02d},{c},{a}" for day, (c, a) in enumerate(spent, 1))]
            ask = rng.choice(
                ("Sum the amount of the {c} rows in {f}.", "What is the total amount for category {c} in {f}?")
            )
            total = sum(amount for c, amount in spent if c == category)
            gold = f"awk -F, '$2==\"{category}\" {{s+=$3}} END {{print s}}' {name}"
    return _printed(ask.format(f=name, c=category) + ending, {name: _text(lines)}, gold, str(total), _SAME_NUMBER)


def _heredocs(files: dict[str, str]) -> str:
    return "".join(f"cat > {_q(path)} <<'EOF'\n{content}EOF\n" for path, content in files.items())


def _archive(rng: random.Random, stem: str, variant: int) -> _Draft:
    archive = f"{stem}.tar.gz"
    names = rng.sample(WORDS, rng.randint(3, 6))
    members = {f"{name}.log": _text(_log(rng, ("INFO", "WARN"), "INFO", rng.randint(3, 8))) for name in names}
    match variant % 3:
        case 0:
            inside = {f"{stem}/{path}": content for path, content in members.items()}
            setup = f"mkdir -p {stem}\n{_heredocs(inside)}tar czf {archive} {stem}\nrm -r {stem}\n"
            ask = rng.choice(
                (
                    "The current directory holds {a}. Extract it here.",
                    "Unpack the archive {a} into the current directory.",
                )
            )
            checks = [f"cmp -s {_q('expected/' + path)} {_in_sandbox(path)}" for path in inside]
            fixtures = {f"expected/{path}": content for path, content in inside.items()}
            return _Draft(ask.format(a=archive), {}, _checks(checks), fixtures, f"tar xzf {archive}", setup)
        case 1:
            setup = f"{_heredocs(members)}tar czf {archive} {' '.join(members)}\nrm {' '.join(members)}\n"
            ask = rng.choice(("How many files does the archive {a} contain?", "Count the files packed in {a}."))
            instruction = ask.format(a=archive) + " Print only the number."
            return _Draft(
                instruction,
                {},
                _SAME_NUMBER,
                {"expected.txt": f"{len(members)}\n"},
                f"tar tzf {archive} | wc -l",
                setup,
            )
        case _:
            csvs = {
                f"{name}.csv": f"id,value\n1,{rng.randint(1, 99)}\n" for name in rng.sample(WORDS, rng.randint(2, 4))
            }
            ask = rng.choice(
                ("Create {a}, a gzip-compressed tar archive holding", "Make a gzipped tarball {a} containing")
            )
            instruction = ask.format(a=archive) + " every .csv file in the current directory and nothing else."
            listing = (
                f'[ "$(tar tzf {_in_sandbox(archive)} | sed \'s|^\\./||\' | LC_ALL=C sort)" = "$(cat expected.txt)" ]'
            )
            expected = {"expected.txt": _text(sorted(csvs))}
            return _Draft(instruction, members | csvs, listing, expected, f"tar czf {archive} *.csv")


def _permissions(rng: random.Random, stem: str, variant: int) -> _Draft:
    script = _text(["#!/bin/sh", f"echo {_sentence(rng)}"])
    notes = _text([_sentence(rng) for _ in range(rng.randint(3, 6))])
    other = f"{rng.choice(WORDS)}.txt"
    match variant % 4:
        case 0:
            files = {f"{stem}.sh": script, other: notes}
            ask = rng.choice(("Make {f} executable.", "Give {f} execute permission so it can be run as ./{f}."))
            instruction, gold = ask.format(f=f"{stem}.sh"), f"chmod +x {stem}.sh"
            checks = [f"test -x {_in_sandbox(stem + '.sh')}", f"test ! -x {_in_sandbox(other)}"]
        case 1:
            name = f"{stem}.key"
            files = {name: _text([f"{rng.getrandbits(128):032x}"]), other: notes}
            ask = rng.choice(("Make {f} readable and writable by its owner only", "Restrict {f} to owner read/write"))
            instruction = ask.format(f=name) + " (no permissions for anyone else)."
            checks, gold = [f'[ "$(stat -c %a {_in_sandbox(name)})" = 600 ]'], f"chmod 600 {name}"
        case 2:
            scripts = [f"{stem}/{w}.sh" for w in rng.sample(WORDS, rng.randint(2, 4))]
            files = dict.fromkeys(scripts, script) | {f"{stem}/{other}": notes}
            ask = rng.choice(
                ("Make every .sh file in {d}/ executable", "Add execute permission to each .sh script in {d}/")
            )
            instruction = ask.format(d=stem) + "; leave the other files as they are."
            checks = [f"test -x {_in_sandbox(s)}" for s in scripts] + [f"test ! -x {_in_sandbox(stem + '/' + other)}"]
            gold = f"chmod +x {stem}/*.sh"
        case _:
            name = f"{stem}.csv"
            files = {name: _text(["id,value", *(f"{i},{rng.randint(1, 99)}" for i in range(1, rng.randint(3, 9)))])}
            ask = rng.choice(
                (
                    "Remove write permission for group and others from {f}",
                    "Take away group and other write access on {f}",
                )
            )
            instruction = ask.format(f=name) + "; keep every other permission bit as it is."
            checks, gold = [f'[ "$(stat -c %a {_in_sandbox(name)})" = 644 ]'], f"chmod go-w {name}"
    # Modes are set here, not left to the umask, so the starting state is the same on every judge.
    start = "666" if variant % 4 == 3 else "644"
    setup = f"chmod {start} {' '.join(_q(path) for path in files)}\n"
    return _Draft(instruction, files, _checks(checks), {}, gold, setup)


def _text_substitution(rng: random.Random, stem: str, variant: int) -> _Draft:
    match variant % 3:
        case 0:
            name = f"{stem}.txt"
            old, new = rng.sample(WORDS, 2)
            rows = [
                " ".join(w for w in rng.sample(WORDS, rng.randint(3, 6)) if w != new) for _ in range(rng.randint(4, 15))
            ]
            rows[rng.randrange(len(rows))] += f" {old}"
            ask = rng.choice(("Replace every occurrence of {o} with {n} in {f}", "In {f}, change each {o} to {n}"))
            instruction, gold = ask.format(o=old, n=new, f=name), f"sed -i 's/{old}/{new}/g' {name}"
            after = [row.replace(old, new) for row in rows]
        case 1:
            name = f"{stem}.ini"
            keys = rng.sample(SETTINGS, rng.randint(4, 8))
            key, value = rng.choice(keys), str(rng.randint(1000, 9999))
            rows = [f"{k}={rng.randint(1, 999)}" for k in keys]
            ask = rng.choice(("Set {k} to {v} in {f}", "Change the {k} setting in {f} to {v}"))
            instruction = ask.format(k=key, v=value, f=name) + " (lines are key=value)"
            gold = f"sed -i 's/^{key}=.*/{key}={value}/' {name}"
            after = [f"{key}={value}" if row.startswith(f"{key}=") else row for row in rows]
        case _:
            name = f"{stem}.log"
            rows = _log(rng, ("INFO", "DEBUG", "WARN"), "DEBUG", rng.randint(5, 30))
            ask = rng.choice(("Delete every line containing DEBUG from {f}", "Remove the DEBUG lines from {f}"))
            instruction, gold = ask.format(f=name), f"sed -i '/DEBUG/d' {name}"
            after = [row for row in rows if "DEBUG" not in row]
    checks = [f"cmp -s expected.txt {_in_sandbox(name)}"]
    return _Draft(
        instruction + ", editing the file in place.",
        {name: _text(rows)},
        _checks(checks),
        {"expected.txt": _text(after)},
        gold,
    )


def _json_query(rng: random.Random, stem: str, variant: int) -> _Draft:
    name = f"{stem}.jsonl"
    count = rng.randint(4, 25)
    ids = [100 + i for i in range(count)]
    users = [rng.choice(PEOPLE) for _ in ids]
    statuses = [rng.choice(("ok", "ok", "error", "timeout")) for _ in ids]
    statuses[rng.randrange(count)] = "error"
    statuses[rng.randrange(count)] = "ok"
    durations = rng.sample(range(5, 2000), count)
    rows = zip(ids, users, statuses, durations, strict=True)
    lines = [json.dumps({"id": i, "user": u, "status": s, "ms": ms}) for i, u, s, ms in rows]
    files = {name: _text(lines)}
    intro = rng.choice(
        ("Each line of {f} is a JSON object with fields id, user, status and ms.", "{f} holds one JSON event per line.")
    ).format(f=name)
    match variant % 4:
        case 0:
            ask = " Print the user of every event whose status is error, one per line, in file order."
            expected = "\n".join(u for u, s in zip(users, statuses, strict=True) if s == "error")
            gold = f'grep \'"status": "error"\' {name} | sed \'s/.*"user": "\\([^"]*\\)".*/\\1/\''
            return _printed(intro + ask, files, gold, expected, _SAME_TEXT)
        case 1:
            user = rng.choice(users)
            ask = f" How many events belong to user {user}? Print only the number."
            expected, gold = str(users.count(user)), f'grep -c \'"user": "{user}"\' {name}'
        case 2:
            ask = " Print the id of the event with the largest ms, and nothing else."
            expected = str(ids[durations.index(max(durations))])
            extract = 'sed \'s/.*"id": \\([0-9]*\\),.*"ms": \\([0-9]*\\).*/\\2 \\1/\''
            gold = f"{extract} {name} | sort -n | tail -n 1 | cut -d' ' -f2"
        case _:
            ask = " Print the total ms of the events whose status is ok, and nothing else."
            expected = str(sum(ms for s, ms in zip(statuses, durations, strict=True) if s == "ok"))
            total = "awk '{s+=$1} END {print s}'"
            gold = f'grep \'"status": "ok"\' {name} | sed \'s/.*"ms": \\([0-9]*\\).*/\\1/\' | {total}'
    return _printed(intro + ask, files, gold, expected, _SAME_NUMBER)


def _csv_query(rng: random.Random, stem: str, variant: int) -> _Draft:
    name = f"{stem}.csv"
    items = rng.sample(ITEMS, rng.randint(4, 12))
    stocks = rng.sample(range(0, 200), len(items))
    rows = [
        (f"A{rng.randint(100, 999)}", item, rng.choice(CATEGORIES), stock)
        for item, stock in zip(items, stocks, strict=True)
    ]
    category = rows[rng.randrange(len(rows))][2]
    threshold = rng.choice(stocks[:3]) + 1
    files = {name: _text(["sku,name,category,stock", *(",".join(map(str, row)) for row in rows)])}
    intro = rng.choice(
        (
            "{f} has the columns sku,name,category,stock.",
            "The CSV file {f} (header sku,name,category,stock) lists stock.",
        )
    )
    intro = intro.format(f=name)
    match variant % 3:
        case 0:
            ask = f" Print the name of every item in category {category}, one per line, in file order."
            expected = "\n".join(r[1] for r in rows if r[2] == category)
            gold = f"awk -F, 'NR>1 && $3==\"{category}\" {{print $2}}' {name}"
            return _printed(intro + ask, files, gold, expected, _SAME_TEXT)
        case 1:
            ask = f" How many items have a stock below {threshold}? Print only the number."
            expected, gold = (
                str(sum(r[3] < threshold for r in rows)),
                f"awk -F, 'NR>1 && $4<{threshold}' {name} | wc -l",
            )
            return _printed(intro + ask, files, gold, expected, _SAME_NUMBER)
        case _:
            ask = " Print the name of the item with the highest stock, and nothing else."
            expected = max(rows, key=lambda r: r[3])[1]
            gold = f"tail -n +2 {name} | sort -t, -k4,4nr | head -n 1 | cut -d, -f2"
            return _printed(intro + ask, files, gold, expected, _SAME_TEXT)


_BUILDERS: dict[str, Builder] = {
    "count_lines": _count_lines,
    "extract_field": _extract_field,
    "rename_files": _rename_files,
    "find_by_pattern": _find_by_pattern,
    "sort_lines": _sort_lines,
    "sum_column": _sum_column,
    "archive": _archive,
    "permissions": _permissions,
    "text_substitution": _text_substitution,
    "json_query": _json_query,
    "csv_query": _csv_query,
}


def generate_suite(*, seed: int = 0, per_family: int = 8) -> list[TerminalTask]:
    """Deterministic tasks for a seed: per_family instances of each family, cycling through its variants."""
    if per_family < 1:
        raise ValueError(f"per_family is {per_family}; ask for at least 1 task per family")
    return [
        TerminalTask(task_id=f"{family}-{i:03d}", task_family=family, **asdict(draft))
        for family in FAMILIES
        for i, draft in enumerate(_drafts(seed, family, per_family))
    ]


def _drafts(seed: int, family: str, count: int) -> list[_Draft]:
    # A per-family shuffle of the stems gives each instance its own file names (up to len(STEMS)).
    stems = random.Random(f"{seed}:{family}").sample(STEMS, len(STEMS))
    return [_BUILDERS[family](random.Random(f"{seed}:{family}:{i}"), stems[i % len(stems)], i) for i in range(count)]


def family_instructions(family: str, *, seeds: Sequence[int], per_seed: int) -> list[str]:
    """The instructions of `family`'s first per_seed instances in the suites of `seeds` (no task is built)."""
    return [draft.instruction for seed in seeds for draft in _drafts(seed, family, per_seed)]


def default_suite() -> SuiteDefinition:
    """The suite BashGym evaluates on: seed 0, eight tasks per family."""
    return SuiteDefinition(tasks=generate_suite(seed=0, per_family=8))


# A training instance of a family: `<family>-s<seed>-<index>`, from a seed other than the evaluation suite's 0.
TRAINING_TASK_ID = re.compile(r"^(?P<family>[a-z_]+)-s(?P<seed>[1-9][0-9]{0,5})-(?P<index>[0-9]{3})$")


class NotATrainingTask(ValueError):
    """A task id RL may not train on; the message says why and what to name instead."""


def training_task(task_id: str) -> TerminalTask:
    """The training instance `task_id` names. Never an evaluation instance (the default suite's ids, or a task
    identical to one of them), never a family the suite holds out: RL trains on tasks it is not judged by."""
    evaluation = default_suite()
    if any(t.task_id == task_id for t in evaluation.tasks):
        family = task_id.rsplit("-", 1)[0]
        raise NotATrainingTask(
            f"task_id {task_id!r} is a task of the evaluation suite {evaluation.suite_id}; training on it would "
            f"score the model on what it trained on. Name a training instance such as {family}-s1-000."
        )
    found = TRAINING_TASK_ID.match(task_id)
    if found is None or found["family"] not in FAMILIES:
        raise NotATrainingTask(
            f"task_id {task_id!r} names no training task; training instances are <family>-s<seed>-<index> with a "
            f"seed from 1 (count_lines-s1-000), families {', '.join(FAMILIES)}."
        )
    family, seed, index = found["family"], int(found["seed"]), int(found["index"])
    if family in holdout_families():
        raise NotATrainingTask(
            f"task_id {task_id!r} is of family {family}, which {evaluation.suite_id} holds out of training to judge "
            "generalisation; train on the other families."
        )
    task = _training_instances(seed, family, index + 1)[index]
    if _same_task_key(task) in _evaluation_keys():
        raise NotATrainingTask(f"task_id {task_id!r} is identical to an evaluation task; take another index or seed.")
    return task.model_copy(update={"task_id": task_id})


@functools.cache
def holdout_families() -> frozenset[str]:
    """The families the default suite holds out (never trained on)."""
    from bashgym.trainers.contracts.evidence import holdout_split

    suite = default_suite()
    split = holdout_split(
        {t.task_id: t.task_family for t in suite.tasks}, fraction=suite.holdout_fraction, seed=suite.split_seed
    )
    return frozenset(t.task_family for t in suite.tasks if split[t.task_id] == "holdout")


def training_families() -> tuple[str, ...]:
    """The families training data may hold: all but the held-out ones, in FAMILIES order."""
    return tuple(family for family in FAMILIES if family not in holdout_families())


@functools.cache
def _evaluation_keys() -> frozenset[str]:
    return frozenset(_same_task_key(t) for t in default_suite().tasks)


@functools.cache
def _training_instances(seed: int, family: str, count: int) -> list[TerminalTask]:
    return [t for t in generate_suite(seed=seed, per_family=count) if t.task_family == family]


def gold_sft_rows(
    seeds: Sequence[int],
    *,
    per_family: int = 20,
    families: Sequence[str] = FAMILIES,
    exclude: Sequence[TerminalTask] = (),
) -> list[dict[str, list[dict[str, str]]]]:
    """SFT chat rows (the task's prompt, its gold command) of the suites of `seeds`, for `families` only,
    leaving out every task whose instruction and files equal one in `exclude` (the evaluation suite)."""
    banned = {_same_task_key(t) for t in exclude}
    return [
        {"messages": [{"role": "user", "content": task_prompt(t)}, {"role": "assistant", "content": t.gold}]}
        for seed in seeds
        for t in generate_suite(seed=seed, per_family=per_family)
        if t.task_family in families and _same_task_key(t) not in banned
    ]


def _same_task_key(task: TerminalTask) -> str:
    return _canonical_digest({"instruction": task.instruction, "files": task.files})


def task_prompt(task: TerminalTask) -> str:
    """The text a model sees: the instruction, the files with their first lines, and the answer format."""
    parts = [task.instruction]
    if task.files:
        parts.append("Files:")
        for name in sorted(task.files):
            parts.append(f"- {name}")
            parts.extend(f"    {line}" for line in task.files[name].splitlines()[:5])
    parts.append("Answer with one shell command.")
    return "\n".join(parts)


def write_suite(suite: SuiteDefinition, path: Path) -> None:
    """Save a suite as JSON."""
    path.write_text(suite.model_dump_json(indent=2) + "\n")


def load_suite(path: Path) -> SuiteDefinition:
    """Read a suite written by `write_suite`; a malformed file raises pydantic's ValidationError."""
    return SuiteDefinition.model_validate_json(path.read_text())
