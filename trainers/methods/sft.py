"""Supervised fine-tuning with TRL's SFTTrainer on `messages` or `text` rows."""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, cast

import torch
from bashgym.trainers.contracts.fields import method_args
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.loading import load_rows, lora_config
from bashgym.trainers.methods.common import eval_args
from bashgym.trainers.readback import HostCopy, to_device
from datasets import Dataset
from transformers.training_args import ParallelMode
from trl import SFTConfig, SFTTrainer


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    train = _dataset(request.dataset_path)
    # `packing` (best-fit decreasing, padding-free: position ids restart per sequence, so attention never
    # crosses a boundary) and `use_liger_kernel` come in `args` from the run's SpeedPlan.
    config = SFTConfig(
        **args,
        **eval_args(request),
        max_length=method_args(request)["max_length"],
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

    A step that logs is read one step late (`_PendingLog`): its values are copied off the device without waiting,
    and the next step, once its work is queued, waits for that copy alone, so the GPU always has a step to run.
    A step that saves, evaluates or ends the run logs at once: it waits for the GPU anyway.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._untallied_tokens: torch.Tensor | int = 0  # this rank's tokens since the last log
        self._pending: _PendingLog | None = None

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

    def train(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().train(*args, **kwargs)
        except BaseException:
            # The last step before a crash is often the telling one. Its log is kept if it can still be read;
            # a failure to read it (the device may be what failed) must not hide the error that ended the run.
            with contextlib.suppress(Exception):
                self._emit_pending()
            raise

    def _maybe_log_save_evaluate(
        self,
        tr_loss: torch.Tensor,
        grad_norm: torch.Tensor | float | None,
        model: Any,
        trial: Any,
        epoch: float,
        ignore_keys_for_eval: list[str] | None,
        start_time: float,
        learning_rate: float | None = None,
    ) -> None:
        control, state = self.control, self.state
        waits_anyway = control.should_save or control.should_evaluate or control.should_training_stop
        if self._pending is not None and (state.global_step > self._pending.step or waits_anyway):
            # The previous step's log: this step's work is queued behind its copy. (An epoch's end calls in
            # again at the same step, and leaves it to the next step.)
            should_log = control.should_log
            self._emit_pending()
            control = self.control
            control.should_log = should_log  # reporting a log clears the flag; this step's is still due
        due = control.should_log and state.global_step > self._globalstep_last_logged
        if due and not waits_anyway and torch.is_tensor(tr_loss):
            # Every rank gets here at the same step, so the collectives of a scaled-out run (gathering the loss,
            # the token count and the FLOPs, as transformers and TRL would as they log) are issued here, in step;
            # only reading their results back waits for the next step, and that read is each rank's own.
            scaled_out = self.accelerator.num_processes > 1
            metrics = {key: list(values) for key, values in self._metrics["train"].items() if key != "num_tokens"}
            flos = None
            if self.args.parallel_mode == ParallelMode.DISTRIBUTED:  # what store_flos sums, left unread
                flos = self.accelerator.gather(to_device([float(self.current_flos)], self.args.device)).sum()
                self.current_flos = 0
            else:
                self.store_flos()
            loss = tr_loss.detach()
            self._pending = _PendingLog(
                loss=self.accelerator.gather(loss.reshape(1)).mean() if scaled_out else loss.clone(),
                grad_norm=grad_norm,
                metrics=metrics,
                tokens=self._take_untallied_tokens(),
                flos=flos,
                steps=state.global_step - self._globalstep_last_logged,
                learning_rate=self._get_learning_rate() if learning_rate is None else learning_rate,
                state=state,
                start_time=start_time,
            )
            tr_loss -= tr_loss
            self._metrics["train"].clear()
            self._globalstep_last_logged = state.global_step  # so transformers' own log is not due
        super()._maybe_log_save_evaluate(
            tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval, start_time, learning_rate=learning_rate
        )

    def _emit_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        loss_sum, grad_norm, metrics, tokens, flos = pending.read()
        self._total_loss_scalar += loss_sum
        if flos is not None:
            self.state.total_flos += flos
        logs = {"loss": loss_sum / pending.steps}
        if grad_norm is not None:
            logs["grad_norm"] = grad_norm
        logs["learning_rate"] = pending.learning_rate
        self._total_train_tokens += tokens // self._tp_size
        now = self._metrics["train"]
        self._metrics["train"] = defaultdict(list, {**metrics, "num_tokens": [self._total_train_tokens]})
        try:
            with pending.as_of(self.state):
                super().log(logs, pending.start_time)  # TRL's log averages the step's metrics, then clears them
        finally:
            self._metrics["train"] = now

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._emit_pending()  # logs arrive in step order
        metrics = self._metrics[self._mode()]
        on_device = [(key, i) for key, values in metrics.items() for i, v in enumerate(values) if torch.is_tensor(v)]
        if on_device:  # one read for all of them
            read = torch.stack([metrics[key][i].float() for key, i in on_device]).tolist()
            for (key, i), value in zip(on_device, read, strict=True):
                metrics[key][i] = value
        if "num_tokens" in metrics:
            metrics["num_tokens"] = [self._tally_tokens()]
        super().log(logs, start_time)

    def _take_untallied_tokens(self) -> torch.Tensor | int:
        """The tokens trained on since the last log, over every rank (then a collective, which every rank calls at
        the same step)."""
        untallied, self._untallied_tokens = self._untallied_tokens, 0
        if self.accelerator.num_processes > 1:
            count = (
                untallied.reshape(1) if torch.is_tensor(untallied) else to_device([untallied], self.accelerator.device)
            )
            untallied = self.accelerator.gather(count).sum()
        return untallied

    def _tally_tokens(self) -> int:
        self._total_train_tokens += int(self._take_untallied_tokens()) // self._tp_size
        return int(self._total_train_tokens)

    def discard_step_metrics(self) -> None:
        """Forget what steps recorded since the last log: the compile probe is not a training step."""
        for values in self._metrics["train"].values():
            values.clear()
        self._untallied_tokens = 0


class _PendingLog:
    """A step's log on its way to the host: copied off the device without waiting for the step to finish, read
    once the next step has been queued, and reported as of its own step."""

    def __init__(
        self,
        *,
        loss: torch.Tensor,
        grad_norm: torch.Tensor | float | None,
        metrics: dict[str, list[Any]],
        tokens: torch.Tensor | int,
        flos: torch.Tensor | None,
        steps: int,
        learning_rate: float,
        state: Any,
        start_time: float,
    ) -> None:
        self.steps, self.learning_rate, self.start_time = steps, learning_rate, start_time
        self.step, self.epoch, self.tokens_seen = state.global_step, state.epoch, state.num_input_tokens_seen
        self.floats: dict[str, list[Any]] = {"loss": [loss], **metrics}
        if grad_norm is not None:
            self.floats["grad_norm"] = [grad_norm]
        if flos is not None:
            self.floats["flos"] = [flos]  # float32, as transformers sums it
        on_device = [v for values in self.floats.values() for v in values if torch.is_tensor(v)]
        # One copy for the float32 values and one for a token tally kept on the device (a packed run counts on
        # the host): each reads back exactly as `.item()` would.
        self.host_floats = HostCopy(torch.stack([v.detach().float().reshape(()) for v in on_device]))
        self.tokens: HostCopy | int = HostCopy(tokens.reshape(1)) if torch.is_tensor(tokens) else tokens

    def read(self) -> tuple[float, float | None, dict[str, list[float]], int, float | None]:
        """(loss summed over its steps, gradient norm, TRL's metrics, tokens, a scaled-out run's FLOPs) as
        numbers."""
        read = iter(self.host_floats.read())  # the copy alone: the work queued after it keeps the GPU busy
        floats = {key: [next(read) if torch.is_tensor(v) else v for v in values] for key, values in self.floats.items()}
        grad_norm, flos = floats.pop("grad_norm", [None])[0], floats.pop("flos", [None])[0]
        tokens = self.tokens.read()[0] if isinstance(self.tokens, HostCopy) else self.tokens
        return floats.pop("loss")[0], grad_norm, floats, tokens, flos

    @contextlib.contextmanager
    def as_of(self, state: Any) -> Iterator[None]:
        """The trainer's state as it was at this log's step, which callbacks read while it is reported."""
        now = state.global_step, state.epoch, state.num_input_tokens_seen
        state.global_step, state.epoch, state.num_input_tokens_seen = self.step, self.epoch, self.tokens_seen
        try:
            yield
        finally:
            state.global_step, state.epoch, state.num_input_tokens_seen = now
