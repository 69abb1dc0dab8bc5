"""The six strategies; each builds a TRL (or TRL-derived) trainer for one request."""

from __future__ import annotations

from typing import Any

import torch
from bashgym.trainers.reporting import ReportingCallback
from bashgym.trainers.rundir import RunDirectory
from bashgym.trainers.specs import TrainingRequest


def common_args(request: TrainingRequest, run: RunDirectory) -> dict[str, Any]:
    """TrainingArguments every strategy shares; field names map one to one from the request."""
    cuda = torch.cuda.is_available()
    return {
        "output_dir": str(run.root),
        "num_train_epochs": request.num_epochs,
        "max_steps": request.max_steps,
        "per_device_train_batch_size": request.batch_size,
        "gradient_accumulation_steps": request.gradient_accumulation_steps,
        "learning_rate": request.learning_rate,
        "warmup_steps": request.warmup_ratio,  # a float below 1 is a fraction of the run in transformers 5
        "lr_scheduler_type": request.lr_scheduler_type,
        **(
            {} if request.gradient_checkpointing is None else {"gradient_checkpointing": request.gradient_checkpointing}
        ),
        "logging_steps": request.logging_steps,
        "save_steps": request.save_steps,
        "save_total_limit": request.checkpoint_limit,
        "seed": request.seed,
        "data_seed": request.seed,
        "report_to": "none",
        "disable_tqdm": True,
        "use_cpu": not cuda,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
        "dataloader_num_workers": 0,
    }


def eval_args(request: TrainingRequest) -> dict[str, Any]:
    """Evaluate on eval_dataset_path every save_steps (it logs eval.loss), when one is given."""
    if not request.eval_dataset_path:
        return {}
    return {
        "eval_strategy": "steps",
        "eval_steps": request.save_steps,
        "per_device_eval_batch_size": request.batch_size,
    }


def build_trainer(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory) -> Any:
    match request.strategy:
        case "sft":
            from bashgym.trainers.strategies.sft import build
        case "dpo":
            from bashgym.trainers.strategies.dpo import build
        case "grpo" | "rlvr":
            from bashgym.trainers.strategies.grpo import build
        case "distillation":
            from bashgym.trainers.strategies.distillation import build
        case "session_distillation":
            from bashgym.trainers.strategies.session import build
    trainer = build(request, model, tokenizer, run, common_args(request, run))
    trainer.add_callback(ReportingCallback(run))
    return trainer
