"""Reward models with TRL's RewardTrainer: a scalar head over a causal LM, trained on strict reward examples
(prompt, chosen, rejected) with the Bradley-Terry loss. The trainer scores `prompt + answer + eos` as one text;
trainers/reward_eval.py scores held-out pairs the same way."""

from __future__ import annotations

from typing import Any

from bashgym.trainers.contracts.fields import method_args
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.loading import lora_config, preference_pairs
from bashgym.trainers.methods.common import eval_args
from trl import RewardConfig, RewardTrainer


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    config = RewardConfig(**args, **eval_args(request), max_length=method_args(request)["max_length"])
    eval_dataset = preference_pairs(request.eval_dataset_path) if request.eval_dataset_path else None
    return RewardTrainer(
        model=model,
        args=config,
        train_dataset=preference_pairs(request.dataset_path),
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=lora_config(request),
    )
