"""The terminal-task suite: every gold passes its own verifier as nobody, doing nothing passes none."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import pytest
from bashgym.trainers.environments.terminal_tasks import (
    FAMILIES,
    SuiteDefinition,
    TerminalTask,
    default_suite,
    generate_suite,
    load_suite,
    task_prompt,
    write_suite,
)

PATH = "/usr/local/bin:/usr/bin:/bin"
NOBODY = 65534
# As root, attempts run as nobody like the real sandbox does, so a gold that needs root fails here.
IS_ROOT = os.geteuid() == 0
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if IS_ROOT else []


def _write_tree(root: Path, files: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


def _chown_tree(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def _run_in_sandbox(sandbox: Path, command: str, *, timeout_s: float, stdout: IO[bytes] | None = None) -> int:
    # The environment the real sandbox gives setup and attempts alike.
    env = {"PATH": PATH, "HOME": str(sandbox), "LANG": "C.UTF-8", "TMPDIR": str(sandbox)}
    done = subprocess.run(
        [*AS_NOBODY, "bash", "-c", command],
        cwd=sandbox,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=timeout_s,
        check=False,
    )
    return done.returncode


def attempt(task: TerminalTask, command: str) -> bool:
    """Judge one command the way the sandbox does: setup and the attempt as nobody, then the verifier."""
    with tempfile.TemporaryDirectory(prefix="bashgym-task-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)  # nobody must reach the sandbox inside this root-owned directory
        sandbox, fixtures, output = root / "sandbox", root / "fixtures", root / "output.txt"
        _write_tree(sandbox, task.files)
        _write_tree(fixtures, task.fixtures)
        if IS_ROOT:
            _chown_tree(sandbox)
        try:
            if _run_in_sandbox(sandbox, task.setup, timeout_s=task.timeout_s) != 0:
                raise RuntimeError(f"setup of {task.task_id} failed as nobody: {task.setup!r}")
            with output.open("wb") as out:
                _run_in_sandbox(sandbox, command, timeout_s=task.timeout_s, stdout=out)
        except subprocess.TimeoutExpired:
            return False
        judged = {"PATH": PATH, "SANDBOX": str(sandbox), "OUTPUT": str(output), "FIXTURES": str(fixtures)}
        verdict = subprocess.run(
            ["sh", "-c", task.verifier], cwd=fixtures, env=judged, capture_output=True, timeout=task.timeout_s
        )
        return verdict.returncode == 0


def judge_all(tasks: list[TerminalTask], command_for: Callable[[int, TerminalTask], str]) -> list[bool]:
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(lambda it: attempt(it[1], command_for(*it)), enumerate(tasks)))


@pytest.fixture(scope="module")
def suite() -> SuiteDefinition:
    return default_suite()


def test_default_suite_is_large_and_distinct(suite: SuiteDefinition) -> None:
    tasks = suite.tasks
    assert len(tasks) >= 80
    assert len({t.task_family for t in tasks}) >= 10
    assert {t.task_family for t in tasks} == set(FAMILIES)
    assert len({t.task_id for t in tasks}) == len(tasks)
    assert len({t.definition_digest() for t in tasks}) == len(tasks)


def test_generation_is_deterministic_per_seed() -> None:
    first = [t.definition_digest() for t in generate_suite(seed=0)]
    assert first == [t.definition_digest() for t in generate_suite(seed=0)]
    other = {t.definition_digest() for t in generate_suite(seed=1)}
    assert not other & set(first)


def test_definition_digest_ignores_the_id(suite: SuiteDefinition) -> None:
    task = suite.tasks[0]
    renamed = task.model_copy(update={"task_id": "count_lines-999"})
    assert renamed.definition_digest() == task.definition_digest()
    changed = task.model_copy(update={"gold": task.gold + " "})
    assert changed.definition_digest() != task.definition_digest()


def test_file_paths_must_stay_inside_the_sandbox(suite: SuiteDefinition) -> None:
    fields = suite.tasks[0].model_dump()
    with pytest.raises(ValueError, match="must be relative"):
        TerminalTask.model_validate(fields | {"files": {"../escape.txt": "x"}})


def test_every_gold_passes_as_nobody(suite: SuiteDefinition) -> None:
    verdicts = judge_all(suite.tasks, lambda _i, task: task.gold)
    failed = [t.task_id for t, ok in zip(suite.tasks, verdicts, strict=True) if not ok]
    print(f"gold pass rate: {sum(verdicts)}/{len(verdicts)} (as {'nobody' if IS_ROOT else 'the current user'})")
    assert not failed


def test_doing_nothing_passes_no_task(suite: SuiteDefinition) -> None:
    verdicts = judge_all(suite.tasks, lambda _i, _task: "true")
    assert [t.task_id for t, ok in zip(suite.tasks, verdicts, strict=True) if ok] == []


def test_a_neighbours_gold_is_a_wrong_answer(suite: SuiteDefinition) -> None:
    tasks = suite.tasks
    verdicts = judge_all(tasks, lambda i, _task: tasks[(i + 1) % len(tasks)].gold)
    assert [t.task_id for t, ok in zip(tasks, verdicts, strict=True) if ok] == []


def test_prompt_names_files_and_asks_for_one_command(suite: SuiteDefinition) -> None:
    task = next(t for t in suite.tasks if t.task_family == "sort_lines")
    prompt = task_prompt(task)
    assert prompt.startswith(task.instruction)
    assert all(f"- {name}" in prompt for name in task.files)
    assert prompt.endswith("Answer with one shell command.")
    assert prompt == task_prompt(task)
    assert all(name not in prompt for name in task.fixtures)


def test_suite_round_trips_through_json(suite: SuiteDefinition, tmp_path: Path) -> None:
    path = tmp_path / "suite.json"
    write_suite(suite, path)
    assert load_suite(path).digest() == suite.digest()


def test_tools_the_suite_relies_on_are_installed() -> None:
    missing = [tool for tool in ("sh", "bash", "tar", "gzip", "awk", "sed", "stat") if shutil.which(tool) is None]
    assert not missing


def test_gold_sft_rows_never_hold_a_task_of_the_evaluation_suite() -> None:
    from bashgym.trainers.environments.terminal_tasks import gold_sft_rows

    evaluation = default_suite().tasks
    rows = gold_sft_rows(range(1, 3), per_family=20, exclude=evaluation)
    prompts = {task_prompt(t) for t in evaluation}
    assert rows and not any(row["messages"][0]["content"] in prompts for row in rows)
    assert {row["messages"][1]["content"] for row in rows} and all(len(row["messages"]) == 2 for row in rows)
    assert len(gold_sft_rows([1], per_family=20, families=["archive"])) == 20
