"""On-policy distillation cuts prompts to fit max_seq_length beside the completion, keeping their end."""

from __future__ import annotations

from pathlib import Path

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
