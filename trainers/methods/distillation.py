"""Teacher distillation: TRL's DistillationTrainer when a teacher model is named, else learning the
teacher's recorded responses.

With only `teacher_response` tokens the teacher's distribution is a one-hot per position, and the
KL term of the KL-plus-CE objective reduces to cross-entropy on those tokens; that is what trains.
"""

from __future__ import annotations

from typing import Any

from bashgym.trainers.contracts.fields import method_args
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.loading import load_rows, lora_config
from bashgym.trainers.methods.sft import DeviceMetricsSFTTrainer
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
    settings = method_args(request)
    prompts = [fit_prompt(row["prompt"], tokenizer, settings["max_prompt_tokens"]) for row in rows]
    cut = sum(prompt != row["prompt"] for prompt, row in zip(prompts, rows, strict=True))
    print(f"distillation: {cut} of {len(rows)} prompts cut to {settings['max_prompt_tokens']} tokens", flush=True)
    dataset = Dataset.from_list([{"prompt": prompt} for prompt in prompts])
    config = DistillationConfig(
        **args,
        temperature=settings["temperature"],
        beta=settings["beta"],
        max_completion_length=settings["max_completion_length"],
    )
    return DistillationTrainer(
        model=model,
        teacher_model=teacher,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(request),
    )


def fit_prompt(prompt: Any, tokenizer: Any, budget: int) -> Any:
    """The prompt within `budget` tokens, its end kept: a text loses its oldest tokens; a conversation its oldest
    turns after any system message, then its last turn's oldest tokens."""
    if isinstance(prompt, str):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return prompt if len(ids) <= budget else tokenizer.decode(ids[-budget:])
    messages = list(prompt)

    def length() -> int:
        return len(
            tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
        )

    system = 1 if messages and messages[0].get("role") == "system" else 0
    while length() > budget and len(messages) > system + 1:
        del messages[system]
    while length() > budget and len(str(messages[-1].get("content", ""))) > 1:
        content = str(messages[-1]["content"])
        messages[-1] = {**messages[-1], "content": content[len(content) // 4 or 1 :]}
    return messages


def _from_responses(
    request: TrainingRequest, model: Any, tokenizer: Any, rows: list[dict[str, Any]], args: dict[str, Any]
) -> Any:
    dataset = Dataset.from_list([recorded_example(row) for row in rows])
    config = SFTConfig(**args, max_length=method_args(request)["max_length"], packing=False)
    return DeviceMetricsSFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer, peft_config=lora_config(request)
    )


def recorded_example(row: dict[str, Any]) -> dict[str, Any]:
    """A recorded teacher response as a prompt-completion example: the whole prompt (a conversation keeps its system
    message and every earlier turn, as the on-policy path does), the teacher's response the only tokens learned."""
    prompt = row["prompt"]
    turns = [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    return {"prompt": turns, "completion": [{"role": "assistant", "content": row["teacher_response"]}]}
