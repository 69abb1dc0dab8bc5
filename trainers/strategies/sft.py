"""Supervised fine-tuning with TRL's SFTTrainer on `messages` or `text` rows."""

from __future__ import annotations

import warnings
from typing import Any

from bashgym.trainers.modeling import load_rows, lora_config
from bashgym.trainers.rundir import RunDirectory
from bashgym.trainers.specs import TrainingRequest
from bashgym.trainers.strategies import eval_args
from datasets import Dataset
from trl import SFTConfig, SFTTrainer


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    train = _dataset(request.dataset_path)
    # `packing` (best-fit decreasing, padding-free: position ids restart per sequence, so attention never
    # crosses a boundary) and `use_liger_kernel` come in `args` from the run's SpeedPlan.
    config = SFTConfig(
        **args,
        **eval_args(request),
        max_length=request.max_seq_length,
        assistant_only_loss=_assistant_only(train, tokenizer),
    )
    eval_dataset = _dataset(request.eval_dataset_path) if request.eval_dataset_path else None
    with warnings.catch_warnings():
        # TRL 1.16 deprecates use_liger_kernel for Hub kernels, which an offline trainer cannot fetch; Liger's
        # installed kernels are still the ones this machine has.
        warnings.filterwarnings("ignore", message="`use_liger_kernel=True` is deprecated", category=FutureWarning)
        return SFTTrainer(
            model=model,
            args=config,
            train_dataset=train,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            peft_config=lora_config(request),
        )


def _assistant_only(train: Dataset, tokenizer: Any) -> bool:
    """Chat rows learn the assistant's turns only, when the chat template marks them ({% generation %}):
    the prompt's tokens, file contents included, are context, not targets. A template without the
    markers (most hub models') trains on whole conversations, as TRL does by default."""
    if "messages" not in train.column_names:
        return False
    marked = "generation" in str(getattr(tokenizer, "chat_template", "") or "")
    if not marked:
        print("sft: the chat template has no {% generation %} markers; the loss covers whole conversations", flush=True)
    return marked


def _dataset(path: str) -> Dataset:
    # Keep only the columns SFT reads, so rows carrying extra metadata still collate.
    return Dataset.from_list([{k: row[k] for k in ("messages", "text") if k in row} for row in load_rows(path)])
