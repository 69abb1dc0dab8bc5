"""Probes of BashGym's SFT trainer built in-process as a trainer process builds it: its requests on variable-length
rows, the reads that make the host wait for the device, and the order of its steps, logs and checkpoints. Shared by
tests/e2e/trainers/test_trainer_speed.py and the ranks of tests/support/two_ranks_sft.py."""

from __future__ import annotations

import json
import random
import traceback
from pathlib import Path
from typing import Any

import torch
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.contracts.topology import MAIN, RankInfo
from bashgym.trainers.methods import build_trainer
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, TrainerControl, TrainerState

WORDS = ["ls", "cat", "grep", "wc", "sort", "uniq", "head", "tail", "find", "echo", "awk", "sed", "cut", "tr", "xargs"]


def variable_length_rows(path: Path, count: int = 24) -> Path:
    draw = random.Random(7)
    rows = [{"text": " ".join(draw.choice(WORDS) for _ in range(draw.randint(2, 40)))} for _ in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def sft_request(student: Path, tmp_path: Path, **fields: Any) -> TrainingRequest:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return TrainingRequest(
        strategy="sft",
        base_model=str(student),
        dataset_path=str(variable_length_rows(tmp_path / "rows.jsonl")),
        batch_size=4,
        gradient_accumulation_steps=1,
        max_seq_length=128,
        **({"max_steps": 2, "use_lora": False} | fields),
    )


def sft_trainer(student: Path, tmp_path: Path, devnull: Any, rank: RankInfo = MAIN, **fields: Any) -> tuple[Any, Any]:
    request = sft_request(student, tmp_path, **fields)
    model = AutoModelForCausalLM.from_pretrained(student)
    tokenizer = AutoTokenizer.from_pretrained(student)
    return build_trainer(request, model, tokenizer, RunDirectory(tmp_path, devnull, rank))


class HostReads(TorchDispatchMode):
    """Counts, per training step, the ops that make the host wait for the device: reading a value back
    (`.item()`, `bool(tensor)`, `int(tensor)`) or an op whose output size depends on the data (`nonzero`,
    `masked_select`, indexing by a boolean mask)."""

    aten = torch.ops.aten
    READS = frozenset({aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default})
    # Host-side by construction: the dataloader collates on the CPU (in workers on a GPU host), before the
    # batch is copied over. transformers' mask checks read a value only when not traced: a compiled run
    # (a GPU run's default) skips them.
    EXEMPT = ("torch/utils/data/", "accelerate/data_loader.py", "transformers/masking_utils.py")

    def __init__(self) -> None:
        super().__init__()
        self.step: int | None = None
        self.reads: dict[int, list[str]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        by_mask = func is self.aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1])
        if (func in self.READS or by_mask) and self.step is not None:
            stack = traceback.extract_stack()[:-1]
            if not any(exempt in frame.filename for frame in stack for exempt in self.EXEMPT):
                caller = next(f for f in reversed(stack) if "/torch/" not in f.filename)
                self.reads.setdefault(self.step, []).append(f"{caller.filename}:{caller.lineno}: {caller.line}")
        return func(*args, **(kwargs or {}))


class StepMarker(TrainerCallback):
    """Tells HostReads which step runs; keeps what each log said."""

    def __init__(self, reads: HostReads | None = None) -> None:
        self.reads = reads
        self.logs: list[dict[str, float]] = []

    def on_step_begin(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.reads is not None:
            self.reads.step = state.global_step + 1

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.logs.append(dict(kwargs["logs"]))


class Timeline(TrainerCallback):
    """The order of each step's optimizer step, each log (by the step it reports) and each checkpoint."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.logs: list[dict[str, float]] = []

    def on_optimizer_step(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.events.append(("optimizer", state.global_step + 1))  # counted once the step ends

    def on_log(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.events.append(("log", state.global_step))
        self.logs.append({**kwargs["logs"], "step": state.global_step, "epoch": state.epoch})

    def on_save(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.events.append(("save", state.global_step))
