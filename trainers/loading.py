"""Loading the base model, its tokenizer and the LoRA configuration a request asks for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from bashgym.trainers.contracts.placement import device_facts
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.speed import Machine, resolve_bf16
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase


def load_model_and_tokenizer(
    request: TrainingRequest,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict[str, Any]]:
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
    model = AutoModelForCausalLM.from_pretrained(request.base_model, **kwargs)
    facts["total_parameters"] = sum(p.numel() for p in model.parameters())
    return model, tokenizer, facts


def lora_config(request: TrainingRequest) -> Any:
    from bashgym.trainers.contracts.fields import lora_args

    args = lora_args(request)
    if args is None:
        return None
    from peft import LoraConfig

    return LoraConfig(**args)


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """JSONL rows (the dataset contract was checked before this runs)."""
    rows = []
    with Path(path).open(encoding="utf-8-sig") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
    return rows
