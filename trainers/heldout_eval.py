"""Held-out evaluation on a method's own data: generation match and loss for supervised rows,
preference accuracy and reward margin for pairs, masked-token KL/CE for session records.

Rows take the dataset contracts' shapes: `messages` (the last assistant turn is the reference),
`prompt` with `completion` or `teacher_response`, `text` (loss only), and `prompt` with `chosen`
and `rejected` (preference). The reward margin is DPO's implicit reward, a log-ratio to a frozen reference: for
an adapter its base model with the adapter disabled, for full weights a frozen copy of the base model passed as
`reference`. Full weights without one are refused: a margin against nothing measures raw likelihood.
The model may sit on a GPU in bfloat16 (`placement.place`): inputs go to its device, and log-probabilities
are taken in float32.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

from bashgym.trainers.contracts.placement import device_of

Emit = Callable[..., None]


def _normalise(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .")


def split_row(row: dict[str, Any]) -> tuple[list[dict[str, str]] | None, str | None]:
    """(prompt messages, reference) of a supervised row; (None, text) for a plain-text row."""
    if "messages" in row:
        messages = list(row["messages"])
        last = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
        return messages[:last], str(messages[last]["content"])
    reference = row.get("completion", row.get("teacher_response"))
    if "prompt" in row and reference is not None:
        return [{"role": "user", "content": str(row["prompt"])}], str(reference)
    return None, str(row.get("text", ""))


def evaluate_rows(
    model: Any, tokenizer: Any, rows: list[dict[str, Any]], *, max_new_tokens: int, emit: Emit, reference: Any = None
) -> dict[str, Any]:
    import torch

    is_preference = all({"prompt", "chosen", "rejected"} <= set(row) for row in rows)
    if is_preference and reference is None and getattr(model, "disable_adapter", None) is None:
        raise ValueError(
            "Preference pairs on full weights need the frozen reference the policy moved from (its base model): "
            "evaluate a run, whose base the daemon names, or an adapter."
        )
    if all("target_span" in row for row in rows):
        return _session_rows(model, tokenizer, rows, emit)
    per_task: dict[str, dict[str, Any]] = {}
    losses: list[float] = []
    for index, row in enumerate(rows):
        task_id = f"row-{index:05d}"
        with torch.no_grad():
            if is_preference:
                per_task[task_id] = _preference(model, tokenizer, row, reference)
                losses.append(per_task[task_id]["chosen_nll"])
            else:
                per_task[task_id] = _supervised(model, tokenizer, row, max_new_tokens)
                losses.append(per_task[task_id]["nll"])
        per_task[task_id]["family"] = task_id  # each row is its own cluster for the paired bootstrap
        emit("progress", done=index + 1, total=len(rows), task_id=task_id)
    scored = [t for t in per_task.values() if "pass@1" in t]
    metrics: dict[str, float] = {"heldout_loss": sum(losses) / len(losses) if losses else math.nan}
    if is_preference:
        metrics["preference_accuracy"] = sum(t["pass@1"] for t in scored) / len(scored)
        metrics["reward_margin"] = sum(t["margin"] for t in scored) / len(scored)
    elif scored:
        metrics["exact_match"] = sum(t["pass@1"] for t in scored) / len(scored)
        metrics["normalized_match"] = sum(t["normalized"] for t in scored) / len(scored)
    return {
        "kind": "preference" if is_preference else "generation",
        "rows": len(rows),
        "metrics": metrics,
        "per_task": per_task,
    }


def _session_rows(model: Any, tokenizer: Any, rows: list[dict[str, Any]], emit: Emit) -> dict[str, Any]:
    """Session records: the training objective's masked-token KL (teacher = the model on the hinted context)
    and CE on the target span, with T = 1; the per-record score is exp(-CE), the target tokens' geometric
    mean likelihood."""
    import torch
    import torch.nn.functional as F
    from bashgym.trainers.methods.session import _target_logits, collate, encode

    per_task: dict[str, dict[str, Any]] = {}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = device_of(model)
    for index, row in enumerate(rows):
        batch = {k: v.to(device) for k, v in collate([encode(row, tokenizer, 1024)], pad).items()}
        width = batch["target_ids"].size(1)
        with torch.no_grad():
            student = model(input_ids=batch["student_ids"], attention_mask=batch["student_mask"]).logits
            teacher = model(input_ids=batch["teacher_ids"], attention_mask=batch["teacher_mask"]).logits
        s_logp = F.log_softmax(_target_logits(student, batch["student_start"], width).float(), dim=-1)
        t_logp = F.log_softmax(_target_logits(teacher, batch["teacher_start"], width).float(), dim=-1)
        tokens = float(batch["target_mask"].sum())
        kl = float((t_logp.exp() * (t_logp - s_logp)).sum(-1).sum()) / tokens
        ce = float(F.nll_loss(s_logp.transpose(1, 2), batch["target_ids"], reduction="sum")) / tokens
        task_id = f"row-{index:05d}"
        per_task[task_id] = {"family": task_id, "pass@1": math.exp(-ce), "kl": kl, "ce": ce, "tokens": tokens}
        emit("progress", done=index + 1, total=len(rows), task_id=task_id)
    count = len(per_task)
    metrics = {
        "target_likelihood": sum(t["pass@1"] for t in per_task.values()) / count,
        "masked_kl": sum(t["kl"] for t in per_task.values()) / count,
        "masked_ce": sum(t["ce"] for t in per_task.values()) / count,
        "masked_tokens": sum(t["tokens"] for t in per_task.values()),
    }
    return {"kind": "session", "rows": count, "metrics": metrics, "per_task": per_task}


def _supervised(model: Any, tokenizer: Any, row: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
    prompt, reference = split_row(row)
    device = device_of(model)
    if prompt is None:
        ids = tokenizer(reference, return_tensors="pt")["input_ids"].to(device)
        return {"nll": _nll(model, ids, 0)}
    prefix = str(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False))
    prefix_ids = tokenizer(prefix, return_tensors="pt", add_special_tokens=False)["input_ids"].to(device)
    full_ids = tokenizer(prefix + (reference or ""), return_tensors="pt", add_special_tokens=False)["input_ids"]
    full_ids = full_ids.to(device)
    output = model.generate(
        input_ids=prefix_ids,
        attention_mask=prefix_ids.new_ones(prefix_ids.shape),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    answer = str(tokenizer.decode(output[0][prefix_ids.shape[1] :], skip_special_tokens=True)).strip()
    exact = answer == (reference or "").strip()
    normalized = _normalise(answer) == _normalise(reference or "")
    return {
        "pass@1": float(exact),
        "normalized": float(normalized),
        "nll": _nll(model, full_ids, prefix_ids.shape[1]),
        "answer": answer[:500],
    }


def _preference(model: Any, tokenizer: Any, row: dict[str, Any], frozen: Any = None) -> dict[str, Any]:
    prompt = [{"role": "user", "content": str(row["prompt"])}]
    prefix = str(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False))
    start = tokenizer(prefix, return_tensors="pt", add_special_tokens=False)["input_ids"].shape[1]
    device = device_of(model)
    ids = {
        side: tokenizer(prefix + str(row[side]), return_tensors="pt", add_special_tokens=False)["input_ids"].to(device)
        for side in ("chosen", "rejected")
    }
    policy = {side: -_nll(model, ids[side], start, mean=False) for side in ids}
    if frozen is not None:  # full weights: a frozen copy of the base model
        reference = {side: -_nll(frozen, ids[side].to(device_of(frozen)), start, mean=False) for side in ids}
    else:  # an adapter: its base model, the adapter disabled
        disable = model.disable_adapter
        with disable() if callable(disable) else contextlib.nullcontext():
            reference = {side: -_nll(model, ids[side], start, mean=False) for side in ids}
    margin = (policy["chosen"] - reference["chosen"]) - (policy["rejected"] - reference["rejected"])
    chosen_tokens = max(int(ids["chosen"].shape[1]) - start, 1)
    return {"pass@1": float(margin > 0), "margin": margin, "chosen_nll": -policy["chosen"] / chosen_tokens}


def _nll(model: Any, ids: Any, start: int, *, mean: bool = True) -> float:
    """Negative log-likelihood of ids[start:] given what precedes it (mean per token, or the sum)."""
    logits = model(input_ids=ids).logits[0, :-1].float()
    targets = ids[0, 1:]
    log_probs = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    span = log_probs[max(start - 1, 0) :]
    total = float(-span.sum())
    return total / max(int(span.numel()), 1) if mean else total
