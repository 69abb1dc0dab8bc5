"""Loading the base model, its tokenizer and the LoRA configuration a request asks for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from bashgym.trainers.contracts.placement import device_facts
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.speed import Machine, resolve_bf16
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)


def load_model_and_tokenizer(
    request: TrainingRequest,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict[str, Any]]:
    if request.method == "embedding_retriever":
        return load_retriever(request)
    # 4-bit without CUDA or bitsandbytes was refused before this (trainers/settings.refusals, runner._check_request).
    facts = device_facts()
    tokenizer = AutoTokenizer.from_pretrained(request.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Weights load in bf16 when the run trains in bf16 (the request's `bf16`, resolved for this machine).
    bf16 = resolve_bf16(request.bf16, Machine.detect(), request.mixed_precision).used
    kwargs: dict[str, Any] = {"dtype": torch.bfloat16 if bf16 else torch.float32}
    if request.load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    if request.method == "reward_model":
        # A scalar head over the base model (its `score` layer starts untrained); the head finds each sequence's
        # last token through pad_token_id.
        model = AutoModelForSequenceClassification.from_pretrained(request.base_model, num_labels=1, **kwargs)
        model.config.pad_token_id = tokenizer.pad_token_id
    else:
        model = AutoModelForCausalLM.from_pretrained(request.base_model, **kwargs)
    facts["total_parameters"] = sum(p.numel() for p in model.parameters())
    return model, tokenizer, facts


def load_retriever(request: TrainingRequest) -> tuple[Any, Any, dict[str, Any]]:
    """The retriever named by request.base_model (a sentence-transformers directory), its tokenizer and the facts
    a run records about them."""
    from sentence_transformers import SentenceTransformer

    facts = device_facts()
    model = SentenceTransformer(request.base_model, device="cuda" if torch.cuda.is_available() else "cpu")
    # The model's own limit stands: positions beyond it have no embeddings.
    model.max_seq_length = min(int(request.max_seq_length), int(model.max_seq_length or request.max_seq_length))
    facts["total_parameters"] = sum(p.numel() for p in model.parameters())
    facts["max_seq_length"] = model.max_seq_length
    facts["embedding_dimension"] = model.get_embedding_dimension()
    return model, model.tokenizer, facts


def load_reward_model(directory: str) -> tuple[Any, Any]:
    """A trained reward model and its tokenizer, frozen in eval mode; an adapter is merged into its base, since
    TRL scores completions with a plain sequence-classification model (the logit of its one label)."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if (Path(directory) / "adapter_config.json").is_file():
        from peft import AutoPeftModelForSequenceClassification

        scorer = AutoPeftModelForSequenceClassification.from_pretrained(directory, num_labels=1).merge_and_unload()
    else:
        scorer = AutoModelForSequenceClassification.from_pretrained(directory, num_labels=1)
    scorer.config.pad_token_id = tokenizer.pad_token_id
    scorer.requires_grad_(False)
    return scorer.eval(), tokenizer


def lora_config(request: TrainingRequest) -> Any:
    from bashgym.trainers.contracts.fields import lora_args

    args = lora_args(request)
    if args is None:
        return None
    from peft import LoraConfig

    return LoraConfig(**args)


def preference_pairs(path: str) -> Any:
    """A pair dataset (DPO's, a reward model's) with the pair columns only: anything else on a row (a reward
    example's `source`) is for evaluation slices, not for the trainer."""
    from datasets import Dataset

    return Dataset.from_list([{k: row[k] for k in ("prompt", "chosen", "rejected")} for row in load_rows(path)])


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """JSONL rows (the dataset contract was checked before this runs)."""
    rows = []
    with Path(path).open(encoding="utf-8-sig") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
    return rows
