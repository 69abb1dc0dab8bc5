"""A trainer resumes only from a checkpoint whose every file was written: one killed mid-save is skipped."""

from __future__ import annotations

from pathlib import Path

from bashgym.trainers.artifacts import apply_retention
from bashgym.trainers.rundir import RunDirectory
from bashgym.trainers.specs import TrainingRequest


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
