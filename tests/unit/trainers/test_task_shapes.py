"""The detector of judged tasks in training text: recall on seeds it never saw, no false positives elsewhere."""

from __future__ import annotations

import pytest
from bashgym.trainers.contracts.datasets import check_unjudged
from bashgym.trainers.environments.task_shapes import (
    SKELETON_SEEDS,
    JudgedTask,
    evaluation_task_in,
    families_in,
    judged_task_in,
)
from bashgym.trainers.environments.terminal_tasks import (
    FAMILIES,
    default_suite,
    generate_suite,
    holdout_families,
    task_prompt,
    training_families,
)

UNSEEN_SEEDS = range(1000, 1012)  # far from the seeds the skeletons were collected from
assert not set(UNSEEN_SEEDS) & set(SKELETON_SEEDS)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_instance_of_unseen_seeds_is_recognised_as_its_own_family_and_no_other(family: str) -> None:
    tasks = [t for seed in UNSEEN_SEEDS for t in generate_suite(seed=seed, per_family=12) if t.task_family == family]
    found = {t.task_id + f"@{i}": families_in(task_prompt(t)) for i, t in enumerate(tasks)}
    assert all(families == [family] for families in found.values()), {k: v for k, v in found.items() if v != [family]}
    assert all(families_in(t.instruction) == [family] for t in tasks)  # the instruction alone is enough


def test_a_held_out_instruction_is_recognised_reworded_around_renamed_and_respaced() -> None:
    family = sorted(holdout_families())[0]
    task = next(t for t in generate_suite(seed=2024, per_family=4) if t.task_family == family)
    stem = next(name for name in task.files).split("/")[0].split(".")[0]
    renamed = task.instruction.replace(stem, "quarterly_figures")  # a file name the generator never draws
    text = "You are a careful shell user.\n\n" + "  \n".join(renamed.split(" ")) + "\nThink step by step."
    assert judged_task_in(text) == JudgedTask(family=family, held_out=tuple(sorted(holdout_families())))


def test_trained_families_of_training_seeds_are_not_judged() -> None:
    """gold_sft_rows of the trained families pass: no false positive on what training may hold."""
    suite = default_suite()
    flagged = [
        t.task_id
        for seed in range(1, 6)
        for t in generate_suite(seed=seed, per_family=20)
        if t.task_family in training_families()
        and all(t.instruction != e.instruction or t.files != e.files for e in suite.tasks)
        and judged_task_in(task_prompt(t)) is not None
    ]
    assert flagged == []


def test_every_evaluation_instance_is_recognised_by_its_id_and_a_namesake_with_other_files_is_not() -> None:
    suite = default_suite()
    for task in suite.tasks:
        assert judged_task_in(task_prompt(task)) == JudgedTask(family=task.task_family, task_id=task.task_id)
    # Training instances that ask an evaluation task's very instruction over other files are other tasks.
    instructions = {t.instruction: t for t in suite.tasks}
    namesakes = [
        t
        for seed in range(1, 6)
        for t in generate_suite(seed=seed, per_family=20)
        if t.instruction in instructions and t.files and t.files != instructions[t.instruction].files
    ]
    assert namesakes, "the generator draws no namesake in seeds 1-5; pick seeds that do"
    assert [evaluation_task_in(task_prompt(t)) for t in namesakes] == [None] * len(namesakes)


def test_the_contract_names_the_field_the_task_is_in() -> None:
    held_out = next(t for t in generate_suite(seed=9, per_family=3) if t.task_family in holdout_families())
    evaluation, ask = default_suite().tasks[0], held_out.instruction
    rows = {
        "messages.1.content": {"messages": [{"role": "system", "content": "Hi."}, {"role": "user", "content": ask}]},
        "text": {"text": f"Q: {task_prompt(evaluation)}\nA: {evaluation.gold}"},
        "prompt.0.content": {"prompt": [{"role": "user", "content": held_out.instruction}]},
        "hinted_context": {"original_context": "$ ", "hinted_context": f"Hint: {held_out.instruction}\n$ "},
    }
    for field, row in rows.items():
        [(where, code, message)] = check_unjudged(row)
        assert where == field
        if field == "text":
            assert code == "evaluation_task" and evaluation.task_id in message
        else:
            assert code == "held_out_family" and f"asks a {held_out.task_family} task" in message
    assert check_unjudged({"prompt": "Count the lines in notes.txt, please."}) == []
