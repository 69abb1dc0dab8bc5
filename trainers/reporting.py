"""Turns trainer logs and saves into metrics.jsonl lines and protocol events."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bashgym.trainers import failpoints
from bashgym.trainers.contracts.rundir import RunDirectory, canonical_metrics
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class ReportingCallback(TrainerCallback):
    """metrics.jsonl per log call; `step` after every step; `progress` after every logged step; `checkpoint` after
    every save. The first logged step also records the torch CPU threads the run trains on (system.cpu_threads).

    A metric is reported once per step: transformers logs its end-of-training summary at the last step again,
    and the ledger refuses a second, different value for a recorded point (a GRPO run ended `failed` on it).
    Throughput is measured between the ends of the logged steps, on the clock taken where the steps end, not
    when the log is written: the SFT trainer writes a step's log during the next step, and its save steps at
    once, so a log-time clock made some intervals a step long and others nearly empty."""

    def __init__(self, run: RunDirectory, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.run = run
        self.clock = clock
        self._step_ends: dict[int, float] = {}  # global step -> when it ended (the last few)
        self._throughput_mark: tuple[int, float, float] | None = None  # (step, tokens, its end) last measured
        self._reported: dict[str, int] = {}  # metric -> the last step it was reported at

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._step_ends[state.global_step] = self.clock()
        # A protocol line per step (about 80 bytes, no fsync) moves the progress bar and its ETA at every step; the
        # metrics of logged steps alone came every `logging_steps`, 25 in the demo.
        self.run.emit("step", step=state.global_step, max_steps=state.max_steps)
        for old in [step for step in self._step_ends if step < state.global_step - 64]:
            del self._step_ends[old]  # a late log is one step behind; keep a margin, not the whole run

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
        step = state.global_step
        metrics = canonical_metrics(logs)
        tokens = logs.get("num_tokens", getattr(state, "num_input_tokens_seen", 0) or None)
        if isinstance(tokens, int | float) and tokens:
            self._measure_throughput(step, float(tokens), metrics)
        memory = _gpu_memory_gb()
        if memory is not None:
            metrics["system.gpu_memory_gb"] = memory
        if not self._reported:
            metrics["system.cpu_threads"] = float(_cpu_threads())
        metrics = self._first_at_step(step, metrics)
        self.run.append_metrics(step, metrics, state.epoch)
        if "train.loss" in metrics or "train.reward_mean" in metrics:
            self.run.emit("progress", step=step, max_steps=state.max_steps, epoch=state.epoch, metrics=metrics)

    def _measure_throughput(self, step: int, tokens: float, metrics: dict[str, float]) -> None:
        """Tokens per second between the end of the last measured step and the end of this one."""
        ended = self._step_ends.get(step)
        if ended is None:
            return  # a log outside a training step (an evaluation before the first one)
        mark = self._throughput_mark
        if mark is not None and step <= mark[0]:
            return  # the same step logged again: measured already
        if mark is not None and ended > mark[2] and tokens >= mark[1]:
            metrics["system.tokens_per_second"] = (tokens - mark[1]) / (ended - mark[2])
        self._throughput_mark = (step, tokens, ended)

    def _first_at_step(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """The metrics not yet reported at this step (or later): one value per metric and step."""
        fresh = {name: value for name, value in metrics.items() if self._reported.get(name, -1) < step}
        self._reported.update(dict.fromkeys(fresh, step))
        return fresh

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


def _cpu_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def _gpu_memory_gb() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 1024**3, 3)
