"""What a finished run keeps: retention by policy, merged weights when deployable, sha256 of every file."""

from __future__ import annotations

import json
import shutil
from typing import Any

from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import EFFECTIVE_CONFIG, RunDirectory, sha256_file

KEEPS_CHECKPOINTS = {"adapter_checkpoint", "full_run"}
KEEPS_MERGED = {"deployable", "full_run"}


def wants_merged(request: TrainingRequest) -> bool:
    return request.use_lora and request.artifact_retention in KEEPS_MERGED


def apply_retention(run: RunDirectory, request: TrainingRequest) -> list[str]:
    """Delete what the policy does not keep; return the names removed.

    adapter_only keeps final/ only; adapter_checkpoint keeps checkpoints too; deployable adds
    merged/; full_run keeps everything.
    """
    removed: list[str] = []
    complete = run.checkpoints()
    for checkpoint in run.checkpoint_dirs():
        # An incomplete checkpoint (its writer was killed mid-save) is never kept, whatever the policy.
        if request.artifact_retention not in KEEPS_CHECKPOINTS or checkpoint not in complete:
            shutil.rmtree(checkpoint)
            removed.append(checkpoint.name)
    if request.artifact_retention not in KEEPS_MERGED and run.merged_dir.exists():
        shutil.rmtree(run.merged_dir)
        removed.append(run.merged_dir.name)
    return removed


def write_effective_config(run: RunDirectory, request: TrainingRequest, trainer: Any, speed: dict[str, Any]) -> str:
    """effective_config.json: what the trainer was built with (its full configuration object, the adapter, the
    speed settings as resolved) beside what `training plan` showed; returns the file's sha256."""
    from bashgym.trainers.contracts.fields import effective_config

    peft = getattr(getattr(trainer, "model", None), "peft_config", None) or {}
    written = {
        "planned": effective_config(request),
        "trainer_class": f"{type(trainer).__module__}.{type(trainer).__qualname__}",
        "trainer_args": trainer.args.to_dict(),
        "adapter": {name: config.to_dict() for name, config in peft.items()},
        "speed": speed,
    }
    path = run.root / EFFECTIVE_CONFIG
    path.write_text(json.dumps(written, indent=2, sort_keys=True, default=str))
    return sha256_file(path)


def write_profile(run: RunDirectory, request: TrainingRequest, facts: dict[str, Any]) -> dict[str, Any]:
    """model_profile.json: what was trained and a sha256 for every kept model file (and the effective config)."""
    kept = [run.final_dir, run.merged_dir, *run.checkpoints()]
    paths = [
        path for directory in kept if directory.exists() for path in sorted(directory.rglob("*")) if path.is_file()
    ]
    if (run.root / EFFECTIVE_CONFIG).is_file():
        paths.append(run.root / EFFECTIVE_CONFIG)  # registered beside the weights: its digest is on the run
    files = [
        {"path": str(path.relative_to(run.root)), "sha256": sha256_file(path), "size_bytes": path.stat().st_size}
        for path in paths
    ]
    profile = {
        "method": request.method,
        "base_model": request.base_model,
        "use_lora": request.use_lora,
        "artifact_retention": request.artifact_retention,
        "checkpoint_limit": request.checkpoint_limit,
        **facts,
        "files": files,
    }
    run.profile_path.write_text(json.dumps(profile, indent=2))
    return profile
