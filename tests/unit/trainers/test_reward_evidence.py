"""The arithmetic of a reward model's evidence and the reward-example contract, without a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bashgym.trainers.contracts.datasets import format_report, leaked_pairs, validate_dataset
from bashgym.trainers.reward_eval import expected_calibration_error, leaked_rows, length_slice


def test_a_perfectly_calibrated_model_has_zero_ece_and_an_overconfident_one_does_not() -> None:
    # Sure and right every time: confidence 1.0 matches accuracy 1.0.
    assert expected_calibration_error([1.0] * 10) == pytest.approx(0.0)
    # 90% sure of each pair, right on half of them: ECE is the 0.4 gap.
    assert expected_calibration_error([0.9] * 5 + [0.1] * 5) == pytest.approx(0.4)
    # 70% sure and right 7 times in 10: calibrated.
    assert expected_calibration_error([0.7] * 7 + [0.3] * 3) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="at least one pair"):
        expected_calibration_error([])


def test_length_slices_say_which_answer_is_longer() -> None:
    assert length_slice({"chosen": "ls -la", "rejected": "rm"}) == "chosen-longer"
    assert length_slice({"chosen": "ls", "rejected": "rm -rf /"}) == "rejected-longer"
    assert length_slice({"chosen": "ls", "rejected": "rm"}) == "same-length"


def test_leakage_matches_pairs_whatever_their_spacing_and_case() -> None:
    train = [{"prompt": "Count lines", "chosen": "wc -l f", "rejected": "cat f"}]
    held = [
        {"prompt": "count  LINES", "chosen": "wc -l f", "rejected": "cat  f"},
        {"prompt": "Count lines", "chosen": "wc -l g", "rejected": "cat g"},
    ]
    assert leaked_rows(held, train) == [0]
    assert leaked_rows(held, []) == []


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_a_reward_example_is_strict_and_every_problem_names_its_line(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "pairs.jsonl",
        [
            {"prompt": "p", "chosen": "a", "rejected": "b", "source": "web"},
            {"prompt": "p", "chosen": "a", "rejected": "a"},
            {"prompt": [{"role": "user", "content": "p"}], "chosen": "a", "rejected": "b"},
            {"prompt": "p", "chosen": "a", "rejected": "b", "sorce": "web"},
            {"prompt": "p", "chosen": "a"},
            "not json",
        ],
    )
    report = validate_dataset("reward_model", data)
    text = format_report(report)
    assert not report.ok and report.rows == 1
    assert {(e.line, e.code) for e in report.errors} == {
        (2, "identical_pair"),
        (3, "wrong_type"),
        (4, "unknown_field"),
        (5, "missing_field"),
        (6, "invalid_json"),
    }
    assert "did you mean `source`?" in text and "pairs.jsonl:3" in text


def test_held_out_pairs_found_in_the_training_pairs_are_reported_by_line(tmp_path: Path) -> None:
    train = _write(tmp_path / "train.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b"}])
    held = _write(
        tmp_path / "held.jsonl",
        [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "P", "chosen": "a ", "rejected": "b"}],
    )
    report = leaked_pairs(train, held)
    assert not report.ok and [(e.line, e.code) for e in report.errors] == [(2, "leaked_pair")]


def test_a_retrieval_example_needs_a_query_and_a_different_positive(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "queries.jsonl",
        [
            {"query": "count lines", "positive": "wc counts lines", "negative": "rm removes files"},
            {"query": "count lines", "positive": "count  lines"},
            {"query": "q", "positive": "p", "negative": "p"},
            {"query": "q", "positve": "p"},
        ],
    )
    report = validate_dataset("embedding_retriever", data)
    assert {(e.line, e.code) for e in report.errors} == {
        (2, "same_text"),
        (3, "same_text"),
        (4, "unknown_field"),
        (4, "missing_field"),
    }


def test_grpo_rewarded_by_a_reward_model_needs_prompts_only(tmp_path: Path) -> None:
    data = _write(tmp_path / "prompts.jsonl", [{"prompt": "Count the lines of notes.txt"}])
    assert not validate_dataset("grpo", data).ok  # a verifier's rows name their verifier
    assert validate_dataset("grpo", data, reward_source="reward_model").ok
