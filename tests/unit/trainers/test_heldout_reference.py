"""A held-out preference margin is DPO's implicit reward: a log-ratio to a frozen reference, never to nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from bashgym.trainers.heldout_eval import evaluate_rows
from bashgym.trainers.tiny import build_tiny
from transformers import AutoModelForCausalLM, AutoTokenizer

ROWS = [{"prompt": "Count the lines in a.txt", "chosen": "wc -l a.txt", "rejected": "ls"}]


def test_full_weights_are_measured_against_their_frozen_base_and_refused_without_one(tmp_path: Path) -> None:
    path = build_tiny(tmp_path / "tiny")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    frozen = AutoModelForCausalLM.from_pretrained(path)
    # A policy that has not moved from its reference has no implicit reward: margin 0, not a likelihood gap.
    same = evaluate_rows(model, tokenizer, ROWS, max_new_tokens=4, emit=lambda *a, **k: None, reference=frozen)
    assert same["metrics"]["reward_margin"] == pytest.approx(0.0, abs=1e-4)
    assert same["metrics"]["preference_accuracy"] == 0.0
    with pytest.raises(ValueError, match="need the frozen reference"):
        evaluate_rows(model, tokenizer, ROWS, max_new_tokens=4, emit=lambda *a, **k: None)
