"""A reward model judged on held-out pairs: pair accuracy, calibration, length bias, per-source slices and leakage.

The model scores `prompt + answer + eos` as one text, exactly as TRL's RewardTrainer trained it (an explicit prompt
is prepended to each answer). For a pair, the Bradley-Terry probability that `chosen` is preferred is
sigmoid(r(chosen) - r(rejected)); a model is calibrated when the pairs it is 80% sure of are right 80% of the time.

Each pair is one task of the summary's `per_task` (pass@1 1.0 when chosen outscores rejected, 0.5 on a tie, else
0.0), clustered by its `source`, so two results on the same pairs compare with the paired cluster bootstrap. Pairs
without sources are clustered by which answer is longer: that is the slice a length-biased model gets wrong.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

Emit = Callable[..., None]
CALIBRATION_BINS = 10
SCORE_BATCH = 16


def evaluate_reward_pairs(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    *,
    emit: Emit,
    train_rows: Sequence[dict[str, Any]] = (),
    max_length: int = 1024,
) -> dict[str, Any]:
    """The summary of one reward model on held-out pairs (rows of the reward_model dataset contract)."""
    if not rows:
        raise ValueError("No held-out pairs to evaluate; give a dataset of prompt/chosen/rejected rows.")
    emit("started", tasks=len(rows), samples=1, isolation="none needed: no commands run")
    chosen = _scores(model, tokenizer, [_text(r, "chosen", tokenizer) for r in rows], max_length, emit, len(rows))
    rejected = _scores(model, tokenizer, [_text(r, "rejected", tokenizer) for r in rows], max_length, emit, 0)
    sourced = any(row.get("source") for row in rows)
    per_task: dict[str, dict[str, Any]] = {}
    for index, (row, good, bad) in enumerate(zip(rows, chosen, rejected, strict=True)):
        per_task[f"pair-{index:05d}"] = {
            "family": str(row.get("source") or "unsourced") if sourced else length_slice(row),
            "pass@1": 1.0 if good > bad else 0.5 if good == bad else 0.0,
            "margin": good - bad,
            "probability": _sigmoid(good - bad),
            "length_slice": length_slice(row),
        }
    leaked = leaked_rows(rows, train_rows)
    metrics = {
        "pair_accuracy": statistics.fmean(t["pass@1"] for t in per_task.values()),
        "mean_margin": statistics.fmean(t["margin"] for t in per_task.values()),
        "ece": expected_calibration_error([t["probability"] for t in per_task.values()]),
        "longer_rejected_accuracy": _slice_accuracy(per_task, "rejected-longer"),
        "longer_chosen_accuracy": _slice_accuracy(per_task, "chosen-longer"),
        "leaked_pairs": float(len(leaked)),
    }
    return {
        "kind": "reward",
        "rows": len(rows),
        "metrics": metrics,
        "per_task": per_task,
        "by_source": _by_source(rows, per_task),
        "length_slices": {
            name: {"pairs": sum(t["length_slice"] == name for t in per_task.values()), "accuracy": value}
            for name in ("chosen-longer", "rejected-longer", "same-length")
            if not math.isnan(value := _slice_accuracy(per_task, name))
        },
        "leakage": {"checked": bool(train_rows), "leaked_pairs": leaked[:50], "count": len(leaked)},
    }


def length_slice(row: dict[str, Any]) -> str:
    """Which answer is longer, in characters: a model that rewards length is right on one side only."""
    chosen, rejected = len(str(row["chosen"])), len(str(row["rejected"]))
    return "chosen-longer" if chosen > rejected else "rejected-longer" if rejected > chosen else "same-length"


def expected_calibration_error(probabilities: Sequence[float], bins: int = CALIBRATION_BINS) -> float:
    """ECE of the Bradley-Terry probabilities that `chosen` wins (the truth is always `chosen`).

    Each pair predicts the side it favours with confidence max(p, 1 - p) in [0.5, 1]; bins of confidence are
    compared with how often that side was `chosen`, weighted by their share of the pairs."""
    if not probabilities:
        raise ValueError("ECE needs at least one pair.")
    binned: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for p in probabilities:
        confidence = max(p, 1.0 - p)
        right = 1.0 if p > 0.5 else 0.5 if p == 0.5 else 0.0
        binned[min(int((confidence - 0.5) * 2 * bins), bins - 1)].append((confidence, right))
    total = len(probabilities)
    return sum(
        len(pairs) / total * abs(statistics.fmean(r for _, r in pairs) - statistics.fmean(c for c, _ in pairs))
        for pairs in binned.values()
    )


def leaked_rows(rows: Sequence[dict[str, Any]], train_rows: Sequence[dict[str, Any]]) -> list[int]:
    """Indices of held-out pairs that are also training pairs (whitespace and case aside)."""
    seen = {_key(row) for row in train_rows}
    return [index for index, row in enumerate(rows) if _key(row) in seen]


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(" ".join(str(row.get(name, "")).lower().split()) for name in ("prompt", "chosen", "rejected"))


def _text(row: dict[str, Any], side: str, tokenizer: Any) -> str:
    """What the trainer scored: the prompt, the answer, and the end-of-sequence token it appended."""
    answer = str(row[side])
    eos = tokenizer.eos_token or ""
    return str(row["prompt"]) + answer + ("" if answer.endswith(eos) else eos)


def _scores(model: Any, tokenizer: Any, texts: list[str], max_length: int, emit: Emit, progress_of: int) -> list[float]:
    """The model's scalar score of each text, a batch at a time, padded on the right as in training."""
    import torch
    from bashgym.trainers.contracts.placement import device_of

    device = device_of(model)
    tokenizer.padding_side = "right"
    scores: list[float] = []
    for start in range(0, len(texts), SCORE_BATCH):
        batch = tokenizer(
            texts[start : start + SCORE_BATCH],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=max_length,
            add_special_tokens=False,
        ).to(device)
        with torch.no_grad():
            logits = model(**batch).logits
        scores += [float(v) for v in logits[:, 0].float().cpu()]
        if progress_of:
            emit("progress", done=min(start + SCORE_BATCH, len(texts)) // 2, total=progress_of)
    return scores


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _slice_accuracy(per_task: dict[str, dict[str, Any]], name: str) -> float:
    scores = [t["pass@1"] for t in per_task.values() if t["length_slice"] == name]
    return statistics.fmean(scores) if scores else math.nan


def _by_source(rows: Sequence[dict[str, Any]], per_task: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    slices: dict[str, list[float]] = defaultdict(list)
    for row, task in zip(rows, per_task.values(), strict=True):
        slices[str(row.get("source") or "unsourced")].append(task["pass@1"])
    return {name: {"pairs": len(s), "accuracy": statistics.fmean(s)} for name, s in sorted(slices.items())}
