"""One rank of a two-process SFT run on the CPU (gloo), as tests/e2e/trainers/test_trainer_speed.py starts it:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.support.two_ranks_sft STUDENT OUT

Each rank trains BashGym's SFT trainer (logging every step, a checkpoint at step 4) and TRL's own on the same rows,
then BashGym's again with a pause that rank 1 alone receives as step 2 begins. Each writes what it saw to
OUT/rank-N.json: per step, the reads that made the host wait, the order of steps, logs and checkpoints, and the logs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from bashgym.trainers.contracts.topology import RankInfo, exit_rank, hold_until_exit
from bashgym.trainers.control import ControlCallback
from bashgym.trainers.methods import sft
from bashgym.trainers.signals import ControlFlags
from transformers import TrainerCallback, TrainerControl, TrainerState
from trl import SFTTrainer

from tests.support.trainer_probes import HostReads, StepMarker, Timeline, sft_trainer

FIELDS = {"num_processes": 2, "packing": True, "max_steps": 6, "logging_steps": 1, "save_steps": 4}


class PauseAt(TrainerCallback):
    """Sets the pause flag as a step begins, as a signal to this rank alone would."""

    def __init__(self, flags: ControlFlags, step: int | None) -> None:
        self.flags, self.step = flags, step

    def on_step_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if state.global_step + 1 == self.step:
            self.flags.pause = True


def train(trainer: Any, flags: ControlFlags) -> dict[str, Any]:
    hold_until_exit(trainer)  # as the product's ranks do: freeing a gloo group can deadlock
    reads, timeline = HostReads(), Timeline()
    for callback in (ControlCallback(flags), StepMarker(reads), timeline):
        trainer.add_callback(callback)
    with reads:
        trainer.train()
    return {
        "reads": reads.reads,
        "events": timeline.events,
        "logs": timeline.logs,
        "step": trainer.state.global_step,
        "total_flos": trainer.state.total_flos,
        "acted_on": flags.acted_on,
    }


def main(student: Path, out: Path) -> None:
    rank = RankInfo.from_env(os.environ)
    seen: dict[str, Any] = {}
    with open(os.devnull, "w") as devnull:
        # Each rank its own directory: the rows file is written as the request is made.
        mine = out / f"rank-{rank.rank}"
        seen["ours"] = train(sft_trainer(student, mine / "ours", devnull, rank, **FIELDS)[0], ControlFlags())
        ours = sft.DeviceMetricsSFTTrainer
        sft.DeviceMetricsSFTTrainer = SFTTrainer  # type: ignore[misc]
        try:
            seen["trl"] = train(sft_trainer(student, mine / "trl", devnull, rank, **FIELDS)[0], ControlFlags())
        finally:
            sft.DeviceMetricsSFTTrainer = ours  # type: ignore[misc]
        flags = ControlFlags()
        trainer, _ = sft_trainer(student, mine / "paused", devnull, rank, **FIELDS)
        trainer.add_callback(PauseAt(flags, 2 if rank.rank == 1 else None))
        seen["paused"] = train(trainer, flags)
    (out / f"rank-{rank.rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
    exit_rank(0)
