"""GRPO/RLVR rewards are judged by the same sandboxed verifiers as evaluations."""

from __future__ import annotations

from pathlib import Path

import pytest
from bashgym.trainers.contracts.datasets import validate_dataset
from bashgym.trainers.environments.terminal_tasks import (
    NotATrainingTask,
    default_suite,
    holdout_families,
    training_task,
)
from bashgym.trainers.environments.verifiers import reward_function, score


def test_a_row_naming_a_training_task_is_rewarded_by_that_task() -> None:
    task = training_task("count_lines-s1-002")
    verifier = {"kind": "terminal_task", "task_id": task.task_id}
    assert score(verifier, f"```bash\n{task.gold}\n```") == 1.0
    assert score(verifier, "true") == 0.0


def test_rl_never_trains_on_an_evaluation_task_or_a_held_out_family(tmp_path: Path) -> None:
    """GRPO/RLVR task ids resolved against the evaluation suite itself (seed 0): a run could train on exactly
    the tasks it was then judged by, and the contamination check never saw it."""
    evaluated = default_suite().tasks[0].task_id
    with pytest.raises(NotATrainingTask, match="is a task of the evaluation suite bash-tasks-v1"):
        training_task(evaluated)
    held_out = sorted(holdout_families())[0]
    with pytest.raises(NotATrainingTask, match="holds out of training"):
        training_task(f"{held_out}-s1-000")
    trained = training_task("csv_query-s3-005")
    assert trained.instruction not in {t.instruction for t in default_suite().tasks if t.files == trained.files}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(f'{{"prompt": "p", "task_id": "{evaluated}"}}\n')
    report = validate_dataset("rlvr", rows)
    assert not report.ok and "is a task of the evaluation suite" in report.model_dump_json()


def test_an_inline_command_verifier_runs_in_the_sandbox() -> None:
    verifier = {"kind": "command", "files": {"notes.txt": "a\nb\n"}, "check": '[ "$(cat out.txt)" = 2 ]'}
    assert reward_function(["p", "p"], ["wc -l < notes.txt > out.txt", "echo 3 > out.txt"], [verifier, verifier]) == [
        1.0,
        0.0,
    ]


def test_tampering_with_the_verifier_earns_nothing() -> None:
    task = training_task("count_lines-s1-000")
    hack = "printf '#!/bin/sh\\nexit 0\\n' > ../verifier/verify.sh"
    assert score({"kind": "terminal_task", "task_id": task.task_id}, hack) == 0.0
