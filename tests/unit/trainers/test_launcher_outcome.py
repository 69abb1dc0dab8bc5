"""How a scaled-out run's launcher reports a stop: accelerate's launcher, stopped by a signal, raised torch's
SignalException up to 1.15 and exits `128 + signal` from 1.16 on; either way the run ends as its ranks ended."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import accelerate.commands.launch
import pytest
from bashgym.trainers import launch
from bashgym.trainers.contracts.rundir import EXIT_CANCELLED, EXIT_PAUSED, RunDirectory
from torch.distributed.elastic.multiprocessing.api import SignalException


def raising(error: BaseException) -> Callable[[object], None]:
    def launch_command(args: object) -> None:
        raise error

    return launch_command


STOPPED_BY_SIGTERM = {
    "accelerate 1.15 and older": SignalException("Process 1 got signal: 15", signal.SIGTERM),
    "accelerate 1.16 and newer": SystemExit(128 + signal.SIGTERM),
}


@pytest.mark.parametrize("error", STOPPED_BY_SIGTERM.values(), ids=STOPPED_BY_SIGTERM.keys())
@pytest.mark.parametrize(("ranks_left", "code"), [("cancelled", EXIT_CANCELLED), ("paused", EXIT_PAUSED)])
def test_a_launcher_stopped_by_a_signal_exits_as_its_ranks_ended(
    error: BaseException, ranks_left: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    run = RunDirectory(tmp_path)
    run.write_state(ranks_left, step=108)
    monkeypatch.setattr(accelerate.commands.launch, "launch_command", raising(error))
    assert launch._launch(run, [str(tmp_path)], machine_rank=0) == code
    assert "launcher: SIGTERM; the ranks were stopped" in capsys.readouterr().out


def test_a_signal_that_came_before_any_rank_wrote_its_state_is_a_cancelled_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accelerate.commands.launch, "launch_command", raising(SystemExit(128 + signal.SIGINT)))
    assert launch._launch(RunDirectory(tmp_path), [str(tmp_path)], machine_rank=0) == EXIT_CANCELLED


@pytest.mark.parametrize("exit_code", [1, 2, 128, 128 + 200, "usage"])
def test_any_other_exit_of_accelerate_is_not_taken_for_a_stop(
    exit_code: int | str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accelerate.commands.launch, "launch_command", raising(SystemExit(exit_code)))
    with pytest.raises(SystemExit) as raised:
        launch._launch(RunDirectory(tmp_path), [str(tmp_path)], machine_rank=0)
    assert raised.value.code == exit_code
