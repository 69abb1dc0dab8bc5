"""The run directory contract and the line protocol a trainer speaks to its supervisor.

A run directory holds request.json, run_state.json, metrics.jsonl, model_profile.json,
training.log, checkpoint-*, final/ and, by policy, merged/. stdout carries one JSON object per
line (started, progress, checkpoint, paused, cancelled, completed, failed) and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from bashgym.trainers.contracts.topology import MAIN, RankInfo

# Exit codes the supervisor reads: distinct for every way a trainer can end.
EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_PAUSED = 75
EXIT_CANCELLED = 76

# Written into a checkpoint directory after everything else in it: a directory without it is a checkpoint
# whose writer died mid-save, and resuming from it would load half a state (or fail on a missing file).
CHECKPOINT_COMPLETE = "checkpoint_complete.json"
# What the trainer actually ran with, written beside the weights and registered with them.
EFFECTIVE_CONFIG = "effective_config.json"

CANONICAL_METRICS = {
    "loss": "train.loss",
    "learning_rate": "train.learning_rate",
    "grad_norm": "train.grad_norm",
    "eval_loss": "eval.loss",
    "reward": "train.reward_mean",
    "reward_std": "train.reward_std",
    "frac_reward_zero_std": "train.frac_zero_std_groups",
    "rewards/margins": "train.dpo_margin",
    "rewards/accuracies": "train.dpo_accuracy",
    "entropy": "train.entropy",
    # GRPOTrainer: the share of completions that hit max_completion_length (masked out of the loss when
    # mask_truncated_completions is on).
    "completions/clipped_ratio": "train.truncated_fraction",
    # FilteringGRPOTrainer: the share of completions masked out of the loss for it (0.0 without the mask).
    "completions/masked_truncated_ratio": "train.truncated_masked_fraction",
    "mean_token_accuracy": "train.mean_token_accuracy",
    # RewardTrainer: the share of a batch's pairs scored the right way round, and the mean score gap.
    "accuracy": "train.pair_accuracy",
    "margin": "train.pair_margin",
    "eval_accuracy": "eval.pair_accuracy",
    "eval_margin": "eval.pair_margin",
}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_metrics(logs: dict[str, Any]) -> dict[str, float]:
    """Rename a trainer's log keys to BashGym's metric names; keep method metrics under train.*."""
    out: dict[str, float] = {}
    for key, value in logs.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key in CANONICAL_METRICS:
            out[CANONICAL_METRICS[key]] = float(value)
        elif key.startswith(("session_distillation", "distillation")):
            out[f"train.{key}"] = float(value)
    return out


class RunDirectory:
    """Paths and writers of one run directory; the trainer's only way to report.

    In a scaled-out run every rank holds one, but only the main process's reports: another rank's protocol
    lines, metrics and checkpoint markers are dropped, and its state goes to rank-<N>.state.json, where the
    launcher finds what a failed rank said.
    """

    def __init__(self, root: Path, protocol: IO[str] | None = None, rank: RankInfo = MAIN) -> None:
        self.root = root
        self.rank = rank
        self._protocol: IO[str] | None = (protocol or sys.stdout) if rank.is_main else None
        self._metrics_lock = threading.Lock()

    @property
    def request_path(self) -> Path:
        return self.root / "request.json"

    @property
    def state_path(self) -> Path:
        return self.root / "run_state.json"

    @property
    def metrics_path(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def log_path(self) -> Path:
        return self.root / "training.log"

    @property
    def final_dir(self) -> Path:
        return self.root / "final"

    @property
    def merged_dir(self) -> Path:
        return self.root / "merged"

    @property
    def profile_path(self) -> Path:
        return self.root / "model_profile.json"

    def checkpoint_dirs(self) -> list[Path]:
        """Every checkpoint-N directory, complete or not, oldest first."""
        found = [p for p in self.root.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
        return sorted(found, key=lambda p: int(p.name.split("-")[-1]))

    def checkpoints(self) -> list[Path]:
        """The complete checkpoints, oldest first: only these may be resumed from or kept."""
        return [p for p in self.checkpoint_dirs() if (p / CHECKPOINT_COMPLETE).is_file()]

    def rank_state_path(self, rank: int) -> Path:
        return self.root / f"rank-{rank}.state.json"

    def mark_checkpoint_complete(self, checkpoint: Path, step: int) -> None:
        """Record, atomically and last, that every file of `checkpoint` is written (the main process does)."""
        if not self.rank.is_main:
            return
        marker = {"step": step, "time": round(time.time(), 3), "world_size": self.rank.world_size}
        _write_atomically(checkpoint / CHECKPOINT_COMPLETE, json.dumps(marker))

    def checkpoint_world_size(self, checkpoint: Path) -> int:
        """How many processes wrote `checkpoint` (markers from before scale-out count as one)."""
        try:
            return int(json.loads((checkpoint / CHECKPOINT_COMPLETE).read_text()).get("world_size", 1))
        except (OSError, ValueError):
            return 1

    def last_checkpoint(self) -> Path | None:
        checkpoints = self.checkpoints()
        return checkpoints[-1] if checkpoints else None

    def emit(self, event: str, **fields: Any) -> None:
        """One protocol line on stdout; flushed at once, since a crash must not lose it."""
        if self._protocol is None:
            return
        line = json.dumps({"event": event, "time": round(time.time(), 3), **fields}, default=str)
        try:
            self._protocol.write(line + "\n")
            self._protocol.flush()
        except (BrokenPipeError, ValueError):
            # The supervisor is gone (a daemon restart): keep training; run_state.json and
            # metrics.jsonl remain the record the next daemon reads.
            self._protocol = None

    def write_state(self, status: str, **fields: Any) -> None:
        """Replace run_state.json atomically (write, fsync, rename); another rank writes its own state file."""
        state = {"status": status, "pid": os.getpid(), "updated_at": round(time.time(), 3), **fields}
        path = self.state_path if self.rank.is_main else self.rank_state_path(self.rank.rank)
        _write_atomically(path, json.dumps(state, indent=2, default=str))

    def read_state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_path.read_text()))
        except (OSError, ValueError):
            return {}

    def append_metrics(self, step: int, metrics: dict[str, float], epoch: float | None = None) -> None:
        if not metrics or not self.rank.is_main:
            return
        record = {"step": step, "epoch": epoch, "time": round(time.time(), 3), "metrics": metrics}
        with self._metrics_lock, self.metrics_path.open("a") as handle:  # the system sampler's thread appends too
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def _write_atomically(path: Path, text: str) -> None:
    """Write, fsync, rename: a reader sees the old file or the whole new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
