"""What an evaluator is asked to do (eval_request.json), as the daemon writes it and trainers/evaluate.py reads it."""

from __future__ import annotations

from typing import Literal

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
