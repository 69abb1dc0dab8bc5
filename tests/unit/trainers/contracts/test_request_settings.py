"""Every request field changes what its strategy trains with, or is refused when sent: no setting is silent.

The walk below covers every field of TrainingRequest, so the next field added fails it until it is read by a
trainer (and shown in the effective configuration) or refused."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
import torch
from bashgym.trainers.contracts.fields import (
    Capabilities,
    effective_config,
    model_problems,
    refusals,
    request_from_recipe,
)
from bashgym.trainers.contracts.request import METHODS, InvalidRequest, TrainingRequest
from bashgym.trainers.methods.grpo import taught_rows
from pydantic import ValidationError

# Who and where, not how: recorded on the run (its identity), never configuring a trainer.
IDENTITY = {"tracking_context", "correlation_id", "hf_repo_owner"}
# Other spellings of compute_target `ssh:<device_id>` (../shared/RECIPES.md); see test_training_request.py here.
SPELLINGS = {"device_id", "use_remote_ssh"}
# Values a walk cannot derive from the field's type (a path, an id, a target that must name a lane).
ALTERNATIVES: dict[str, Any] = {
    "base_model": "org/other-model",
    "dataset_path": "/data/other.jsonl",
    "eval_dataset_path": "/data/eval.jsonl",
    "teacher_model": "org/teacher-2",
    "hf_repo_name": "team/model",
    "compute_target": "ssh:gpu1",
    "nemo_dataset": "default/rows",
    "dataloader_workers": 2,
    "mixed_precision": "fp16",
    "grpo_reward_model": "mv-reward",
}
# The retriever's defaults where they are not the field's (trainers/contracts/request.py).
RETRIEVER_DEFAULTS: dict[str, Any] = {"use_lora": False, "batch_size": 16}
# What a field needs beside it to be valid at all.
COMPANIONS: dict[str, dict[str, Any]] = {
    "num_machines": {"compute_target": "ssh-group:pair", "num_processes": 2},
    "nemo_dataset": {"compute_target": "cloud:nemo-customizer"},
    "auto_push_hf": {"hf_repo_name": "team/model"},
    "grpo_reward_source": {"grpo_reward_model": "mv-reward"},
    "grpo_reward_model": {"grpo_reward_source": "reward_model"},
}


def base(strategy: str, **fields: Any) -> dict[str, Any]:
    return {"strategy": strategy, "base_model": "org/model", "dataset_path": "/data/train.jsonl", **fields}


def alternative(name: str, default: Any) -> Any:
    """A valid value other than the default, from the field's type; the default itself for a single-valued
    choice (the one implementation shipped)."""
    if name in ALTERNATIVES:
        return ALTERNATIVES[name]
    if isinstance(default, bool):
        return not default
    annotation = TrainingRequest.model_fields[name].annotation
    options = [a for arg in typing.get_args(annotation) or (annotation,) for a in typing.get_args(arg) or (arg,)]
    literals = [o for o in options if isinstance(o, str)]
    if any(o != default for o in literals):
        return next(o for o in literals if o != default)
    if default == "auto":  # "auto", true or false
        return True
    if literals:
        return default
    if isinstance(default, int):
        return default + 1 if default >= 1 else 2
    if isinstance(default, float):
        return default / 2 if default else 0.25
    raise AssertionError(f"no alternative value for {name} (default {default!r}): add one to ALTERNATIVES")


@pytest.mark.parametrize("strategy", METHODS)
@pytest.mark.parametrize("name", sorted(set(TrainingRequest.model_fields) - IDENTITY - SPELLINGS - {"method"}))
def test_every_field_either_changes_the_effective_config_or_is_refused(strategy: str, name: str) -> None:
    companions = {
        **({"teacher_model": "org/teacher"} if strategy == "distillation" else {}),
        **COMPANIONS.get(name, {}),
    }
    default = TrainingRequest.model_fields[name].default
    if strategy == "embedding_retriever" and name in RETRIEVER_DEFAULTS:  # the workflow's own defaults
        default = RETRIEVER_DEFAULTS[name]
    value = alternative(name, default)
    try:
        sent = request_from_recipe(base(strategy, **{**companions, name: value}))
    except (InvalidRequest, ValidationError) as exc:
        # Refused for the field, or for a companion it needs (a lane the method does not train on).
        named = [name, *companions]
        assert any(n in str(exc) for n in named), f"{name}: refused without naming it: {exc}"
        return
    refused = " ".join(refusals(sent, Capabilities()))
    if name in refused:
        return  # refused at plan and launch, before anything is queued
    shown = effective_config(sent)
    if value == default:  # a single-valued choice: the plan names it
        assert json.dumps(value) in json.dumps(shown), f"{name}={value!r} is not shown for {strategy}"
        return
    try:
        without = request_from_recipe(base(strategy, **companions))
    except (InvalidRequest, ValidationError):  # a pair of fields (reward source and model): neither stands alone
        without = request_from_recipe(
            base(strategy, **({"teacher_model": "org/teacher"} if strategy == "distillation" else {}))
        )
    assert shown != effective_config(without), f"{name}={value!r} changes nothing for {strategy}"


def test_a_setting_of_another_method_is_refused_naming_who_reads_it() -> None:
    with pytest.raises(InvalidRequest, match="`grpo_temperature` is read by grpo and rlvr only; method `sft`"):
        request_from_recipe(base("sft", grpo_temperature=0.9))
    with pytest.raises(InvalidRequest, match="`lora_rank` shapes a LoRA adapter, and use_lora is false"):
        request_from_recipe(base("sft", use_lora=False, lora_rank=8))
    with pytest.raises(InvalidRequest, match="`distillation_alpha` applies to distillation from a teacher_model"):
        request_from_recipe(base("distillation", distillation_alpha=0.3))
    with pytest.raises(InvalidRequest, match="`eval_dataset_path` is read by dpo, reward_model and sft only"):
        request_from_recipe(base("grpo", eval_dataset_path="/data/eval.jsonl"))
    # "auto" speed settings are accepted everywhere; a forced one only where it applies.
    request_from_recipe(base("dpo", compile="auto"))
    with pytest.raises(InvalidRequest, match="`compile` is read by sft only"):
        request_from_recipe(base("dpo", compile=True))


def test_the_tmax_like_profile_is_applied_and_a_field_sent_wins_over_it() -> None:
    method = effective_config(request_from_recipe(base("grpo", training_profile="terminal_rl_tmax_like")))
    assert method["method_settings"] | {} == method["method_settings"]
    got = method["method_settings"]
    assert (got["num_generations"], got["temperature"], got["epsilon_high"], got["mask_truncated_completions"]) == (
        8,
        1.0,
        0.28,
        True,
    )
    sent = request_from_recipe(
        base("grpo", training_profile="terminal_rl_tmax_like", grpo_temperature=0.7, grpo_group_size=4)
    )
    got = effective_config(sent)["method_settings"]
    assert (got["temperature"], got["num_generations"], got["epsilon_high"]) == (0.7, 4, 0.28)
    default = effective_config(request_from_recipe(base("grpo")))["method_settings"]
    assert (default["num_generations"], default["epsilon_high"], default["mask_truncated_completions"]) == (
        32,
        None,
        False,
    )


def test_group_size_token_level_loss_and_distillation_mix_map_onto_trl() -> None:
    assert (
        effective_config(request_from_recipe(base("rlvr", grpo_group_size=4)))["method_settings"]["num_generations"]
        == 4
    )
    sequence = effective_config(request_from_recipe(base("grpo", token_level_loss=False)))["method_settings"]
    assert sequence["loss_type"] == "grpo"
    teacher = effective_config(
        request_from_recipe(base("distillation", teacher_model="org/t", distillation_alpha=0.2, max_seq_length=64))
    )["method_settings"]
    assert (teacher["beta"], teacher["max_completion_length"], teacher["max_prompt_tokens"]) == (0.2, 256, 1)


def test_refusals_found_before_launch() -> None:
    recipe = request_from_recipe(
        base("grpo", grpo_group_size=32, grpo_num_generations=32, gradient_accumulation_steps=8)
    )
    (found,) = refusals(recipe, Capabilities())
    assert "1 x 1 x 8 = 8 completions, which must be a multiple of grpo_num_generations (32" in found
    assert "raise gradient_accumulation_steps to 32" in found
    scaled = request_from_recipe(base("grpo", grpo_num_generations=4, gradient_accumulation_steps=2, num_processes=2))
    assert refusals(scaled, Capabilities()) == []
    four_bit = request_from_recipe(base("sft", load_in_4bit=True))
    assert refusals(four_bit, Capabilities(cuda=False)) == [
        "load_in_4bit needs a CUDA GPU, and the lane has none; set load_in_4bit false."
    ]
    assert refusals(four_bit, Capabilities()) == []  # not known before launch: the trainer checks it
    several = request_from_recipe(
        base("grpo", active_sampling=True, grpo_reward_mode="execution", grpo_group_size=4, grpo_num_generations=8)
    )
    found = " ".join(refusals(several, Capabilities()))
    assert "active_sampling" in found and "grpo_reward_mode `execution` is not shipped" in found
    assert "grpo_group_size 4 and grpo_num_generations 8 disagree" in found


def test_the_trainer_sees_which_fields_were_sent(tmp_path: Path) -> None:
    """The daemon writes request.json with the fields sent only; a profile then still gives way to exactly them."""
    sent = request_from_recipe(base("grpo", training_profile="terminal_rl_tmax_like", grpo_temperature=0.5))
    stored = TrainingRequest.model_validate_json(sent.model_dump_json(exclude_unset=True))
    assert effective_config(stored) == effective_config(sent)


def test_models_are_checked_where_they_are_named(tmp_path: Path) -> None:
    student, teacher, empty = tmp_path / "student", tmp_path / "teacher", tmp_path / "empty"
    for path, vocab in ((student, 512), (teacher, 1024)):
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    empty.mkdir()
    missing = request_from_recipe(base("sft", base_model=str(tmp_path / "nowhere")))
    assert model_problems(missing) == [
        f"base_model {tmp_path / 'nowhere'} does not exist on the machine that would train; name a model "
        "directory there or a hub id."
    ]
    assert "holds no config.json" in model_problems(request_from_recipe(base("sft", base_model=str(empty))))[0]
    mixed = request_from_recipe(base("distillation", base_model=str(student), teacher_model=str(teacher)))
    assert model_problems(mixed) == [
        "teacher_model has a vocabulary of 1024 tokens and base_model 512; distillation compares their "
        "distributions token by token, so they need the same tokenizer. Pick a teacher of the student's family."
    ]
    assert model_problems(request_from_recipe(base("sft", base_model=str(student)))) == []


def test_a_hub_id_that_names_a_path_where_the_trainer_starts_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme" / "shadow").mkdir(parents=True)  # transformers would load it before asking the Hub
    monkeypatch.chdir(tmp_path)
    shadowed = request_from_recipe(base("distillation", base_model="acme/shadow", teacher_model="acme/shadow"))
    assert [p.split(" is not")[0] for p in model_problems(shadowed)] == [
        "base_model 'acme/shadow'",
        "teacher_model 'acme/shadow'",
    ]
    assert model_problems(request_from_recipe(base("sft", base_model="acme/elsewhere"))) == []


def test_groups_whose_rewards_did_not_vary_leave_the_loss() -> None:
    advantages = torch.tensor([0.0, 0.0, 0.7, -0.7, 0.0, 0.0, 0.0, 0.0, 1.2, -1.2])
    assert taught_rows(advantages, 2).tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    # A process's slice may end inside a group: the rows it holds are judged together.
    assert taught_rows(advantages[:3], 2).tolist() == [0, 0, 1]
