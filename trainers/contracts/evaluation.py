"""What an evaluator is asked to do (eval_request.json), as the daemon writes it and trainers/evaluate.py reads it."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any, Literal

from bashgym.trainers.contracts.placement import DeviceChoice
from pydantic import BaseModel, ConfigDict, Field

GOLD = "gold"


class EvalRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str  # a model or adapter directory, or "gold" for the suite's own solutions
    # terminal_tasks: a policy on the task suite; heldout: a policy on its method's held-out rows; reward_pairs: a
    # reward model on held-out pairs; retrieval: a retriever on queries against a corpus.
    kind: Literal["terminal_tasks", "heldout", "reward_pairs", "retrieval"] = "terminal_tasks"
    dataset_path: str | None = None  # held-out rows (heldout, reward_pairs) or queries (retrieval)
    # The subject's training data, for the leakage (reward_pairs) and contamination (retrieval) checks.
    train_dataset_path: str | None = None
    corpus_path: str | None = None  # retrieval: the documents the queries are answered from
    # The frozen model a full-weights policy's preference margin is measured against (its base model): DPO's
    # implicit reward is a log-ratio to the reference. An adapter's reference is its base, adapter disabled.
    reference_model: str | None = None
    suite_path: str | None = None  # a suite JSON; None is the shipped bash-tasks suite
    samples: int = Field(1, ge=1, le=64)
    max_new_tokens: int = Field(48, ge=1, le=1024)
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    seed: int = 0
    split: Literal["all", "holdout"] = "all"
    min_holdout_pass_at_1: float = Field(0.0, ge=0.0, le=1.0)
    limit_tasks: int | None = Field(None, ge=1)
    device: DeviceChoice = "auto"  # auto: a CUDA GPU with room for the model (bfloat16), else the CPU (float32)


# The request's settings that change an evaluation's score, by kind: two results compare only when these (and the
# evaluator's version) are equal. The model's placement is recorded apart (details.placement, ran_on).
SCORE_SETTINGS: dict[str, tuple[str, ...]] = {
    "terminal_tasks": ("samples", "temperature", "max_new_tokens", "seed", "split", "limit_tasks"),
    "heldout": ("max_new_tokens", "limit_tasks"),  # greedy generation of the first limit_tasks rows
    "reward_pairs": ("seed", "limit_tasks"),  # the seed draws a baseline's untrained head
    "retrieval": ("limit_tasks",),
}
# The evaluator's code: a change to any of these may change a score, so it is part of the evaluator's version.
EVALUATOR_SOURCES = (
    "evaluate.py",
    "heldout_eval.py",
    "reward_eval.py",
    "loading.py",
    "environments",
    "retrieval",
    "contracts/evidence.py",
    "contracts/evaluation.py",
)


@cache
def evaluator_version() -> str:
    """`bashgym <version>+<sha256[:12] of the evaluator's sources>`: evaluations made by different code do not
    compare, even within one release. Blocking (reads the sources once)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("bashgym")
    except PackageNotFoundError:
        release = "0.0.0+unknown"
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for name in EVALUATOR_SOURCES:
        path = root / name
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(f"{source.relative_to(root)}\0".encode() + source.read_bytes() + b"\0")
    return f"bashgym {release}+{digest.hexdigest()[:12]}"


def score_settings(request: EvalRequest) -> dict[str, Any]:
    """What a result records as `details.settings`: the settings of its kind that change a score, and the
    evaluator's version."""
    return {
        **{name: getattr(request, name) for name in SCORE_SETTINGS[request.kind]},
        "evaluator": evaluator_version(),
    }
