"""What each request field does: which methods read it, the named profiles, and the configuration a request
resolves to. Importable without torch.

`training plan` shows `effective_config(request)` before launch; the methods build their TRL configurations
from the same values (trainers/methods), and each run writes what its trainer actually ran with to
`effective_config.json`. A field a method does not read is refused when it is sent (`request_from_recipe`),
so nothing trains on a setting that silently did nothing.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bashgym.trainers.contracts.request import DIRECT_METHODS, InvalidRequest, TrainingRequest

GRPO_LIKE = frozenset({"grpo", "rlvr"})
REWARD_MODEL = frozenset({"reward_model"})
RETRIEVER = frozenset({"embedding_retriever"})
DISTILLATION = frozenset({"distillation"})
SESSION = frozenset({"session_distillation"})

# Fields one method (or a few) reads; every other field is read by every method.
READ_BY: dict[str, frozenset[str]] = {
    # Distillation and session distillation take the SFT fields too (../shared/RECIPES.md).
    "sft_backend": frozenset({"sft", "distillation", "session_distillation"}),
    "dpo_beta": frozenset({"dpo"}),
    "dpo_backend": frozenset({"dpo"}),
    # SFT, DPO and reward models evaluate while they train (eval.loss every save_steps); a reward model's held-out
    # pairs are also checked for leakage from its training pairs before it trains.
    "eval_dataset_path": frozenset({"sft", "dpo", "reward_model"}),
    # GRPO bounds what it generates instead (grpo_max_completion_length).
    "max_seq_length": frozenset(
        {"sft", "dpo", "distillation", "session_distillation", "reward_model", "embedding_retriever"}
    ),
    # A retriever is a small encoder: no 4-bit loading, and no Hub publication of a causal LM's artifacts.
    "load_in_4bit": frozenset({*DIRECT_METHODS, "reward_model"}),
    # Speed settings that only SFT's path applies (trainers/speed.py); "auto" is accepted everywhere.
    "compile": frozenset({"sft"}),
    "packing": frozenset({"sft"}),
    "liger": frozenset({"sft"}),
    **dict.fromkeys(
        (
            "training_profile",
            "grpo_backend",
            "grpo_loss_type",
            "grpo_reward_mode",
            "grpo_group_size",
            "grpo_num_generations",
            "grpo_temperature",
            "grpo_max_completion_length",
            "filter_zero_std_groups",
            "active_sampling",
            "token_level_loss",
            "lm_head_fp32",
            "grpo_reward_source",
            "grpo_reward_model",
        ),
        GRPO_LIKE,
    ),
    **dict.fromkeys(
        ("teacher_model", "teacher_temperature", "distillation_alpha", "distillation_max_completion_length"),
        DISTILLATION,
    ),
    **dict.fromkeys(
        (
            "session_distillation_alpha",
            "session_distillation_temperature",
            "session_distillation_min_confidence",
            "session_distillation_mask_policy",
            "session_distillation_context_mode",
            "session_distillation_reader",
        ),
        SESSION,
    ),
}
LORA_FIELDS = ("lora_rank", "lora_alpha", "lora_dropout")
# What only an on-policy teacher run reads: without teacher_model the run learns the recorded responses.
TEACHER_FIELDS = ("teacher_temperature", "distillation_alpha", "distillation_max_completion_length")
# Speed settings whose "auto" every method accepts (it resolves to "not applied" outside SFT).
AUTO_ANYWHERE = frozenset({"compile", "packing", "liger"})
# The methods the cloud:nemo-customizer lane runs (its admission refuses the others, naming these), and the fields
# it reads: the job it creates carries them (daemon/lanes/nemo.py job_hyperparameters; `training plan` shows them). NeMo
# Customizer runs its own trainer, so any other training field sent for one of these methods is refused.
NEMO_METHODS = ("sft", "dpo")
NEMO_READS = frozenset(
    {
        *("method", "base_model", "dataset_path", "eval_dataset_path", "compute_target", "nemo_dataset"),
        *("num_epochs", "max_steps", "batch_size", "learning_rate", "seed", "dpo_beta"),
        *("use_lora", "lora_rank", "lora_alpha", "lora_dropout"),
        *("tracking_context", "correlation_id", "hf_repo_owner"),
    }
)

# A profile is a named set of values; a field the request sets itself wins over its profile's value.
PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    # Terminal RL in the DAPO style: token-level loss, clip-higher, overlong completions masked out of the loss,
    # groups whose rewards do not vary filtered out, no KL term, sampling at temperature 1.
    "terminal_rl_tmax_like": {
        "grpo_loss_type": "dapo",
        "grpo_num_generations": 8,
        "grpo_temperature": 1.0,
        "grpo_max_completion_length": 1024,
        "filter_zero_std_groups": True,
        "epsilon_high": 0.28,
        "mask_truncated_completions": True,
        "beta": 0.0,
    },
}
# The profile values that are not request fields: they exist only as a profile sets them.
PROFILE_ONLY_DEFAULTS: dict[str, Any] = {"epsilon_high": None, "mask_truncated_completions": False, "beta": 0.0}
# The one implementation shipped: `auto` chooses it, `plain` asks for it by name.
BACKENDS = {"auto": "auto -> trl", "plain": "plain -> trl"}


@dataclass(frozen=True)
class Capabilities:
    """What the machines a run trains on can do, as far as known before launch (None: not known)."""

    cuda: bool | None = None
    bitsandbytes: bool | None = None
    peft: str | None = None  # the installed version; "" where it is not installed
    trackers: tuple[str, ...] | None = None  # the packages of report_to's trackers installed (mlflow, wandb, trackio)


# transformers.integrations.peft.MIN_PEFT_VERSION of transformers 5.24, which add_adapter (a retriever's LoRA) checks.
MIN_PEFT_FOR_ADAPTERS = "0.22.0"


def retriever_adapter_refusal(peft: str) -> str | None:
    """Why a retriever's LoRA would fail with peft `peft` installed ("" for none), or None where it would not."""
    from packaging.version import Version

    if peft and Version(peft) >= Version(MIN_PEFT_FOR_ADAPTERS):
        return None
    has = f"peft {peft}" if peft else "no peft"
    return (
        f"use_lora on an embedding retriever needs peft >= {MIN_PEFT_FOR_ADAPTERS} (transformers' adapter support), "
        f"and the trainer's environment has {has}. Train the full model (use_lora: false), or raise peft to "
        f"{MIN_PEFT_FOR_ADAPTERS} or later in constraints.txt."
    )


def unread_fields(request: TrainingRequest) -> list[str]:
    """A sentence for every field the request set that its method would not read."""
    problems = []
    for field in sorted(request.model_fields_set):
        readers = READ_BY.get(field)
        if readers is None or request.method in readers:
            continue
        if field in AUTO_ANYWHERE and getattr(request, field) == "auto":
            continue
        problems.append(
            f"`{field}` is read by {_names(readers)} only; method `{request.method}` would ignore it, so drop it."
        )
    if not request.use_lora:
        problems += [
            f"`{field}` shapes a LoRA adapter, and use_lora is false; drop it or set use_lora true."
            for field in LORA_FIELDS
            if field in request.model_fields_set
        ]
    if request.lane == "nemo" and request.method in NEMO_METHODS:
        problems += [
            f"`{field}` is not sent to NeMo Customizer, which runs its own trainer; drop it for "
            "`cloud:nemo-customizer` (training plan shows the job's hyperparameters), or train on `local`."
            for field in sorted(request.model_fields_set - NEMO_READS)
            if getattr(request, field) != "auto"  # "auto" leaves the choice to whoever trains
        ]
    problems += _overridden(request)
    if request.method == "distillation" and not request.teacher_model:
        problems += [
            f"`{field}` applies to distillation from a teacher_model; without one the run learns the recorded "
            "teacher_response by cross-entropy. Name the teacher_model or drop it."
            for field in TEACHER_FIELDS
            if field in request.model_fields_set
        ]
    return problems


# What the Hub upload reads, and only when auto_push_hf is true. The operator documents' storage block sends them at
# their defaults with auto_push_hf false; a value other than the default there would be ignored.
HUB_UPLOAD_FIELDS = ("hf_repo_name", "hf_private", "hf_upload_artifact")


def _overridden(request: TrainingRequest) -> list[str]:
    """A sentence for every field set to a value another field makes the trainer ignore."""
    problems = []
    if request.max_steps > 0 and "num_epochs" in request.model_fields_set and request.num_epochs != 1.0:
        problems.append(
            f"`num_epochs` {request.num_epochs:g} is ignored: max_steps {request.max_steps} overrides it (the trainer "
            "stops at max_steps when it is positive). Drop num_epochs, or set max_steps -1 to train by epochs."
        )
    if not request.auto_push_hf:
        fields = type(request).model_fields
        problems += [
            f"`{field}` is read only when auto_push_hf is true, so `{getattr(request, field)}` would be ignored; "
            "set auto_push_hf true to push to the Hub, or drop it."
            for field in HUB_UPLOAD_FIELDS
            if field in request.model_fields_set and getattr(request, field) != fields[field].default
        ]
    return problems


def check_sent(request: TrainingRequest) -> TrainingRequest:
    """Refuse a request as sent whose fields would not all be read (InvalidRequest names each one)."""
    problems = unread_fields(request)
    if problems:
        raise InvalidRequest(" ".join(problems))
    return request


def request_from_recipe(payload: dict[str, Any]) -> TrainingRequest:
    """A request as a user sent it, in the operator documents' shape (`use_remote_ssh` + `device_id` means
    `ssh:<device_id>`); a field its method would not read is refused (check_sent)."""
    data = dict(payload)
    if data.get("use_remote_ssh") and "compute_target" not in data:
        if not data.get("device_id"):
            raise InvalidRequest("use_remote_ssh is true but device_id is missing; name the device.")
        data["compute_target"] = f"ssh:{data['device_id']}"
    return check_sent(TrainingRequest.model_validate(data))


def grpo_values(request: TrainingRequest) -> dict[str, Any]:
    """GRPO/RLVR's settings after the profile: each explicit field wins over the profile's value."""
    profile = PROFILES[request.training_profile]
    values: dict[str, Any] = {}
    for name in (
        "grpo_loss_type",
        "grpo_num_generations",
        "grpo_temperature",
        "grpo_max_completion_length",
        "filter_zero_std_groups",
    ):
        explicit = name in request.model_fields_set
        values[name] = getattr(request, name) if explicit or name not in profile else profile[name]
    if "grpo_num_generations" not in request.model_fields_set and "grpo_group_size" in request.model_fields_set:
        values["grpo_num_generations"] = request.grpo_group_size  # the group is the generations of one prompt
    if "token_level_loss" in request.model_fields_set and "grpo_loss_type" not in request.model_fields_set:
        values["grpo_loss_type"] = "dapo" if request.token_level_loss else "grpo"
    for name, default in PROFILE_ONLY_DEFAULTS.items():
        values[name] = profile.get(name, default)
    return values


def refusals(request: TrainingRequest, machine: Capabilities) -> list[str]:
    """Every reason the trainer would refuse `request` on `machine`, found without loading any weights."""
    problems = []
    if request.load_in_4bit and machine.cuda is False:
        problems.append("load_in_4bit needs a CUDA GPU, and the lane has none; set load_in_4bit false.")
    elif request.load_in_4bit and machine.bitsandbytes is False:
        problems.append(
            "load_in_4bit needs the bitsandbytes package on the lane; install it or set load_in_4bit false."
        )
    if request.method in GRPO_LIKE:
        problems += _grpo_refusals(request)
    if request.method in RETRIEVER and request.use_lora and machine.peft is not None:
        problems += [p for p in [retriever_adapter_refusal(machine.peft)] if p]
    if machine.trackers is not None:
        problems += [
            f"report_to {tracker} needs the {tracker} package in the trainer's Python; install it there (pip install "
            f"{tracker}) or leave {tracker} out of report_to."
            for tracker in request.report_to
            if tracker not in machine.trackers
        ]
    return problems


def names_a_local_path(model: str) -> bool:
    """Whether a model name that is not an absolute path names something in the working directory, where the
    trainer starts (the daemon's own on `local`, the run's directory on a device): transformers loads such a name
    from disk before asking the Hub, so a hub id `org/name` there would read that directory instead."""
    return not model.startswith("/") and os.path.lexists(model)


def model_problems(request: TrainingRequest) -> list[str]:
    """A model named by path is a model directory on the machine that trains, and a hub id names no path there; a
    teacher shares the student's vocabulary (distillation compares their token distributions position by
    position). A hub id is checked where its config is already on this machine, and otherwise when the trainer
    loads it."""
    problems, configs = [], {}
    for field in ("base_model", "teacher_model"):
        value = getattr(request, field)
        if not value:
            continue
        if value.startswith("/"):
            config = Path(value) / "config.json"
            if not Path(value).is_dir():
                problems.append(
                    f"{field} {value} does not exist on the machine that would train; name a model directory there "
                    "or a hub id."
                )
            elif not config.is_file():
                problems.append(
                    f"{field} {value} holds no config.json, so it is not a model directory; name the directory "
                    "save_pretrained wrote."
                )
            else:
                configs[field] = _read_config(config)
        elif names_a_local_path(value):
            problems.append(
                f"{field} {value!r} is not an absolute path, yet it names something in the working directory of the "
                "machine that would train: transformers would load that instead of the hub's model. Name a hub id "
                "that is no path there, or the model directory by its absolute path."
            )
        elif (cached := _cached_config(value)) is not None:
            configs[field] = _read_config(cached)
    if request.method == "distillation" and len(configs) == 2:
        student, teacher = (configs[f].get("vocab_size") for f in ("base_model", "teacher_model"))
        if student != teacher:
            problems.append(
                f"teacher_model has a vocabulary of {teacher} tokens and base_model {student}; distillation compares "
                "their distributions token by token, so they need the same tokenizer. Pick a teacher of the "
                "student's family."
            )
    return problems


def _read_config(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _cached_config(model_id: str) -> Path | None:
    """A hub model's config.json where this machine already holds it; None otherwise."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model_id, "config.json")
    except ValueError:  # not a repository id huggingface_hub accepts
        return None
    return Path(found) if isinstance(found, str) else None


def _grpo_refusals(request: TrainingRequest) -> list[str]:
    problems = []
    fields = request.model_fields_set
    if {
        "grpo_group_size",
        "grpo_num_generations",
    } <= fields and request.grpo_group_size != request.grpo_num_generations:
        problems.append(
            f"grpo_group_size {request.grpo_group_size} and grpo_num_generations {request.grpo_num_generations} "
            "disagree; a group is the generations of one prompt, so send one of them."
        )
    if request.active_sampling:
        problems.append(
            "active_sampling (resampling groups until their rewards vary) needs a dynamic-sampling backend this "
            "installation does not ship; set active_sampling false (filter_zero_std_groups drops such groups instead)."
        )
    if request.grpo_reward_mode != "verification":
        problems.append(
            f"grpo_reward_mode `{request.grpo_reward_mode}` is not shipped: rewards come from each row's verifier "
            "(`verification`); send that."
        )
    generations = grpo_values(request)["grpo_num_generations"]
    per_generation = request.batch_size * request.num_processes * request.gradient_accumulation_steps
    if per_generation % generations:
        problems.append(
            f"Each generation round samples batch_size x num_processes x gradient_accumulation_steps = "
            f"{request.batch_size} x {request.num_processes} x {request.gradient_accumulation_steps} = "
            f"{per_generation} completions, which must be a multiple of grpo_num_generations ({generations}, whole "
            f"groups): raise gradient_accumulation_steps to {_whole_groups(request, generations)} "
            f"or use a group size that divides {per_generation}."
        )
    return problems


def _whole_groups(request: TrainingRequest, generations: int) -> int:
    """The smallest gradient_accumulation_steps, from the one sent up, that samples whole groups."""
    unit = generations // math.gcd(request.batch_size * request.num_processes, generations)
    return math.ceil(request.gradient_accumulation_steps / unit) * unit


def effective_config(request: TrainingRequest) -> dict[str, Any]:
    """The configuration `request` trains with, as `training plan` shows it and the methods build it.

    The speed settings resolve on the machine itself (`auto` by its GPU and the data); the plan shows what was
    asked, the run's `effective_config.json` and `speed` record what was used."""
    return {
        "method": request.method,
        "trainer": trainer_name(request),
        "model": {"base_model": request.base_model, "load_in_4bit": request.load_in_4bit},
        "data": {"dataset_path": request.dataset_path, "eval_dataset_path": request.eval_dataset_path},
        "schedule": shared_args(request),
        "method_settings": method_args(request),
        "adapter": lora_args(request),
        "speed_requested": {
            name: getattr(request, name)
            for name in (
                "gradient_checkpointing",
                "bf16",
                "fused_adamw",
                "dataloader_workers",
                "pin_memory",
                "find_unused_parameters",
                *(("compile", "packing", "liger") if request.method == "sft" else ()),
            )
        },
        "scale_out": {
            "num_processes": request.num_processes,
            "num_machines": request.num_machines,
            "distributed_strategy": request.distributed_strategy,
            "mixed_precision": request.mixed_precision,
        },
        "outputs": {
            "artifact_retention": request.artifact_retention,
            "auto_push_hf": request.auto_push_hf,
            "hf_repo_name": request.hf_repo_name,
            "hf_private": request.hf_private,
            "hf_upload_artifact": request.hf_upload_artifact,
        },
        "lane": {"compute_target": request.compute_target, "nemo_dataset": request.nemo_dataset},
    }


def shared_args(request: TrainingRequest) -> dict[str, Any]:
    """transformers TrainingArguments every method takes from the request (trainers/methods/common.py)."""
    return {
        "num_train_epochs": request.num_epochs,
        "max_steps": request.max_steps,
        "per_device_train_batch_size": request.batch_size,
        "gradient_accumulation_steps": request.gradient_accumulation_steps,
        "learning_rate": request.learning_rate,
        "warmup_steps": request.warmup_ratio,  # a float below 1 is a fraction of the run in transformers 5
        "lr_scheduler_type": request.lr_scheduler_type,
        "logging_steps": request.logging_steps,
        "save_steps": request.save_steps,
        "save_total_limit": request.checkpoint_limit,
        "seed": request.seed,
        "data_seed": request.seed,
    }


def lora_args(request: TrainingRequest) -> dict[str, Any] | None:
    """peft.LoraConfig's arguments, or None for full weights."""
    if not request.use_lora:
        return None
    return {
        "r": request.lora_rank,
        "lora_alpha": request.lora_alpha,
        "lora_dropout": request.lora_dropout,
        "target_modules": "all-linear",
        # A reward model's scalar head starts untrained, so it trains in full beside the adapter (peft's SEQ_CLS
        # task keeps the `score` module trainable and saved).
        "task_type": "SEQ_CLS" if request.method == "reward_model" else "CAUSAL_LM",
    }


def method_args(request: TrainingRequest) -> dict[str, Any]:
    """The method's own settings: its TRL config's arguments (or our trainer's) beyond the shared ones."""
    match request.method:
        case "sft":
            return {"backend": BACKENDS[request.sft_backend], "max_length": request.max_seq_length}
        case "dpo":
            return {
                "backend": BACKENDS[request.dpo_backend],
                "beta": request.dpo_beta,
                "max_length": request.max_seq_length,
            }
        case "grpo" | "rlvr":
            values = grpo_values(request)
            args = {
                "backend": BACKENDS[request.grpo_backend],
                "profile": request.training_profile,
                "reward": (
                    f"reward model {request.grpo_reward_model}: its scalar score of each prompt and completion"
                    if request.grpo_reward_source == "reward_model"
                    else "each row's verifier, 1.0 passed and 0.0 failed"
                ),
                "num_generations": values["grpo_num_generations"],
                "temperature": values["grpo_temperature"],
                "max_completion_length": values["grpo_max_completion_length"],
                "loss_type": values["grpo_loss_type"],
                "beta": values["beta"],
                "epsilon_high": values["epsilon_high"],
                "mask_truncated_completions": values["mask_truncated_completions"],
                "cast_lm_head_to_fp32": request.lm_head_fp32,
                "filter_zero_std_groups": values["filter_zero_std_groups"],
            }
            return args
        case "distillation":
            if not request.teacher_model:
                return {
                    "backend": BACKENDS[request.sft_backend],
                    "teacher_model": None,
                    "objective": "cross-entropy on each row's teacher_response",
                    "max_length": request.max_seq_length,
                }
            return {
                "backend": BACKENDS[request.sft_backend],
                "teacher_model": request.teacher_model,
                # Prompts are cut from the left to leave room for the completion within max_seq_length.
                "max_prompt_tokens": max(1, request.max_seq_length - request.distillation_max_completion_length),
                "temperature": request.teacher_temperature,
                # TRL's generalised Jensen-Shannon interpolation: 0 forward KL, 0.5 JSD, 1 reverse KL.
                "beta": request.distillation_alpha,
                "max_completion_length": request.distillation_max_completion_length,
            }
        case "session_distillation":
            return {
                "backend": f"{BACKENDS[request.sft_backend]} data handling, bashgym SessionDistillationTrainer loss",
                "max_length": request.max_seq_length,
                "alpha": request.session_distillation_alpha,
                "temperature": request.session_distillation_temperature,
                "min_confidence": request.session_distillation_min_confidence,
                "mask_policy": request.session_distillation_mask_policy,
                "teacher_context": request.session_distillation_context_mode,
                "reader": request.session_distillation_reader,  # whose reader_confidence the records carry
            }
        case "reward_model":
            return {
                "objective": "Bradley-Terry pairwise loss: -log sigmoid(r(chosen) - r(rejected))",
                "head": "one scalar (sequence classification, num_labels 1) over the base model",
                "max_length": request.max_seq_length,
            }
        case "embedding_retriever":
            return {
                "loss": "MultipleNegativesRankingLoss (in-batch negatives, plus each row's negative when given)",
                "batch_sampler": "no duplicates within a batch",
                "max_length": request.max_seq_length,
            }
    raise AssertionError(request.method)


def trainer_name(request: TrainingRequest) -> str:
    """The class that trains `request`, as plan shows it."""
    sft = "trl.SFTTrainer (bashgym DeviceMetricsSFTTrainer)"
    if request.method == "distillation":
        return "trl.DistillationTrainer" if request.teacher_model else sft
    return {
        "sft": sft,
        "dpo": "trl.DPOTrainer",
        "grpo": "trl.GRPOTrainer (bashgym FilteringGRPOTrainer)",
        "rlvr": "trl.GRPOTrainer (bashgym FilteringGRPOTrainer)",
        "session_distillation": "bashgym SessionDistillationTrainer (transformers.Trainer)",
        "reward_model": "trl.RewardTrainer",
        "embedding_retriever": "sentence_transformers.SentenceTransformerTrainer",
    }[request.method]


def _names(methods: frozenset[str]) -> str:
    ordered = sorted(methods)
    return ordered[0] if len(ordered) == 1 else f"{', '.join(ordered[:-1])} and {ordered[-1]}"
