"""On-policy distillation cuts prompts to fit max_seq_length beside the completion, keeping their end."""

from __future__ import annotations

from pathlib import Path

import pytest
from bashgym.trainers.methods.distillation import fit_prompt
from bashgym.trainers.tiny import build_tiny
from transformers import AutoTokenizer


def test_a_prompt_keeps_its_end_within_the_budget(tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(build_tiny(tmp_path / "tiny"))
    text = " ".join(f"word{i}" for i in range(200))
    cut = fit_prompt(text, tokenizer, 20)
    assert len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= 20 and cut.endswith("word199")
    assert fit_prompt("Count notes.txt", tokenizer, 20) == "Count notes.txt"
    chat = [
        {"role": "system", "content": "be terse"},
        {"role": "user", "content": text},
        {"role": "assistant", "content": "ls"},
        {"role": "user", "content": "Count the lines in notes.txt"},
    ]
    budget = len(
        tokenizer.apply_chat_template([chat[0], chat[3]], tokenize=True, add_generation_prompt=True, return_dict=False)
    )
    kept = fit_prompt(chat, tokenizer, budget)
    assert kept == [chat[0], chat[3]], "the oldest turns after the system message go first"


# transformers and TRL deprecate names to each other in-process; the trainers run in their own process, unwarned.
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_recorded_response_trains_beside_the_whole_conversation_and_only_it_is_learned(tmp_path: Path) -> None:
    """Issue 51, item 10: distillation from recorded responses kept only the last user turn of a conversation
    prompt (its system message and earlier turns dropped), where the on-policy path keeps them all."""
    import json

    from bashgym.trainers.contracts.fields import shared_args
    from bashgym.trainers.contracts.request import TrainingRequest
    from bashgym.trainers.methods.distillation import build
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny(tmp_path / "tiny")
    conversation = [
        {"role": "system", "content": "answer with one command"},
        {"role": "user", "content": "which shell is this"},
        {"role": "assistant", "content": "echo $SHELL"},
        {"role": "user", "content": "count the lines in notes.txt"},
    ]
    rows = tmp_path / "recorded.jsonl"
    rows.write_text(json.dumps({"prompt": conversation, "teacher_response": "wc -l notes.txt"}) + "\n")
    sent = {"strategy": "distillation", "base_model": str(model_dir), "dataset_path": str(rows), "max_steps": 1}
    request = TrainingRequest.model_validate({**sent, "max_seq_length": 256})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # What the runner passes besides (trainers/methods/common.py, and the speed plan's activation_checkpointing).
    args = {**shared_args(request), "output_dir": str(tmp_path / "out"), "report_to": "none", "use_cpu": True}
    args["activation_checkpointing"] = False
    trainer = build(request, AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, None, args)  # type: ignore[arg-type]
    example = trainer.train_dataset[0]
    text = tokenizer.decode(example["input_ids"])
    assert "answer with one command" in text and "which shell is this" in text and "echo $SHELL" in text
    learned = [label for label in example["labels"] if label != -100]  # TRL masks the prompt out of the labels
    assert "wc -l notes.txt" in tokenizer.decode(learned)
    assert "count the lines" not in tokenizer.decode(learned), "the prompt is context, not a target"
