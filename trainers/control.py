"""The callback that acts on pause and stop flags at a step boundary, on every rank at the same one."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from bashgym.trainers import failpoints
from bashgym.trainers.readback import HostCopy, to_device
from bashgym.trainers.signals import ControlFlags
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class ControlCallback(TrainerCallback):
    """Acts on the flags after each optimizer step: a pause saves a checkpoint there first.

    In a scaled-out run each rank receives its signal at its own moment; the ranks agree on the flags every step
    (one tiny all-reduce), so all of them pause or stop after the same step and none waits for a peer that left.
    Each step's agreement is read at the next step, once that step's work is queued: read at once, it would make
    every rank wait for its GPU to finish the step, each step. A pause or stop therefore lands one step later.
    """

    def __init__(self, flags: ControlFlags) -> None:
        self.flags = flags
        self._agreeing: HostCopy | None = None  # the last step's agreement, on its way to the host

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        failpoints.reach("trainer.step")
        pause, stop = self.flags.pause, self.flags.stop
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            pause, stop = self._agree(pause, stop, args.device)
        if pause:
            self.flags.acted_on = "pause"
            control.should_save = True
            control.should_training_stop = True
        elif stop:
            self.flags.acted_on = "stop"
            control.should_training_stop = True
        return control

    def _agree(self, pause: bool, stop: bool, device: torch.device) -> tuple[bool, bool]:
        """What any rank had asked for as the previous step ended: every rank reads it at this step."""
        asked = to_device([int(pause), int(stop)], device)
        dist.all_reduce(asked, op=dist.ReduceOp.MAX)
        # Not written back to the flags: a signal handled while the ranks agreed (Python runs handlers when the
        # all-reduce returns) set its flag after this rank read it; the next step's agreement carries it.
        agreed, self._agreeing = self._agreeing, HostCopy(asked)
        if agreed is None:
            return False, False
        pause_agreed, stop_agreed = agreed.read()
        return bool(pause_agreed), bool(stop_agreed)
