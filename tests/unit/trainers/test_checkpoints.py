"""A trainer resumes only from a checkpoint whose every file was written: one killed mid-save is skipped."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from bashgym.trainers import runner
from bashgym.trainers.artifacts import apply_retention
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import EXIT_FAILED, RunDirectory
from bashgym.trainers.contracts.topology import RankInfo
from bashgym.trainers.runner import run_training
from bashgym.trainers.signals import ControlFlags


def _save(run: RunDirectory, step: int, *, is_complete: bool) -> Path:
    """The layout transformers leaves: the adapter first, trainer_state.json last; a kill stops it midway."""
    checkpoint = run.root / f"checkpoint-{step}"
    checkpoint.mkdir()
    (checkpoint / "adapter_model.safetensors").write_bytes(b"weights")
    if is_complete:
        (checkpoint / "trainer_state.json").write_text("{}")
        run.mark_checkpoint_complete(checkpoint, step)
    return checkpoint


def test_the_last_checkpoint_skips_one_whose_writer_died_mid_save(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path, protocol=None)
    _save(run, 10, is_complete=True)
    _save(run, 20, is_complete=False)
    last = run.last_checkpoint()
    assert last is not None and last.name == "checkpoint-10"


def test_no_complete_checkpoint_means_a_resume_starts_from_scratch(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path, protocol=None)
    _save(run, 10, is_complete=False)
    assert run.last_checkpoint() is None


def test_retention_removes_an_incomplete_checkpoint_even_when_checkpoints_are_kept(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path, protocol=None)
    _save(run, 10, is_complete=True)
    _save(run, 20, is_complete=False)
    request = TrainingRequest.model_validate(
        {"strategy": "sft", "base_model": "m", "dataset_path": "d.jsonl", "artifact_retention": "adapter_checkpoint"}
    )
    assert apply_retention(run, request) == ["checkpoint-20"]
    assert [p.name for p in run.checkpoints()] == ["checkpoint-10"]


def test_a_checkpoint_records_its_world_size_and_another_rank_marks_nothing(tmp_path: Path) -> None:
    main = RunDirectory(tmp_path, protocol=None, rank=RankInfo(rank=0, world_size=2))
    other = RunDirectory(tmp_path, protocol=None, rank=RankInfo(rank=1, world_size=2, local_rank=1))
    checkpoint = _save(other, 10, is_complete=True)
    assert other.last_checkpoint() is None, "only the main process marks a checkpoint complete"
    main.mark_checkpoint_complete(checkpoint, 10)
    assert main.checkpoint_world_size(checkpoint) == 2
    other.write_state("failed", error="boom")
    assert json.loads((tmp_path / "rank-1.state.json").read_text())["error"] == "boom"
    assert not main.state_path.exists(), "run_state.json is the main process's"


def test_a_resume_with_another_world_size_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ls"}]})
    )
    model = tmp_path / "model"  # a model directory whose weights are never loaded
    model.mkdir()
    (model / "config.json").write_text("{}")
    request = {"strategy": "sft", "base_model": str(model), "dataset_path": str(data)}
    (tmp_path / "request.json").write_text(json.dumps(request))
    run = RunDirectory(tmp_path, protocol=io.StringIO())
    _save(RunDirectory(tmp_path, protocol=None, rank=RankInfo(world_size=2)), 10, is_complete=True)
    code = run_training(run, resume=True, environ={}, flags=ControlFlags())
    assert code == EXIT_FAILED
    error = run.read_state()["error"]
    assert "checkpoint-10 was written by 2 processes and this run has 1" in error, error


def test_ddp_s_error_for_an_unused_weight_says_which_request_field_to_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scaled-out dense model skips DDP's search for unused weights (speed settings); a model that does leave one
    unused fails at the next step with DDP's error, which names DDP's argument, not the request's field."""
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"text": "ls -la"}))
    request = {"strategy": "sft", "base_model": "m", "dataset_path": str(data)}
    (tmp_path / "request.json").write_text(json.dumps(request))

    def ddp_fails(*args: object, **kwargs: object) -> int:
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a new one. This error "
            "indicates that your module has parameters that were not used in producing loss. You can enable unused "
            "parameter detection by passing the keyword argument `find_unused_parameters=True` to "
            "`torch.nn.parallel.DistributedDataParallel`"
        )

    monkeypatch.setattr(runner, "_train", ddp_fails)
    run = RunDirectory(tmp_path, protocol=io.StringIO())
    assert run_training(run, resume=False, environ={}, flags=ControlFlags()) == EXIT_FAILED
    error = run.read_state()["error"]
    assert error.startswith("A step left some trainable weights unused, and this run skipped DDP's search for them; ")
    assert "send the request again with find_unused_parameters true. RuntimeError: Expected to have" in error
