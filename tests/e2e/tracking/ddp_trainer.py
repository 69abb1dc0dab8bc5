"""A training script as a team runs it under `torchrun --nproc_per_node 2` (CPU, gloo): a plain
transformers.Trainer on the tiny model with BashGymCallback, which saves a checkpoint at its last step.
tests/e2e/tracking/test_callback_distributed.py runs it; each rank writes what its callback holds and its log
history to OUT/rank-N.json.

    torchrun --standalone --nproc_per_node 2 ddp_trainer.py MODEL OUT [LAG_S [crash]]   (BASHGYM_API, BASHGYM_TOKEN)

LAG_S: rank 1 writes its share of the checkpoint (its rng_state_1.pth) that much later than it would, as a rank
on a slower disk or a busier node does; the Trainer's own collectives are all behind it by then.
crash: at the second step rank 1 raises while rank 0 is busy outside a collective (a long evaluation, an upload)
for a minute, so torchrun stops rank 0 with SIGTERM as it stops every rank when one fails.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from bashgym.track.transformers import BashGymCallback
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

MAX_STEPS = 3


class Uneven(Trainer):
    """A Trainer whose rank 1 writes its share of a checkpoint `lag_s` late, or fails (`crash`)."""

    def __init__(self, *args: Any, lag_s: float, crash: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lag_s, self.crash = lag_s, crash

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        if self.crash and self.state.global_step == 1:
            if not self.is_world_process_zero():
                raise RuntimeError("rank 1 ran out of memory")
            time.sleep(60)
        return super().training_step(*args, **kwargs)

    def _save_rng_state(self, output_dir: str) -> None:
        if not self.is_world_process_zero():
            time.sleep(self.lag_s)
        super()._save_rng_state(output_dir)


def main(model_dir: str, out: str, lag_s: str = "0", crash: str = "") -> None:
    rank = int(os.environ["RANK"])
    callback = BashGymCallback(
        project="nightly", model_version="tiny-v1", dataset_version="rows-v1", interval_s=0.05, system_metrics_s=0
    )
    rows = [{"input_ids": torch.tensor([2, 5, 6, 3]), "labels": torch.tensor([2, 5, 6, 3])}] * 8
    args = TrainingArguments(
        output_dir=str(Path(out) / "trainer"),
        max_steps=MAX_STEPS,
        save_steps=MAX_STEPS,
        logging_steps=1,
        per_device_train_batch_size=2,
        report_to="none",
        use_cpu=True,
        ddp_backend="gloo",
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = Uneven(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        args=args,
        train_dataset=rows,
        callbacks=[callback],
        lag_s=float(lag_s),
        crash=crash == "crash",
    )
    trainer.train()
    held = {"rank": rank, "run_id": callback.run_id, "open": callback.run is not None}
    history = trainer.state.log_history
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps({**held, "log_history": history}))
    # As every torchrun script should: a gloo process group left for the interpreter's exit to tear down can
    # abort the process (SIGABRT, "terminate called without an active exception"; pytorch/pytorch#190489).
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
