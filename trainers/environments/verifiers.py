"""Reward from verifiers: the interface GRPO and RLVR call, and the verifier kinds rows can carry.

`terminal_task` scores against a task of the shipped suite by id; `command` runs an inline check
after the model's command; both run in the terminal-task sandbox (trainers/environments/sandbox.py), so a reward
is judged exactly as an evaluation is, tamper checks included. An inline check is written by whoever
registered the dataset, not by us: it is an untrusted verifier and runs inside the attempt's sandbox
too. `exact_match` compares text.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

TIMEOUT_S = 10.0


def completion_text(completion: Any) -> str:
    """TRL passes a string, or a list of chat messages for conversational prompts."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def extract_command(text: str) -> str:
    """The shell command in a completion: a fenced block if present, else the first non-empty line."""
    fenced = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    if fenced:
        return fenced.group(1).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _normalise(text: str) -> str:
    return " ".join(text.split()).strip().lower()


def run_command(command: str, files: dict[str, str], check: str, *, timeout_s: float = TIMEOUT_S) -> bool:
    """Run the model's command in a sandbox holding `files`, then `check` confined to that sandbox; passed
    when the check exits 0. The command is also left in `command.sh`, so a check may judge what was run."""
    from bashgym.trainers.environments.sandbox import run_attempt
    from bashgym.trainers.environments.terminal_tasks import TerminalTask

    task = TerminalTask(
        task_id="inline-000",
        task_family="inline",
        instruction="(an inline verifier)",
        files={**files, "command.sh": command + "\n"},
        verifier=f'cd "$SANDBOX" && {check}',
        fixtures={},
        gold="true",
        timeout_s=timeout_s,
        verifier_trust="untrusted",  # the dataset's author wrote it: it runs where the attempt ran
    )
    return run_attempt(task, command).passed


@functools.cache
def run_task(task_id: str, command: str) -> bool:
    """Run the model's command as an attempt of the training instance `task_id` names (never an evaluation task:
    terminal_tasks.training_task)."""
    from bashgym.trainers.environments.sandbox import run_attempt
    from bashgym.trainers.environments.terminal_tasks import training_task

    return run_attempt(training_task(task_id), command).passed


def score(verifier: dict[str, Any], completion: Any) -> float:
    """1.0 when the completion passes the row's verifier, else 0.0."""
    text = completion_text(completion)
    kind = verifier.get("kind", "exact_match")
    if kind == "exact_match":
        return float(_normalise(text) == _normalise(str(verifier.get("expected", ""))))
    if kind == "command":
        return float(run_command(extract_command(text), dict(verifier.get("files", {})), str(verifier["check"])))
    if kind == "terminal_task":
        return float(run_task(str(verifier["task_id"]), extract_command(text)))
    raise ValueError(f"verifier kind {kind!r} has no runner here; use exact_match, command or terminal_task")


def reward_function(
    prompts: list[Any], completions: list[Any], verifier: list[dict[str, Any] | str] | None = None, **_: Any
) -> list[float | None]:
    """TRL reward function: one float per completion, from the row's own verifier (an object, or its JSON text)."""
    if verifier is None:
        raise ValueError("rows need a `verifier` object for rewards")
    own = [json.loads(v) if isinstance(v, str) else v for v in verifier]
    return [score(v, c) for v, c in zip(own, completions, strict=True)]
