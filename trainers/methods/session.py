"""Session distillation: a masked-token objective on the target span of recovery-rich session records.

The student sees the original context and must produce the target text; the teacher is the same
model reading the hinted context, where the target sits at `target_span`. Only target tokens carry
loss: alpha * T^2 * KL(teacher || student) + (1 - alpha) * CE(target).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from bashgym.trainers.contracts.fields import method_args
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.loading import load_rows
from datasets import Dataset
from transformers import Trainer, TrainingArguments


def encode(record: dict[str, Any], tokenizer: Any, max_length: int) -> dict[str, list[int]]:
    """Token ids of student and teacher inputs with the same target ids placed at known positions."""
    start, end = record["target_span"]["start"], record["target_span"]["end"]
    hinted = record["hinted_context"]
    target = tokenizer(record["target_text"], add_special_tokens=False)["input_ids"]
    original = tokenizer(record["original_context"], add_special_tokens=False)["input_ids"]
    before = tokenizer(hinted[:start], add_special_tokens=False)["input_ids"]
    after = tokenizer(hinted[end:], add_special_tokens=False)["input_ids"]
    keep = max(1, max_length - len(target))
    original, before = original[-keep:], before[-keep:]
    return {
        "student_ids": original + target,
        "student_start": [len(original)],
        "teacher_ids": before + target + after[: max(0, max_length - len(before) - len(target))],
        "teacher_start": [len(before)],
        "target_ids": target,
    }


def collate(batch: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    def pad(key: str) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(row[key]) for row in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, row in enumerate(batch):
            ids[i, : len(row[key])] = torch.tensor(row[key])
            mask[i, : len(row[key])] = 1
        return ids, mask

    student_ids, student_mask = pad("student_ids")
    teacher_ids, teacher_mask = pad("teacher_ids")
    target_ids, target_mask = pad("target_ids")
    return {
        "student_ids": student_ids,
        "student_mask": student_mask,
        "teacher_ids": teacher_ids,
        "teacher_mask": teacher_mask,
        "target_ids": target_ids,
        "target_mask": target_mask,
        "student_start": torch.tensor([row["student_start"][0] for row in batch]),
        "teacher_start": torch.tensor([row["teacher_start"][0] for row in batch]),
    }


def _target_logits(logits: torch.Tensor, starts: torch.Tensor, width: int) -> torch.Tensor:
    """Logits predicting each target token: the positions just before it.

    `width` is the batch's longest target; a row whose own target is shorter reads past its end, and a row with a
    long context and a short target past the padded batch. Those positions are clamped in range: the target mask
    gives them no weight."""
    index = starts[:, None] - 1 + torch.arange(width, device=logits.device)[None, :]
    index = index.clamp(min=0, max=logits.size(1) - 1)
    return logits.gather(1, index[..., None].expand(-1, -1, logits.size(-1)))


class SessionDistillationTrainer(Trainer):
    def __init__(self, *args: Any, alpha: float, temperature: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.alpha = alpha
        self.temperature = temperature
        self._sums: dict[str, float] = {}
        self._batches = 0

    def compute_loss(
        self, model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        width = inputs["target_ids"].size(1)
        mask = inputs["target_mask"].float()
        student = model(input_ids=inputs["student_ids"], attention_mask=inputs["student_mask"]).logits
        with torch.no_grad():
            teacher = model(input_ids=inputs["teacher_ids"], attention_mask=inputs["teacher_mask"]).logits
        s_logits = _target_logits(student, inputs["student_start"], width).float()
        t_logits = _target_logits(teacher, inputs["teacher_start"], width).float()
        tokens = mask.sum().clamp(min=1.0)
        t = self.temperature
        teacher_logp = F.log_softmax(t_logits / t, dim=-1)
        student_logp_t = F.log_softmax(s_logits / t, dim=-1)
        kl = ((teacher_logp.exp() * (teacher_logp - student_logp_t)).sum(-1) * mask).sum() / tokens * t * t
        ce = (F.cross_entropy(s_logits.transpose(1, 2), inputs["target_ids"], reduction="none") * mask).sum() / tokens
        loss = self.alpha * kl + (1 - self.alpha) * ce
        self._accumulate(loss=loss.item(), kl=kl.item(), ce=ce.item(), masked_tokens=tokens.item())
        return (loss, student) if return_outputs else loss

    def _accumulate(self, **values: float) -> None:
        for key, value in values.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._batches += 1

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        if self._batches:
            logs = {
                **logs,
                **{
                    f"session_distillation_{k}" if k != "loss" else "session_distillation_loss": v / self._batches
                    for k, v in self._sums.items()
                },
            }
            self._sums, self._batches = {}, 0
        super().log(logs, *args, **kwargs)


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    settings = method_args(request)
    rows = load_rows(request.dataset_path)
    records = [r for r in rows if r["reader_confidence"] >= settings["min_confidence"]]
    if not records:
        raise ValueError(
            f"No record reaches session_distillation_min_confidence "
            f"{request.session_distillation_min_confidence}; lower it or add records."
        )
    print(
        f"session_distillation: training on {len(records)} of {len(rows)} records; {len(rows) - len(records)} below "
        f"min_confidence {settings['min_confidence']} left out",
        flush=True,
    )
    # Counted on the run too, at step 0: what a reader of its metrics would otherwise never learn was dropped.
    run.append_metrics(
        0, {"data.records_trained": len(records), "data.records_below_confidence": len(rows) - len(records)}
    )
    if request.use_lora:
        from bashgym.trainers.loading import lora_config
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(request))
    dataset = Dataset.from_list([encode(r, tokenizer, settings["max_length"]) for r in records])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return SessionDistillationTrainer(
        model=model,
        args=TrainingArguments(**args, remove_unused_columns=False),
        train_dataset=dataset,
        data_collator=lambda batch: collate(batch, pad_id),
        processing_class=tokenizer,
        alpha=settings["alpha"],
        temperature=settings["temperature"],
    )
