"""A tiny reward model through a real daemon: its launch request, its tracking context, and the daemon's own
evaluations polled to the end (the reward-model workflow tests share them)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.factories import tracking_context
from tests.support.reward_pairs import write_jsonl


def context_for(data: Path, experiment: str, **overrides: Any) -> dict[str, Any]:
    """The tracking context of a run on `data`: its dataset version is the file's digest."""
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    return tracking_context(
        experiment_id=experiment,
        dataset_version_id=f"{experiment}-{digest[:12]}",
        dataset_content_digest=digest,
        **overrides,
    )


def reward_model_request(tiny: Path, train: Path, held_out: Path, *, experiment: str = "reward") -> dict[str, Any]:
    """40 steps of a tiny reward model on `train`, held out on `held_out`: enough to learn the synthetic pairs."""
    return {
        "method": "reward_model",
        "base_model": str(tiny),
        "dataset_path": str(train),
        "eval_dataset_path": str(held_out),
        "max_steps": 40,
        "batch_size": 8,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5e-3,
        "save_steps": 20,
        "max_seq_length": 64,
        "tracking_context": context_for(train, experiment),
    }


def evaluate(client: httpx.Client, body: dict[str, Any], *, project: str = "nightly") -> dict[str, Any]:
    """Start an evaluation by the daemon's evaluator and wait for it to complete."""
    started = client.post(f"/v1/projects/{project}/evaluations", json=body)
    assert started.status_code == 202, started.text
    job_id = started.json()["evaluation_id"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        job = client.get(f"/v1/projects/{project}/evaluations/{job_id}").json()
        if job["status"] in {"completed", "failed"}:
            assert job["status"] == "completed", job
            return dict(job)
        time.sleep(0.5)
    raise AssertionError(f"evaluation {job_id} did not finish")


def rewarded_grpo_request(tiny: Path, folder: Path, **context: Any) -> dict[str, Any]:
    """2 steps of GRPO on four prompts whose rewards are a reward model's scores (name it in grpo_reward_model)."""
    prompts = write_jsonl(folder / "prompts.jsonl", [{"prompt": f"Task: inspect fox{i}.\n"} for i in range(4)])
    return {
        "method": "grpo",
        "base_model": str(tiny),
        "dataset_path": str(prompts),
        "max_steps": 2,
        "batch_size": 2,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5e-3,
        "save_steps": 1,
        "grpo_num_generations": 2,
        "grpo_max_completion_length": 8,
        "grpo_reward_source": "reward_model",
        "tracking_context": context_for(prompts, "rewarded", **context),
    }
