"""The methods; each builds a TRL (or TRL-derived, or sentence-transformers) trainer for one request."""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from bashgym.trainers.attention import use_packed_attention
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.loading import load_rows
from bashgym.trainers.methods.common import common_args
from bashgym.trainers.reporting import ReportingCallback
from bashgym.trainers.speed import (
    SFT_PATH,
    Machine,
    ModelShape,
    SpeedPlan,
    apply_liger,
    compile_with_fallback,
    plan_speed,
    resolve_liger,
)

# Rows read to judge whether lengths vary enough for packing: enough for a stable share, cheap to tokenize.
LENGTH_SAMPLE_ROWS = 1024
# What torch.compile hands the captured graphs to; tests swap in a backend that counts them.
COMPILE_BACKEND: Any = "inductor"


def build_trainer(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory) -> tuple[Any, SpeedPlan]:
    """The method's trainer with the run's speed settings applied, and those settings as resolved."""
    machine = Machine.detect()
    rows = functools.cache(lambda: load_rows(request.dataset_path))  # read once, if a decision needs them
    plan = plan_speed(
        request,
        machine,
        ModelShape.of(_transformer_of(model), use_lora=request.use_lora),
        lengths=_sample_lengths(rows(), request.seed, tokenizer) if _needs_lengths(request, machine) else (),
        steps=_most_steps(request, machine, rows),
    )
    args = {**common_args(request, run), **_renamed_for_transformers(plan.training_args())}
    if request.method in SFT_PATH:
        # Liger goes in below, before the compile probe, not through transformers when training starts.
        args |= {"packing": plan.uses("packing"), "use_liger_kernel": False}
    if request.method in SFT_PATH and plan.uses("packing"):
        # A packed row's sequences must attend to themselves alone, at the cost of their own lengths.
        _print(use_packed_attention(model))
    match request.method:
        case "sft":
            from bashgym.trainers.methods.sft import build
        case "dpo":
            from bashgym.trainers.methods.dpo import build
        case "grpo" | "rlvr":
            from bashgym.trainers.methods.grpo import build
        case "distillation":
            from bashgym.trainers.methods.distillation import build
        case "session_distillation":
            from bashgym.trainers.methods.session import build
        case "reward_model":
            from bashgym.trainers.methods.reward import build
        case "embedding_retriever":
            from bashgym.trainers.methods.retriever import build
    trainer = build(request, model, tokenizer, run, args)
    if plan.uses("liger"):
        _print(apply_liger(trainer.model))
    if plan.uses("compile"):
        plan = _compile(trainer, plan, request, machine)
    print(plan.log_line(), flush=True)
    trainer.add_callback(ReportingCallback(run))
    return trainer, plan


def _transformer_of(model: Any) -> Any:
    """The transformers model whose shape the speed plan reads: a SentenceTransformer's first module wraps it."""
    if hasattr(model, "config"):
        return model
    return model[0].auto_model


def _renamed_for_transformers(args: dict[str, Any]) -> dict[str, Any]:
    """transformers 5.2x renamed gradient_checkpointing to activation_checkpointing and warns on the old name
    (TRL's own default sets it); earlier 5.x releases know only the old one."""
    from transformers import TrainingArguments

    if "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)}:
        args = dict(args)
        args["activation_checkpointing"] = args.pop("gradient_checkpointing")
    return args


def _most_steps(request: TrainingRequest, machine: Machine, rows: Callable[[], list[Any]]) -> int | None:
    """The run's optimizer steps at most (packing only makes them fewer), where auto compilation asks for them."""
    if request.max_steps > 0:
        return request.max_steps
    if not (machine.cuda and request.method in SFT_PATH and request.compile == "auto"):
        return None
    rows_per_step = request.batch_size * request.gradient_accumulation_steps * request.num_processes
    return math.ceil(request.num_epochs * math.ceil(len(rows()) / rows_per_step))


def _needs_lengths(request: TrainingRequest, machine: Machine) -> bool:
    return request.method in SFT_PATH and request.packing == "auto" and machine.cuda and request.batch_size > 1


def _sample_lengths(rows: list[dict[str, Any]], seed: int, tokenizer: Any) -> Sequence[int]:
    """Token lengths of a seeded sample of the training rows, in the order random batches would draw them."""
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    lengths = []
    for row in shuffled[:LENGTH_SAMPLE_ROWS]:
        if "messages" in row:
            lengths.append(len(tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=False)))
        else:
            lengths.append(len(tokenizer(str(row.get("text", "")))["input_ids"]))
    return lengths


def _compile(trainer: Any, plan: SpeedPlan, request: TrainingRequest, machine: Machine) -> SpeedPlan:
    """Compile the model in place, proven by one real step; a failure trains eager, with Liger where auto left it
    out for the compiler's sake, and is recorded as such."""
    # A packed row's length (and its count of sequences) changes with every batch.
    any_length = plan.uses("packing")
    failure, seconds = compile_with_fallback(
        trainer.model, lambda: _probe_step(trainer), log=_print, backend=COMPILE_BACKEND, any_length=any_length
    )
    choice = plan.choices["compile"]
    if failure is None:
        lengths = ", for rows of any length" if any_length else ""
        choice = replace(choice, reason=f"{choice.reason}; compiled in {seconds:.0f} s{lengths}")
        return replace(plan, choices={**plan.choices, "compile": choice})
    choices = {
        **plan.choices,
        "compile": replace(choice, used=False, reason=f"compilation failed after {seconds:.0f} s: {failure}"),
    }
    eager_liger = resolve_liger(request.liger, machine, request.method, compiled=False)
    if eager_liger.used and not plan.uses("liger"):
        _print(apply_liger(trainer.model))
        choices["liger"] = replace(eager_liger, reason=f"{eager_liger.reason}; training eager")
    return replace(plan, choices=choices)


def _print(line: str) -> None:
    print(line, flush=True)  # stdout is training.log in a trainer process


def _probe_step(trainer: Any) -> None:
    """One forward and backward of the first training batch, leaving weights, gradients and RNG as they were."""
    batch = next(iter(trainer.get_train_dataloader()))
    inputs = trainer._prepare_inputs(batch)
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    # In training mode, as the steps run: graphs compiled for a loaded model's eval mode would compile again then.
    was_training = trainer.model.training
    trainer.model.train()
    with torch.random.fork_rng(devices=devices), trainer.accelerator.autocast():
        loss = trainer.compute_loss(trainer.model, inputs)
        loss.backward()
    trainer.model.train(was_training)
    trainer.model.zero_grad(set_to_none=True)
    trainer.discard_step_metrics()  # TRL averages per-batch figures into the next log; the probe is not a step
