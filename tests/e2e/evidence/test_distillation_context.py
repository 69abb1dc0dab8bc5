"""Distillation trains beside the whole conversation on both paths (issue 51, item 10), through a real daemon.

From recorded teacher responses, a conversation prompt kept only its last user turn: its system message and earlier
turns were dropped, where the on-policy path (a teacher model) keeps them all. Each run's log says how much of the
prompts its student trained beside (turns kept of those sent, system messages, context tokens): the same line from
both paths, and the same figures for the same prompts. Two tiny runs of two steps each on the same two rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, train_all

# Two distillation runs train (~30 s on 2 cores): the default suite keeps the trainer-level test of the recorded
# path's whole conversation (tests/unit/trainers/test_distillation_prompts.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PROJECT = "nightly"
CONVERSATION = [
    {"role": "system", "content": "Answer with one shell command and nothing else."},
    {"role": "user", "content": "Which shell am I in?"},
    {"role": "assistant", "content": "echo $SHELL"},
    {"role": "user", "content": "Now show the size of the quarterly ledger archive."},
]
ROWS = [
    {"prompt": CONVERSATION, "teacher_response": "du -h ledger-archive.tar"},
    {"prompt": [*CONVERSATION[:-1], {"role": "user", "content": "And its owner?"}], "teacher_response": "stat -c %U x"},
]
# Two conversations of four turns each, one system message apiece, every turn kept.
WHOLE = "distillation: context: 8 of 8 prompt turns kept (2 system)"
CONTEXT_LINE = re.compile(r"distillation: context: (\d+) of (\d+) prompt turns kept \((\d+) system\), (\d+) context")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("home"), PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def runs(daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The same rows distilled from their recorded responses and on-policy from a teacher, both completed."""
    root = tmp_path_factory.mktemp("distill")
    student, teacher = build_tiny(root / "student"), build_tiny(root / "teacher", teacher=True)
    data = root / "conversations.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    steps = {"method": "distillation", "max_steps": 2, "batch_size": 2, "save_steps": 100, "max_seq_length": 256}
    requests = {
        "recorded": training_request(student, data, **steps),
        "on_policy": training_request(
            student, data, **steps, teacher_model=str(teacher), distillation_max_completion_length=4
        ),
    }
    with daemon.client() as admin:
        return train_all(admin, PROJECT, requests)


def context_line(daemon: RunningDaemon, run_id: str) -> str:
    """The run's context line, read through the API and the CLI (which must agree)."""
    with daemon.client() as admin:
        logged = admin.get(f"/v1/projects/{PROJECT}/runs/{run_id}/log", params={"tail": 2000})
    assert logged.status_code == 200, logged.text
    lines = [line for line in logged.json()["lines"] if CONTEXT_LINE.search(line)]
    assert len(lines) == 1, logged.json()["lines"][-40:]
    shown = cli(daemon.env(), "training", "log", "--project", PROJECT, "--tail", "2000", run_id)
    assert shown.code == 0, shown.stderr
    assert lines[0].strip() in shown.stdout, shown.stdout[-3000:]
    return str(lines[0])


def test_recorded_responses_train_beside_the_whole_conversation(
    daemon: RunningDaemon, runs: dict[str, dict[str, Any]]
) -> None:
    line = context_line(daemon, runs["recorded"]["run_id"])
    # Before: "2 of 8 prompt turns kept (0 system)": each row's last user turn alone.
    assert WHOLE in line, line


def test_the_on_policy_path_reports_the_same_context_for_the_same_prompts(
    daemon: RunningDaemon, runs: dict[str, dict[str, Any]]
) -> None:
    recorded = CONTEXT_LINE.search(context_line(daemon, runs["recorded"]["run_id"]))
    on_policy = CONTEXT_LINE.search(context_line(daemon, runs["on_policy"]["run_id"]))
    assert recorded and on_policy
    # The same turns, and the same number of context tokens: the recorded path's counted from the examples TRL
    # tokenized (the tokens it masks out of the labels), the on-policy path's as its trainer renders each prompt.
    assert recorded.groups() == on_policy.groups(), (recorded.group(0), on_policy.group(0))
    assert int(recorded.group(4)) > 0
