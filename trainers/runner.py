"""One training run in its own process: read request.json, check the data, train, keep what policy keeps."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

from bashgym.trainers.contracts.datasets import format_report, leaked_pairs, validate_request_data
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import (
    EXIT_CANCELLED,
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_PAUSED,
    RunDirectory,
    canonical_metrics,
)
from bashgym.trainers.contracts.runtime import capture_environment
from bashgym.trainers.signals import ControlFlags
from bashgym.trainers.system import SystemSampler, interval_from


class RefusedRequest(RuntimeError):
    """The request cannot run on this machine as asked (4-bit without a GPU, a missing backend, ...)."""


def run_training(run: RunDirectory, *, resume: bool, environ: dict[str, str], flags: ControlFlags) -> int:
    """Run the request in `run` and return the exit code the supervisor reads."""
    try:
        request = TrainingRequest.model_validate_json(run.request_path.read_text())
        _check_request(request)
        return _train(run, request, flags, resume=resume, environ=environ)
    except Exception as exc:  # every failure becomes `failed` with a summary the supervisor records
        traceback.print_exc()
        summary = _summary(exc)
        run.write_state("failed", error=summary)
        run.emit("failed", error=summary, error_type=type(exc).__name__)
        return EXIT_FAILED


def _summary(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if "find_unused_parameters" in text:  # DDP's error for a weight a step did not reach (speed settings)
        text = (
            "A step left some trainable weights unused, and this run skipped DDP's search for them; send the request "
            f"again with find_unused_parameters true. {text}"
        )
    return text[:2000]


def _check_request(request: TrainingRequest) -> None:
    """What `training plan` checked before launch, checked again on the machine that trains."""
    import importlib.util

    import torch
    from bashgym.trainers.contracts.fields import Capabilities, model_problems, refusals

    machine = Capabilities(
        cuda=torch.cuda.is_available(), bitsandbytes=importlib.util.find_spec("bitsandbytes") is not None
    )
    problems = refusals(request, machine) + model_problems(request)
    if problems:
        raise RefusedRequest(" ".join(problems))
    for path in filter(None, (request.dataset_path, request.eval_dataset_path)):
        report = validate_request_data(request, Path(path))
        if not report.ok:
            raise RefusedRequest(f"The dataset breaks the {request.method} contract.\n{format_report(report)}")
    if request.method == "reward_model" and request.eval_dataset_path:
        leaks = leaked_pairs(Path(request.dataset_path), Path(request.eval_dataset_path))
        if not leaks.ok:
            raise RefusedRequest(f"The held-out pairs leak from the training pairs.\n{format_report(leaks)}")


def _train(
    run: RunDirectory, request: TrainingRequest, flags: ControlFlags, *, resume: bool, environ: dict[str, str]
) -> int:
    # Imported here, after the request's checks: transformers and peft take seconds to import, which a refused
    # request (a dataset breaking its contract, 4-bit without a GPU) need not wait for.
    from bashgym.trainers.artifacts import write_effective_config
    from bashgym.trainers.contracts.topology import hold_until_exit
    from bashgym.trainers.control import ControlCallback
    from bashgym.trainers.loading import load_model_and_tokenizer
    from bashgym.trainers.methods import build_trainer

    checkpoint = run.last_checkpoint() if resume else None
    if checkpoint is not None and run.checkpoint_world_size(checkpoint) != run.rank.world_size:
        raise RefusedRequest(
            f"{checkpoint.name} was written by {run.checkpoint_world_size(checkpoint)} processes and this run has "
            f"{run.rank.world_size}; a run resumes with the world size it was checkpointed at. Start a new run "
            "from its weights to change it."
        )
    run.write_state("preparing", step=0, resumed_from=checkpoint.name if checkpoint else None)
    model, tokenizer, facts = load_model_and_tokenizer(request)
    if flags.stop and not run.rank.is_distributed:  # stopped while loading: nothing trained, nothing to keep
        # (Ranks stop together, at a step boundary they agree on: ControlCallback.)
        run.write_state("cancelled", step=0)
        run.emit("cancelled", step=0)
        return EXIT_CANCELLED
    trainer, speed = build_trainer(request, model, tokenizer, run)
    if run.rank.is_distributed:
        hold_until_exit(trainer)
    facts["speed"] = speed.record()
    if request.is_distributed:
        facts["distributed"] = _topology(request)
    trainer.add_callback(ControlCallback(flags))
    _quiet_stdout_printer(trainer)
    if run.rank.is_main:
        facts["effective_config_sha256"] = write_effective_config(run, request, trainer, facts["speed"])
        facts["environment"] = capture_environment()  # torch is loaded by now: its CUDA is read, not guessed
    run.emit("started", method=request.method, resumed_from=checkpoint.name if checkpoint else None, **facts)
    run.write_state("running", step=0, last_checkpoint=checkpoint.name if checkpoint else None)
    system = _system_sampler(run, trainer, environ)
    system.start()
    try:
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        system.stop()
    step = trainer.state.global_step
    # What training acted on, at a step boundary every rank agreed on; a request that came after the last step
    # finds the run complete.
    if flags.acted_on == "pause":
        last = run.last_checkpoint()
        run.write_state("paused", step=step, last_checkpoint=last.name if last else None)
        run.emit("paused", step=step, checkpoint=last.name if last else None)
        return EXIT_PAUSED
    if flags.acted_on == "stop":
        from bashgym.trainers.artifacts import apply_retention

        if run.rank.is_main:
            apply_retention(run, request)
        run.write_state("cancelled", step=step)
        run.emit("cancelled", step=step)
        return EXIT_CANCELLED
    return _finish(run, request, trainer, tokenizer, step, result.metrics, facts, environ)


def _finish(
    run: RunDirectory,
    request: TrainingRequest,
    trainer: Any,
    tokenizer: Any,
    step: int,
    train_metrics: dict[str, Any],
    facts: dict[str, Any],
    environ: dict[str, str],
) -> int:
    from bashgym.trainers.artifacts import apply_retention, wants_merged, write_profile

    trainer.save_model(str(run.final_dir))  # every rank takes part (sharded weights are gathered); rank 0 writes
    if not run.rank.is_main:
        run.write_state("completed", step=step)
        return EXIT_COMPLETED
    tokenizer.save_pretrained(str(run.final_dir))
    if wants_merged(request):
        merged = trainer.model.merge_and_unload()
        merged.save_pretrained(str(run.merged_dir))
        tokenizer.save_pretrained(str(run.merged_dir))
    hub = _upload(run, request, environ) if request.auto_push_hf else None
    removed = apply_retention(run, request)
    summary = {**canonical_metrics(train_metrics), **_last_logged(run)}
    profile = write_profile(run, request, {**facts, "final_step": step, "metrics": summary})
    run.write_state("completed", step=step, removed=removed, hub=hub)
    run.emit("completed", step=step, metrics=summary, files=len(profile["files"]))
    return EXIT_COMPLETED


def _system_sampler(run: RunDirectory, trainer: Any, environ: dict[str, str]) -> SystemSampler:
    """system.* series into metrics.jsonl at the trainer's global step, every settings.system_metrics_s (the
    daemon passes it in the environment); the main process alone samples, and for the whole machine."""
    interval_s = interval_from(environ) if run.rank.is_main else 0.0
    return SystemSampler(
        lambda step, values: run.append_metrics(step, values),
        lambda: int(trainer.state.global_step),
        interval_s=interval_s,
        visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
    )


def _topology(request: TrainingRequest) -> dict[str, Any]:
    from bashgym.trainers.contracts.topology import topology
    from bashgym.trainers.speed import Machine, resolve_mixed_precision

    return {**topology(request, resolve_mixed_precision(request, Machine.detect())), "backend": _backend()}


def _backend() -> str:
    import torch.distributed

    return str(torch.distributed.get_backend()) if torch.distributed.is_initialized() else "none"


def _upload(run: RunDirectory, request: TrainingRequest, environ: dict[str, str]) -> dict[str, Any]:
    from bashgym.trainers.hub import push_to_hub

    uploaded = push_to_hub(run, request, environ)
    run.emit("uploaded", **uploaded)
    return uploaded


def _last_logged(run: RunDirectory) -> dict[str, float]:
    """The latest value of each metric in metrics.jsonl."""
    latest: dict[str, float] = {}
    if run.metrics_path.exists():
        for line in run.metrics_path.read_text().splitlines():
            latest.update(json.loads(line)["metrics"])
    return latest


def _quiet_stdout_printer(trainer: Any) -> None:
    # With tqdm off, transformers adds a PrinterCallback that prints log dicts; stdout is the protocol.
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
