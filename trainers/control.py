"""The callback that acts on pause and stop flags at a step boundary, on every rank at the same one."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from bashgym.trainers import failpoints
from bashgym.trainers.signals import ControlFlags
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class ControlCallback(TrainerCallback):
    """Acts on the flags after each optimizer step: a pause saves a checkpoint there first.

    In a scaled-out run each rank receives its signal at its own moment; the ranks agree on the flags every step
    (one tiny all-reduce), so all of them pause or stop after the same step and none waits for a peer that left.
    """

    def __init__(self, flags: ControlFlags) -> None:
        self.flags = flags

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        failpoints.reach("trainer.step")
        pause, stop = self.flags.pause, self.flags.stop
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            agreed = torch.tensor([int(pause), int(stop)], device=args.device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            # Not written back to the flags: a signal handled while the ranks agreed (Python runs handlers when
            # the all-reduce returns) set its flag after this rank read it; the next step's agreement carries it.
            pause, stop = bool(agreed[0]), bool(agreed[1])
        if pause:
            self.flags.acted_on = "pause"
            control.should_save = True
            control.should_training_stop = True
        elif stop:
            self.flags.acted_on = "stop"
            control.should_training_stop = True
        return control
