"""The callback that acts on pause and stop flags at a step boundary."""

from __future__ import annotations

from typing import Any

from bashgym.trainers.signals import ControlFlags
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


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
