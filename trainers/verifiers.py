"""Reward from verifiers: the interface GRPO and RLVR call, and the two verifier kinds rows can carry inline.

Isolation here is a scratch directory, a scrubbed environment and a timeout; the sandbox of the
terminal-task environments (network namespace, resource limits, tamper checks) replaces `run_command`
behind the same interface when it lands.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
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
    """Run the model's command in a fresh scratch directory, then the check; passed when the check exits 0.

    The command is also left in `command.sh`, so a check may judge what was run as well as its effects.
    """
    with tempfile.TemporaryDirectory(prefix="bashgym-verify-") as scratch:
        root = Path(scratch)
        for name, content in files.items():
            target = (root / name).resolve()
            if root.resolve() not in target.parents:
                raise ValueError(f"verifier file {name!r} points outside the scratch directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        (root / "command.sh").write_text(command + "\n")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": scratch, "LC_ALL": "C.UTF-8"}
        try:
            subprocess.run(
                ["bash", "-c", command], cwd=scratch, env=env, timeout=timeout_s, capture_output=True, check=False
            )
            verdict = subprocess.run(
                ["bash", "-c", check], cwd=scratch, env=env, timeout=timeout_s, capture_output=True, check=False
            )
        except subprocess.TimeoutExpired:
            return False
        return verdict.returncode == 0


def score(verifier: dict[str, Any], completion: Any) -> float:
    """1.0 when the completion passes the row's verifier, else 0.0."""
    text = completion_text(completion)
    kind = verifier.get("kind", "exact_match")
    if kind == "exact_match":
        return float(_normalise(text) == _normalise(str(verifier.get("expected", ""))))
    if kind == "command":
        return float(run_command(extract_command(text), dict(verifier.get("files", {})), str(verifier["check"])))
    raise ValueError(f"verifier kind {kind!r} has no runner here; use exact_match or command")


def reward_function(
    prompts: list[Any], completions: list[Any], verifier: list[dict[str, Any]] | None = None, **_: Any
) -> list[float | None]:
    """TRL reward function: one float per completion, from the row's own verifier."""
    if verifier is None:
        raise ValueError("rows need a `verifier` object for rewards")
    return [score(v, c) for v, c in zip(verifier, completions, strict=True)]
