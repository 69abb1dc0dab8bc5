"""Pause and stop requests from the supervisor: signals become flags a callback acts on at a step boundary."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


@dataclass
class ControlFlags:
    pause: bool = False
    stop: bool = False

    def install(self) -> None:
        """SIGUSR1 asks to pause (checkpoint, then exit); SIGTERM asks to stop (status cancelled)."""
        signal.signal(signal.SIGUSR1, self._on_pause)
        signal.signal(signal.SIGTERM, self._on_stop)

    def _on_pause(self, signum: int, frame: Any) -> None:
        self.pause = True

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stop = True


class ControlCallback(TrainerCallback):
    """Acts on the flags after each optimizer step: a pause saves a checkpoint there first."""

    def __init__(self, flags: ControlFlags) -> None:
        self.flags = flags

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self.flags.pause:
            control.should_save = True
            control.should_training_stop = True
        elif self.flags.stop:
            control.should_training_stop = True
        return control
