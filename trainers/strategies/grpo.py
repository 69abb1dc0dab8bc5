"""GRPO and RLVR with TRL's GRPOTrainer; rewards come from executing each row's verifier."""

from __future__ import annotations

import json
from typing import Any

from bashgym.trainers.modeling import load_rows, lora_config
from bashgym.trainers.rundir import RunDirectory
from bashgym.trainers.specs import TrainingRequest
from bashgym.trainers.verifiers import reward_function
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer


def _row(row: dict[str, Any]) -> dict[str, Any]:
    """A row's reward source: its inline verifier, or the shipped terminal task its task_id names.

    The verifier travels as JSON text: an Arrow column of dicts is one struct over every row's keys, so rows whose
    `files` name different files each got every other row's names as None (and an invalid `files` map)."""
    verifier = row.get("verifier")
    if not isinstance(verifier, dict) or verifier.get("kind", "terminal_task") == "terminal_task":
        task_id = (verifier or {}).get("task_id") or row.get("task_id")
        verifier = {"kind": "terminal_task", "task_id": task_id}
    return {"prompt": row["prompt"], "verifier": json.dumps(verifier)}


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    if request.active_sampling:
        raise ValueError(
            "active_sampling (resampling groups until their rewards vary) needs a dynamic-sampling "
            "backend this installation lacks; set active_sampling false."
        )
    if request.lm_head_fp32:
        args = {**args, "cast_lm_head_to_fp32": True}
    # Zero-variance groups get zero advantage in GRPO, so they carry no gradient: filter_zero_std_groups
    # holds by construction, and their share is logged as train.frac_zero_std_groups.
    dataset = Dataset.from_list([_row(row) for row in load_rows(request.dataset_path)])
    config = GRPOConfig(
        **args,
        num_generations=request.grpo_num_generations,
        temperature=request.grpo_temperature,
        max_completion_length=request.grpo_max_completion_length,
        loss_type=request.grpo_loss_type,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[reward_function],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(request),
    )
