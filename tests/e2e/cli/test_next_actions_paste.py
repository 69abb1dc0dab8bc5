"""Every next action the CLI prints in the demo home runs when pasted (issue 52): the short demo makes a home with a
campaign, runs, evaluations, a comparison, a RunCard and a gate verdict; the CLI's read commands (text and --json)
and the demo's own console are searched for `bashgym ...` commands, and each is pasted into bash with the same
environment. It must exit 0, or with the refusal its command documents ("exit 7 ..." in its help), or, for a
command that runs until interrupted, be accepted and at work. A placeholder in capitals is allowed only where the
value is truly the user's to choose (ALLOWED_PLACEHOLDERS says why); any other is an id the CLI should have filled."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from bashgym.cli.main import build_parser

from tests.support.helpers import BASHGYM, RunningDaemon, cli, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROJECT = "demo"
# Placeholders a pasted command may keep, and why the CLI cannot fill them. A command holding one is not run.
ALLOWED_PLACEHOLDERS = {
    "BASELINE_RESULT": "the baseline's result on the whole suite does not exist until the eval run before it makes it",
    "N": "how many more runs a budget allows is the amender's decision",
    "REASON": "why a budget is amended is the amender's to say",
    "RECIPE_CHANGE": "the hypothesis a candidate tests is the researcher's",
    "PROJECT": "which project becomes the default is the user's choice",
}
# Text the CLI prints that names a command but is data, not advice.
NOT_ADVICE = {"Created by bashgym demo": "the demo project's description, written by the demo"}
# Commands that work until interrupted: pasted, they must be accepted and at work (their output shows it), then
# they are stopped. An evaluation of the whole suite takes minutes; following a log never ends.
AT_WORK = {
    "bashgym eval run": re.compile(r"\d+/\d+ tasks"),
    "bashgym logs --follow": re.compile(r"\S"),
}
AT_WORK_WITHIN_S = 120
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
# What ends a command inside a sentence: punctuation glued to its last word.
ENDS = ".,;:)`'\""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def command_words(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The words of the one command that `words` start with, as far as the parser knows them: the prose after a
    command (`... (without --limit-tasks)`, `... and bashgym ...`) is not part of it."""
    taken: list[str] = []
    node, positionals = parser, 0
    rest = iter(words)
    for word in rest:
        clean = word.rstrip(ENDS)
        ends = clean != word
        commands = subcommands(node)
        if commands is not None and clean in commands:
            node = commands[clean]
            positionals = sum(1 for a in node._actions if not a.option_strings and subcommands(node) is None)
        elif clean.startswith("-"):
            action = node._option_string_actions.get(clean.split("=", 1)[0])
            if action is None:
                break
            if not ends and action.nargs != 0 and "=" not in clean:
                value = next(rest, "")
                taken.append(clean)
                clean, ends = value.rstrip(ENDS), value.rstrip(ENDS) != value
        elif positionals and commands is None:
            positionals -= 1
        else:
            break
        taken.append(clean)
        if ends:
            break
    return taken


def commands_in(text: str, parser: argparse.ArgumentParser) -> list[str]:
    """Each `bashgym ...` command in `text` (not `.venv/bin/bashgym`, not a word that merely ends in bashgym)."""
    for data in NOT_ADVICE:
        text = text.replace(data, "")
    found = []
    for match in re.finditer(r"(?<![\w/.-])bashgym (?=[a-z])", text):
        words = command_words(parser, text[match.end() :].split())
        if words:
            found.append(" ".join(["bashgym", *words]))
    return found


def strings(document: Any) -> Iterator[str]:
    if isinstance(document, str):
        yield document
    elif isinstance(document, dict):
        for value in document.values():
            yield from strings(value)
    elif isinstance(document, list):
        for value in document:
            yield from strings(value)


def printed_commands(args: list[str], stdout: str, stderr: str, parser: argparse.ArgumentParser) -> list[str]:
    """The commands one CLI answer prints: in a JSON document's strings, and in text and stderr as printed."""
    texts = [stderr]
    if "--json" in args and stdout.strip():
        texts += list(strings(json.loads(stdout)))
    else:
        texts.append(stdout)
    return [command for text in texts for command in commands_in(text, parser)]


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The user's shell: no BASHGYM_* of the machine running the suite, the venv's `bashgym` first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BASHGYM_", "DISCORD"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A demo home from the short demo (10 steps, 16 tasks): text mode, so its console's advice is printed too."""
    home = tmp_path_factory.mktemp("paste") / "home"
    done = subprocess.run(
        [*BASHGYM, "demo", "--home", str(home), "--steps", "10", "--limit-tasks", "16"],
        env=clean_env({}), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return home, done.stdout + done.stderr


@pytest.fixture(scope="module")
def daemon(demo: tuple[Path, str]) -> Iterator[RunningDaemon]:
    with running_daemon(demo[0]) as running:
        yield running


def read_commands(env: dict[str, str]) -> list[list[str]]:
    """What a user reads in the demo home, for every run and campaign it holds."""
    runs = [r["run_id"] for r in cli(env, "run", "list", "--project", PROJECT, "--json").json()]
    listed = cli(env, "campaign", "list", "--project", PROJECT, "--json").json()
    campaigns = [c["campaign_id"] for c in (listed["campaigns"] if isinstance(listed, dict) else listed)]
    assert runs and campaigns, (runs, campaigns)
    p = ["--project", PROJECT]
    reads = [
        ["status"], ["doctor"], ["project", "list"], ["project", "show", PROJECT], ["ledger", "context", *p],
        ["run", "list", *p], ["eval", "results", *p], ["experiment", "list", *p], ["jobs", "list"],
    ]  # fmt: skip
    for run in runs:
        reads += [
            ["run", "show", run, *p], ["promote", "gate", *p, "--run", run],
            ["runcard", "show", *p, "--run", run], ["runcard", "validate", *p, "--run", run],
        ]  # fmt: skip
    for campaign in campaigns:
        reads += [
            ["campaign", "show", campaign, *p], ["campaign", "doctor", campaign, *p],
            ["research", "state", "--campaign", campaign, *p], ["budget", "show", "--campaign", campaign, *p],
        ]  # fmt: skip
    return [args + mode for args in reads for mode in ([], ["--json"])]


def documented_refusals(command: str, parser: argparse.ArgumentParser) -> set[int]:
    """The exit codes besides 0 that a command's help documents ("exit 7 unless it ships"), and the daemon's "already
    running" conflict (6) for the commands that start one."""
    words = command.split()[1:]
    node = parser
    for word in words:
        commands = subcommands(node)
        if commands is None or word not in commands:
            break
        node = commands[word]
    codes = {int(code) for code in re.findall(r"\bexit (\d)", node.description or "")}
    return codes | ({6} if words[:1] in (["up"], ["daemon"]) else set())


def paste(command: str, env: dict[str, str]) -> tuple[int | None, str]:
    """Run `command` in bash as pasted: its exit code, or None where it is accepted and at work (then stopped)."""
    at_work = next((sign for prefix, sign in AT_WORK.items() if command.startswith(prefix)), None)
    with subprocess.Popen(
        ["bash", "-c", command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True)
        reader.start()
        deadline = time.monotonic() + (AT_WORK_WITHIN_S if at_work else 180)
        while proc.poll() is None and time.monotonic() < deadline:
            if at_work is not None and at_work.search("".join(output)):
                proc.terminate()
                proc.wait(timeout=10)
                reader.join(timeout=10)
                return None, "".join(output)
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()  # past its deadline: reported with the exit code of the kill
        code = proc.wait(timeout=10)
        reader.join(timeout=10)
    return code, "".join(output)


def test_every_next_action_printed_in_the_demo_home_runs_when_pasted(
    demo: tuple[Path, str], daemon: RunningDaemon
) -> None:
    parser = build_parser()
    env = clean_env({"BASHGYM_HOME": str(daemon.home), "BASHGYM_API": daemon.url})
    reads = read_commands(env)
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda args: (args, cli(env, *args)), reads))
    found: dict[str, str] = {command: "bashgym demo" for command in commands_in(demo[1], parser)}
    for args, answer in answers:
        assert answer.code in {0, *documented_refusals(" ".join(["bashgym", *args]), parser)}, (args, answer)
        for command in printed_commands(args, answer.stdout, answer.stderr, parser):
            found.setdefault(command, "bashgym " + " ".join(args))
    # The demo's gate blocks its 10-step candidate, and says how to evaluate it and what to compare.
    assert any(c.startswith("bashgym eval run --project demo --run ") for c in found), found

    with_placeholders = {c: [w for w in c.split() if PLACEHOLDER.match(w)] for c in found}
    unfilled = {
        c: (found[c], words) for c, words in with_placeholders.items() if set(words) - set(ALLOWED_PLACEHOLDERS)
    }
    assert not unfilled, f"placeholders the CLI could fill (printed by): {unfilled}"
    failed = {}
    for command in sorted(c for c, words in with_placeholders.items() if not words):
        code, output = paste(command, env)
        if code is not None and code not in {0, *documented_refusals(command, parser)}:
            failed[command] = (found[command], code, output[-800:])
    assert not failed, f"next actions that do not run when pasted (printed by, exit code, output): {failed}"
