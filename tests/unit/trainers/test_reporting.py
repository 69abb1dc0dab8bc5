"""What the trainer reports per log call: one value per metric and step, and throughput between step ends."""

from __future__ import annotations

from typing import Any

from bashgym.trainers.reporting import ReportingCallback
from transformers import TrainerControl, TrainerState, TrainingArguments


class Recorder:
    """Stands in for RunDirectory: keeps what the callback appends and emits."""

    def __init__(self) -> None:
        self.points: list[tuple[int, dict[str, float]]] = []

    def append_metrics(self, step: int, metrics: dict[str, float], epoch: float | None = None) -> None:
        if metrics:
            self.points.append((step, metrics))

    def emit(self, event: str, **fields: Any) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _callback() -> tuple[ReportingCallback, Recorder, Clock, TrainerState]:
    recorder, clock = Recorder(), Clock()
    callback = ReportingCallback(recorder, clock=clock)  # type: ignore[arg-type]
    return callback, recorder, clock, TrainerState()


def _step(callback: ReportingCallback, state: TrainerState, step: int) -> None:
    state.global_step = step
    callback.on_step_end(TrainingArguments("/tmp/unused"), state, TrainerControl())


def _log(callback: ReportingCallback, state: TrainerState, step: int, **logs: float) -> None:
    state.global_step = step
    callback.on_log(TrainingArguments("/tmp/unused"), state, TrainerControl(), logs=logs)


def test_throughput_is_measured_between_step_ends_not_when_a_late_log_is_written() -> None:
    callback, recorder, clock, state = _callback()
    clock.now = 10.0
    _step(callback, state, 1)
    _log(callback, state, 1, loss=2.0, num_tokens=100)
    clock.now = 12.0
    _step(callback, state, 2)  # 200 tokens in the 2 s of step 2
    clock.now = 12.5
    _step(callback, state, 3)
    clock.now = 20.0
    _log(callback, state, 2, loss=1.5, num_tokens=300)  # step 2's log, written during step 3 (SFT's late log)
    clock.now = 26.5
    _step(callback, state, 4)
    _log(callback, state, 4, loss=1.2, num_tokens=1300)  # a save step logs at once: 1,000 tokens over steps 3-4
    rates = [(step, m["system.tokens_per_second"]) for step, m in recorder.points if "system.tokens_per_second" in m]
    assert rates == [(2, 100.0), (4, 1000.0 / 14.5)]


def test_a_metric_is_reported_once_per_step_though_the_step_is_logged_again() -> None:
    """transformers logs its end-of-training summary at the last step again; the ledger keeps one value."""
    callback, recorder, clock, state = _callback()
    for step, tokens in ((1, 100), (2, 300)):
        clock.now += 1.0
        _step(callback, state, step)
        _log(callback, state, step, loss=1.0 / step, num_tokens=tokens)
    clock.now += 5.0
    _log(callback, state, 2, num_tokens=300, train_runtime=9.0)  # the summary: same step, same tokens
    _log(callback, state, 2, loss=0.25)  # a second value of a metric at a recorded step
    seen: dict[tuple[int, str], int] = {}
    for step, metrics in recorder.points:
        for name in metrics:
            seen[(step, name)] = seen.get((step, name), 0) + 1
    assert all(count == 1 for count in seen.values()), seen
    assert recorder.points[-1][1].get("train.loss") == 0.5, "the first value of a step stands"
