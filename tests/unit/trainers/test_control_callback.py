"""Pause and stop act at a step boundary every rank agrees on, and a request is never lost on the way.

A scaled-out run's ranks agree on their flags with one all-reduce per step, and read the agreement at the next
step. Here the other rank is played by a stand-in for `torch.distributed.all_reduce`, because the moment a signal
lands must be chosen exactly: CPython runs a signal handler when the C call it interrupted returns, so a pause
sent while the ranks agree sets the flag after this rank has read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from bashgym.trainers.control import ControlCallback
from bashgym.trainers.readback import HostCopy
from bashgym.trainers.signals import ControlFlags
from transformers import TrainerControl, TrainerState, TrainingArguments


def two_ranks(monkeypatch: pytest.MonkeyPatch, peer: list[int] | None, during: Any = None) -> None:
    """This rank and a peer whose [pause, stop] is `peer` (None: the peer is in this rank's state, as when both
    received the same signal at the same moment); `during` runs as the all-reduce returns."""
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)

    def all_reduce(tensor: torch.Tensor, op: Any) -> None:
        assert op == dist.ReduceOp.MAX
        if peer is not None:
            tensor.copy_(torch.maximum(tensor, torch.tensor(peer, dtype=tensor.dtype)))
        if during is not None:
            during()

    monkeypatch.setattr(dist, "all_reduce", all_reduce)


def step_end(callback: ControlCallback, args: TrainingArguments) -> TrainerControl:
    return callback.on_step_end(args, TrainerState(), TrainerControl())


@pytest.fixture
def args(tmp_path: Path) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")


def test_a_pause_that_lands_while_the_ranks_agree_is_carried_by_the_next_agreement(
    monkeypatch: pytest.MonkeyPatch, args: TrainingArguments
) -> None:
    flags = ControlFlags()
    arrivals = ["pause"]

    def signal_lands() -> None:  # on both ranks alike: the launcher passes the pause to each at once
        if arrivals:
            flags.pause = bool(arrivals.pop())

    two_ranks(monkeypatch, None, during=signal_lands)
    callback = ControlCallback(flags)
    assert not step_end(callback, args).should_training_stop, "no earlier step to have agreed on anything"
    second = step_end(callback, args)
    assert not second.should_training_stop, "both ranks read their flags before the pause landed"
    assert flags.acted_on is None
    third = step_end(callback, args)
    assert third.should_training_stop and third.should_save, "the pause was lost in the agreement"
    assert flags.acted_on == "pause"


def test_a_peer_s_pause_pauses_this_rank_at_the_same_step(
    monkeypatch: pytest.MonkeyPatch, args: TrainingArguments
) -> None:
    flags = ControlFlags()
    two_ranks(monkeypatch, [1, 0])
    callback = ControlCallback(flags)
    assert not step_end(callback, args).should_training_stop
    control = step_end(callback, args)
    assert control.should_training_stop and control.should_save
    assert flags.acted_on == "pause" and not flags.pause, "acted on the agreement; this rank was never asked"


def test_a_stop_ends_training_without_a_checkpoint_and_a_pause_wins_over_it(
    monkeypatch: pytest.MonkeyPatch, args: TrainingArguments
) -> None:
    two_ranks(monkeypatch, [0, 1])
    flags = ControlFlags()
    callback = ControlCallback(flags)
    step_end(callback, args)
    control = step_end(callback, args)
    assert control.should_training_stop and not control.should_save and flags.acted_on == "stop"
    both = ControlFlags(pause=True)
    callback = ControlCallback(both)
    step_end(callback, args)
    control = step_end(callback, args)
    assert control.should_save and both.acted_on == "pause"


def test_a_step_reads_the_last_step_s_agreement_only_after_queuing_its_own(
    monkeypatch: pytest.MonkeyPatch, args: TrainingArguments
) -> None:
    """Read at once, the agreement would make every rank wait for its GPU to finish the step, at every step; read
    after the next step's collective is queued, the GPU has that step to run while the host waits."""
    order: list[str] = []
    two_ranks(monkeypatch, [0, 0], during=lambda: order.append("agree"))
    read = HostCopy.read
    monkeypatch.setattr(HostCopy, "read", lambda copy: order.append("read") or read(copy))
    callback = ControlCallback(ControlFlags())
    for _ in range(3):
        step_end(callback, args)
    assert order == ["agree", "agree", "read", "agree", "read"]


def test_one_process_acts_on_its_own_flags_and_on_nothing_else(args: TrainingArguments) -> None:
    flags = ControlFlags()
    callback = ControlCallback(flags)
    assert not step_end(callback, args).should_training_stop and flags.acted_on is None
    flags.stop = True
    assert step_end(callback, args).should_training_stop and flags.acted_on == "stop"
