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
    report_context(rows, [as_turns(prompt) for prompt in prompts], sum(prompt_tokens(p, tokenizer) for p in prompts))
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
    examples = [recorded_example(row) for row in rows]
    config = SFTConfig(**args, max_length=method_args(request)["max_length"], packing=False)
    trainer = DeviceMetricsSFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        peft_config=lora_config(request),
    )
    # The context tokens of each example as TRL tokenized (and cut to max_length) it: those it masks out of the labels.
    tokenized = trainer.train_dataset
    assert isinstance(tokenized, Dataset), type(tokenized)  # a list of rows, so prepared in full
    tokens = sum(label == -100 for example in tokenized for label in example["labels"])
    report_context(rows, [example["prompt"] for example in examples], tokens)
    return trainer


def recorded_example(row: dict[str, Any]) -> dict[str, Any]:
    """A recorded teacher response as a prompt-completion example: the whole prompt (a conversation keeps its system
    message and every earlier turn, as the on-policy path does), the teacher's response the only tokens learned."""
    return {
        "prompt": as_turns(row["prompt"]),
        "completion": [{"role": "assistant", "content": row["teacher_response"]}],
    }


def as_turns(prompt: Any) -> list[dict[str, Any]]:
    """A prompt as the conversation it is: its turns, or a text as one user turn."""
    return [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]


def prompt_tokens(prompt: Any, tokenizer: Any) -> int:
    """The tokens TRL's DistillationTrainer gives the student for a prompt: a conversation rendered with the
    generation prompt, a text as it is."""
    if isinstance(prompt, str):
        return len(tokenizer(text=prompt)["input_ids"])
    return len(tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=False))


def report_context(rows: list[dict[str, Any]], trained: list[list[dict[str, Any]]], tokens: int) -> None:
    """One line in training.log, the same from both paths: how much of the prompts the student trains beside (the
    turns kept of those sent, the system messages among them, and the context tokens)."""
    sent = sum(len(as_turns(row["prompt"])) for row in rows)
    kept = sum(len(turns) for turns in trained)
    systems = sum(m.get("role") == "system" for turns in trained for m in turns)
    print(
        f"distillation: context: {kept} of {sent} prompt turns kept ({systems} system), {tokens} context tokens "
        f"over {len(trained)} prompts",
        flush=True,
    )
