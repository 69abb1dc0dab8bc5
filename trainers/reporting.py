"""Turns trainer logs and saves into metrics.jsonl lines and protocol events."""

from __future__ import annotations

import time
from typing import Any

from bashgym.trainers import failpoints
from bashgym.trainers.rundir import RunDirectory, canonical_metrics
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class ReportingCallback(TrainerCallback):
    """metrics.jsonl per log call; `progress` after every logged step; `checkpoint` after every save."""

    def __init__(self, run: RunDirectory) -> None:
        self.run = run
        self._last_tokens: tuple[float, float] | None = None

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs:
            return
        metrics = canonical_metrics(logs)
        tokens = logs.get("num_tokens", getattr(state, "num_input_tokens_seen", 0) or None)
        if isinstance(tokens, int | float) and tokens:
            now = time.monotonic()
            if self._last_tokens is not None and now > self._last_tokens[1]:
                metrics["system.tokens_per_second"] = (tokens - self._last_tokens[0]) / (now - self._last_tokens[1])
            self._last_tokens = (float(tokens), now)
        memory = _gpu_memory_gb()
        if memory is not None:
            metrics["system.gpu_memory_gb"] = memory
        self.run.append_metrics(state.global_step, metrics, state.epoch)
        if "train.loss" in metrics or "train.reward_mean" in metrics:
            self.run.emit(
                "progress", step=state.global_step, max_steps=state.max_steps, epoch=state.epoch, metrics=metrics
            )

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        checkpoint = self.run.root / f"checkpoint-{state.global_step}"
        _wait_for_every_rank()  # each rank writes its own RNG state into the checkpoint
        failpoints.reach("trainer.checkpoint_written")  # every file written, not yet marked complete
        self.run.mark_checkpoint_complete(checkpoint, state.global_step)
        self.run.write_state("running", step=state.global_step, last_checkpoint=checkpoint.name)
        self.run.emit("checkpoint", step=state.global_step, path=checkpoint.name)


def _wait_for_every_rank() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _gpu_memory_gb() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 1024**3, 3)
