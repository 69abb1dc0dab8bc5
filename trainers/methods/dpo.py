"""Direct preference optimisation with TRL's DPOTrainer on same-prompt pairs."""

from __future__ import annotations

from typing import Any

from bashgym.trainers.contracts.fields import method_args
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.loading import lora_config, preference_pairs
from bashgym.trainers.methods.common import eval_args
from trl import DPOConfig, DPOTrainer


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    settings = method_args(request)
    config = DPOConfig(**args, **eval_args(request), beta=settings["beta"], max_length=settings["max_length"])
    eval_dataset = preference_pairs(request.eval_dataset_path) if request.eval_dataset_path else None
    # With LoRA the frozen base (adapter disabled) is the reference, so no second model is loaded.
    return DPOTrainer(
        model=model,
        ref_model=None,
        args=config,
        train_dataset=preference_pairs(request.dataset_path),
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=lora_config(request),
    )
