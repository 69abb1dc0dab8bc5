"""Embedding-retriever training with sentence-transformers' SentenceTransformerTrainer and an in-batch contrastive
loss (MultipleNegativesRankingLoss) on `{"query", "positive", "negative"?}` rows.

The trainer is an ordinary transformers Trainer, so the run's callbacks, checkpoints and resume work as they do
for the other methods; `trainer.save_model(dir)` writes a directory `SentenceTransformer(dir)` loads.

LoRA goes through transformers' adapter integration (`model.add_adapter`), the one path whose saved adapter
`SentenceTransformer(dir)` loads back. transformers 5.24 asks for peft >= 0.22 there, so an older peft is refused
before training rather than failing after it; wrapping the encoder in peft directly instead saves keys that load
back as a randomly initialised model, without an error.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from bashgym.trainers.contracts.fields import retriever_adapter_refusal
from bashgym.trainers.loading import load_rows
from datasets import Dataset
from sentence_transformers import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.base.sampler import BatchSamplers
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

# The loss reads columns by position: the query, the passage it should find, then an optional hard negative.
COLUMNS = ("query", "positive", "negative")
# Every linear layer of a BERT encoder layer: attention.self.{query,key,value}, attention.output.dense,
# intermediate.dense and output.dense.
LORA_TARGET_MODULES = ["query", "key", "value", "dense"]
MIN_BATCH_SIZE = 2


def build(request: Any, model: SentenceTransformer, tokenizer: Any, run: Any, args: dict[str, Any]) -> Any:
    """A SentenceTransformerTrainer over request.dataset_path; `args` are TrainingArguments keyword arguments."""
    _check_batch_size(args)
    if request.use_lora:
        _check_peft_for_adapters()
        model.add_adapter(_lora_config(request))
    config = SentenceTransformerTrainingArguments(**args, batch_sampler=BatchSamplers.NO_DUPLICATES)
    return SentenceTransformerTrainer(
        model=model,
        args=config,
        train_dataset=retrieval_dataset(request.dataset_path),
        loss=MultipleNegativesRankingLoss(model),
        processing_class=tokenizer,
    )


def _check_batch_size(args: dict[str, Any]) -> None:
    batch_size = int(args.get("per_device_train_batch_size", 8))
    if batch_size < MIN_BATCH_SIZE:
        raise ValueError(
            f"batch_size is {batch_size}; a retriever learns by telling each query's positive from the other "
            f"passages of its batch, so a batch of one has nothing to contrast. Set batch_size >= {MIN_BATCH_SIZE}."
        )


def _check_peft_for_adapters() -> None:
    refused = retriever_adapter_refusal(importlib.metadata.version("peft"))
    if refused:
        raise ValueError(refused)


def _lora_config(request: Any) -> Any:
    from peft import LoraConfig, TaskType

    return LoraConfig(
        task_type=TaskType.FEATURE_EXTRACTION,
        r=int(request.lora_rank),
        lora_alpha=int(request.lora_alpha),
        lora_dropout=float(request.lora_dropout),
        target_modules=LORA_TARGET_MODULES,
    )


def retrieval_dataset(path: str) -> Dataset:
    """The rows' query, positive and (where every row has one) negative columns, in the order the loss reads them."""
    rows = load_rows(path)
    if not rows:
        raise ValueError(f"{path} holds no rows; give at least {MIN_BATCH_SIZE} query/positive pairs.")
    columns = [name for name in COLUMNS if all(name in row for row in rows)]
    missing = [name for name in COLUMNS[:2] if name not in columns]
    if missing:
        raise ValueError(f"Some rows of {path} lack {missing}; every row needs a query and a positive.")
    return Dataset.from_dict({name: [str(row[name]) for row in rows] for name in columns})
