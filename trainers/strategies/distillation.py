"""Teacher distillation: TRL's DistillationTrainer when a teacher model is named, else learning the
teacher's recorded responses.

With only `teacher_response` tokens the teacher's distribution is a one-hot per position, and the
KL term of the KL-plus-CE objective reduces to cross-entropy on those tokens; that is what trains.
"""

from __future__ import annotations

from typing import Any

from bashgym.trainers.modeling import load_rows, lora_config
from bashgym.trainers.rundir import RunDirectory
from bashgym.trainers.specs import TrainingRequest
from bashgym.trainers.strategies.sft import DeviceMetricsSFTTrainer
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import DistillationConfig, DistillationTrainer, SFTConfig


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    rows = load_rows(request.dataset_path)
    if request.teacher_model:
        return _on_policy(request, model, tokenizer, rows, args)
    return _from_responses(request, model, tokenizer, rows, args)


def _on_policy(
    request: TrainingRequest, model: Any, tokenizer: Any, rows: list[dict[str, Any]], args: dict[str, Any]
) -> Any:
    assert request.teacher_model is not None
    teacher = AutoModelForCausalLM.from_pretrained(request.teacher_model, dtype=model.dtype)
    dataset = Dataset.from_list([{"prompt": row["prompt"]} for row in rows])
    config = DistillationConfig(
        **args, temperature=request.teacher_temperature, max_completion_length=request.grpo_max_completion_length
    )
    return DistillationTrainer(
        model=model,
        teacher_model=teacher,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(request),
    )


def _from_responses(
    request: TrainingRequest, model: Any, tokenizer: Any, rows: list[dict[str, Any]], args: dict[str, Any]
) -> Any:
    dataset = Dataset.from_list(
        [
            {"messages": [_user(row["prompt"]), {"role": "assistant", "content": row["teacher_response"]}]}
            for row in rows
        ]
    )
    config = SFTConfig(**args, max_length=request.max_seq_length, packing=False)
    return DeviceMetricsSFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer, peft_config=lora_config(request)
    )


def _user(prompt: Any) -> dict[str, Any]:
    if isinstance(prompt, list):  # a messages prompt: its last user turn
        return next(m for m in reversed(prompt) if m.get("role") == "user")
    return {"role": "user", "content": str(prompt)}
