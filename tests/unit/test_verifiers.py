"""GRPO/RLVR rewards are judged by the same sandboxed verifiers as evaluations."""

from __future__ import annotations

from bashgym.trainers.terminal_tasks import default_suite
from bashgym.trainers.verifiers import reward_function, score


def test_a_row_naming_a_shipped_task_is_rewarded_by_that_task() -> None:
    task = default_suite().tasks[0]
    verifier = {"kind": "terminal_task", "task_id": task.task_id}
    assert score(verifier, f"```bash\n{task.gold}\n```") == 1.0
    assert score(verifier, "true") == 0.0


def test_an_inline_command_verifier_runs_in_the_sandbox() -> None:
    verifier = {"kind": "command", "files": {"notes.txt": "a\nb\n"}, "check": '[ "$(cat out.txt)" = 2 ]'}
    assert reward_function(["p", "p"], ["wc -l < notes.txt > out.txt", "echo 3 > out.txt"], [verifier, verifier]) == [
        1.0,
        0.0,
    ]


def test_tampering_with_the_verifier_earns_nothing() -> None:
    task = default_suite().tasks[0]
    hack = "printf '#!/bin/sh\\nexit 0\\n' > ../verifier/verify.sh"
    assert score({"kind": "terminal_task", "task_id": task.task_id}, hack) == 0.0
