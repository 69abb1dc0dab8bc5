"""Supervised fine-tuning with TRL's SFTTrainer on `messages` or `text` rows."""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from bashgym.trainers.modeling import load_rows, lora_config
from bashgym.trainers.rundir import RunDirectory
from bashgym.trainers.specs import TrainingRequest
from bashgym.trainers.strategies import eval_args
from datasets import Dataset
from trl import SFTConfig, SFTTrainer


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    train = _dataset(request.dataset_path)
    # `packing` (best-fit decreasing, padding-free: position ids restart per sequence, so attention never
    # crosses a boundary) and `use_liger_kernel` come in `args` from the run's SpeedPlan.
    config = SFTConfig(
        **args,
        **eval_args(request),
        max_length=request.max_seq_length,
        assistant_only_loss=_assistant_only(train, tokenizer),
    )
    eval_dataset = _dataset(request.eval_dataset_path) if request.eval_dataset_path else None
    with warnings.catch_warnings():
        # TRL 1.16 deprecates use_liger_kernel for Hub kernels, which an offline trainer cannot fetch; Liger's
        # installed kernels are still the ones this machine has.
        warnings.filterwarnings("ignore", message="`use_liger_kernel=True` is deprecated", category=FutureWarning)
        return DeviceMetricsSFTTrainer(
            model=model,
            args=config,
            train_dataset=train,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            peft_config=lora_config(request),
        )


def _assistant_only(train: Dataset, tokenizer: Any) -> bool:
    """Chat rows learn the assistant's turns only, when the chat template marks them ({% generation %}):
    the prompt's tokens, file contents included, are context, not targets. A template without the
    markers (most hub models') trains on whole conversations, as TRL does by default."""
    if "messages" not in train.column_names:
        return False
    marked = "generation" in str(getattr(tokenizer, "chat_template", "") or "")
    if not marked:
        print("sft: the chat template has no {% generation %} markers; the loss covers whole conversations", flush=True)
    return marked


def _dataset(path: str) -> Dataset:
    # Keep only the columns SFT reads, so rows carrying extra metadata still collate.
    return Dataset.from_list([{k: row[k] for k in ("messages", "text") if k in row} for row in load_rows(path)])


class DeviceMetricsSFTTrainer(SFTTrainer):
    """TRL's SFTTrainer with its per-step metrics (entropy, token accuracy, tokens seen) kept on the device until
    a log reads them.

    TRL reads them back after every step, and each read makes the host wait for the GPU to finish the step, so
    it cannot queue the next one meanwhile. Here they stay tensors, and `log` reads them all every logging_steps.
    The loss of the plain path is computed as TRL computes it (a test compares the two); a custom loss, label
    smoothing, sequence parallelism, an MoE auxiliary loss or a request for the outputs go to TRL unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._untallied_tokens: torch.Tensor | int = 0  # this rank's tokens since the last log

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        if return_outputs or not self._plain_loss():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = self._mode()
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        per_token_loss = -outputs.log_probs  # zero on ignored positions
        if cast(SFTConfig, self.args).loss_type == "dft":
            per_token_loss = per_token_loss * outputs.log_probs.exp().detach()
        num_tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = per_token_loss.sum() / torch.as_tensor(num_tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())
        self._record(mode, inputs, outputs)
        return loss

    def _mode(self) -> str:
        return "train" if getattr(self.model, "training", False) else "eval"

    def _plain_loss(self) -> bool:
        parallelism = getattr(self.accelerator, "parallelism_config", None)
        return not (
            self.compute_loss_func is not None
            or self.label_smoother is not None
            or self.aux_loss_enabled
            or (parallelism is not None and getattr(parallelism, "sp_enabled", False))
        )

    def _record(self, mode: str, inputs: dict[str, Any], outputs: Any) -> None:
        gather = self.accelerator.gather_for_metrics
        valid = gather(outputs.label_mask.sum()).sum()

        def per_valid_token(total: torch.Tensor) -> torch.Tensor:  # 0 for a batch without one, as TRL has it
            return torch.where(valid > 0, total / valid.clamp(min=1), 0.0)

        metrics = self._metrics[mode]
        metrics["entropy"].append(per_valid_token(gather(outputs.entropy.detach().sum()).sum()))
        metrics["mean_token_accuracy"].append(per_valid_token(gather(outputs.is_top1.sum()).sum()))
        if mode == "train":
            if "attention_mask" in inputs:
                self._untallied_tokens += inputs["attention_mask"].sum()
            elif "position_ids" in inputs:  # padding-free: every position is a token
                self._untallied_tokens += inputs["position_ids"].size(1)
            else:
                raise ValueError("Expected 'attention_mask' or 'position_ids' in inputs.")
        metrics["num_tokens"] = [self._total_train_tokens]  # brought up to date when a log reads it

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        metrics = self._metrics[self._mode()]
        on_device = [(key, i) for key, values in metrics.items() for i, v in enumerate(values) if torch.is_tensor(v)]
        if on_device:  # one read for all of them
            read = torch.stack([metrics[key][i].float() for key, i in on_device]).tolist()
            for (key, i), value in zip(on_device, read, strict=True):
                metrics[key][i] = value
        if "num_tokens" in metrics:
            metrics["num_tokens"] = [self._tally_tokens()]
        super().log(logs, start_time)

    def _tally_tokens(self) -> int:
        untallied, self._untallied_tokens = self._untallied_tokens, 0
        if self.accelerator.num_processes > 1:
            count = torch.as_tensor(untallied, device=self.accelerator.device).reshape(1)
            untallied = self.accelerator.gather(count).sum()
        self._total_train_tokens += int(untallied) // self._tp_size
        return int(self._total_train_tokens)

    def discard_step_metrics(self) -> None:
        """Forget what steps recorded since the last log: the compile probe is not a training step."""
        for values in self._metrics["train"].values():
            values.clear()
        self._untallied_tokens = 0
