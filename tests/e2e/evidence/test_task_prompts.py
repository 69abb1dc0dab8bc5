"""A GRPO/RLVR row that names a training task asks that task: its prompt holds the task's instruction.

Issue 51, item 11: a row's `task_id` was checked to be a training instance, never against its prompt, so a run
could reward a model for answering a question it was never asked ("write a haiku" scored by `count_lines`).
`training validate`, plan and launch now refuse such a row, naming its line and the task with its instruction.
Least privilege: a viewer of the project granted only `training.launch`, the one capability a launch implies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.environments.terminal_tasks import training_task
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project

PROJECT = "nightly"
COUNT = "count_lines-s1-000"
SUM = "sum_column-s2-004"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("task-prompts") / "home", PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def launcher(daemon: RunningDaemon) -> str:
    """A viewer of the project who may launch training there, and nothing else."""
    return issue_token(daemon, "lena", "viewer", project=PROJECT, capabilities=("training.launch",))


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def no_runs(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        listed = admin.get(f"/v1/projects/{PROJECT}/runs")
    assert listed.status_code == 200 and listed.json() == [], listed.text


def asking(task_id: str) -> str:
    return f"You are at a shell.\n{training_task(task_id).instruction}\nAnswer with one command."


@pytest.mark.parametrize("method", ["grpo", "rlvr"])
def test_a_task_row_whose_prompt_asks_another_question_is_refused_by_validate_plan_and_launch(
    daemon: RunningDaemon, launcher: str, tiny: Path, tmp_path: Path, method: str
) -> None:
    rows = [
        {"prompt": asking(COUNT), "task_id": COUNT},
        {"prompt": "Write a haiku about the sea.", "task_id": COUNT},  # line 2: scored by a task it does not ask
        # line 3: a conversation that asks another training task than the one whose verifier scores it
        {"prompt": [{"role": "user", "content": asking(COUNT)}], "verifier": {"kind": "terminal_task", "task_id": SUM}},
    ]
    data = jsonl(tmp_path / f"{method}-prompts.jsonl", rows)
    wanted = {2: (COUNT, training_task(COUNT).instruction), 3: (SUM, training_task(SUM).instruction)}

    validated = cli(daemon.env(), "training", "validate", "--method", method, "--dataset", str(data))
    assert validated.code == 7, (validated.stdout, validated.stderr)
    for line, (task_id, instruction) in wanted.items():
        assert f"{data}:{line} prompt: The row's reward scores task {task_id}" in validated.stderr, validated.stderr
        assert repr(instruction) in validated.stderr  # what to put in the prompt instead
    assert f"{data}:1 " not in validated.stderr  # the row that asks its task passes
    assert "prompt_not_the_task: 2" in validated.stderr, validated.stderr

    request = training_request(tiny, data, method=method)
    with tenant(daemon, launcher) as api:
        plan = api.post("/v1/training/plan", json=request)
        assert plan.status_code == 200, plan.text
        assert not plan.json()["ready"]
        said = " ".join(plan.json()["reasons"])
        assert "prompt_not_the_task: 2" in said and f"scores task {COUNT}" in said, plan.json()["reasons"]
        started = api.post("/v1/training/start", json=request)
        assert started.status_code == 422, started.text
        error = started.json()["error"]
        assert error["details"]["summary"] == {"prompt_not_the_task": 2}, error
        assert f"{data.name}:2" in started.text and f"scores task {COUNT}" in started.text, started.text
    no_runs(daemon)


@pytest.mark.parametrize("method", ["grpo", "rlvr"])
def test_task_rows_that_ask_their_tasks_are_ready_to_plan(
    daemon: RunningDaemon, launcher: str, tiny: Path, tmp_path: Path, method: str
) -> None:
    rows = [
        {"prompt": asking(COUNT), "task_id": COUNT},
        # spacing aside, the conversation asks the task its verifier scores
        {
            "prompt": [{"role": "user", "content": "  ".join(training_task(SUM).instruction.split(" "))}],
            "verifier": {"kind": "terminal_task", "task_id": SUM},
        },
    ]
    data = jsonl(tmp_path / f"{method}-asked.jsonl", rows)
    validated = cli(daemon.env(), "training", "validate", "--method", method, "--dataset", str(data))
    assert validated.code == 0, validated.stderr
    with tenant(daemon, launcher) as api:
        plan = api.post("/v1/training/plan", json=training_request(tiny, data, method=method))
    assert plan.status_code == 200 and plan.json()["ready"], plan.json()["reasons"]
    no_runs(daemon)
