"""The training request accepts the operator documents' recipes unchanged and refuses what it cannot run."""

from __future__ import annotations

import re
from typing import Any

import pytest
from bashgym.trainers.contracts.fields import request_from_recipe
from bashgym.trainers.contracts.request import TrainingRequest, merge_config_file, parse_compute_target
from pydantic import ValidationError

STORAGE = {
    "checkpoint_limit": 1,
    "artifact_retention": "adapter_only",
    "auto_push_hf": False,
    "hf_private": True,
    "hf_upload_artifact": "auto",
}
SFT_FIELDS = {
    "num_epochs": 1,
    "batch_size": 1,
    "gradient_accumulation_steps": 8,
    "learning_rate": 2e-5,
    "max_seq_length": 4096,
    "use_lora": True,
    "lora_rank": 16,
    "lora_alpha": 32,
    "load_in_4bit": False,
    "sft_backend": "auto",
}
RECIPES: dict[str, dict[str, Any]] = {
    "sft": {**SFT_FIELDS},
    "dpo": {
        "num_epochs": 1,
        "batch_size": 1,
        "gradient_accumulation_steps": 8,
        "learning_rate": 1e-5,
        "max_seq_length": 2048,
        "dpo_beta": 0.1,
        "dpo_backend": "auto",
        "use_lora": True,
        "load_in_4bit": False,
    },
    "grpo": {
        "training_profile": "terminal_rl_tmax_like",
        "grpo_backend": "auto",
        "grpo_loss_type": "dapo",
        "grpo_reward_mode": "verification",
        "grpo_group_size": 32,
        "grpo_num_generations": 32,
        "grpo_temperature": 0.7,
        "filter_zero_std_groups": True,
        "active_sampling": True,
        "token_level_loss": True,
        "lm_head_fp32": True,
    },
    "rlvr": {
        "training_profile": "default",
        "grpo_backend": "auto",
        "grpo_loss_type": "dapo",
        "grpo_reward_mode": "verification",
        "grpo_group_size": 32,
        "grpo_num_generations": 32,
        "grpo_temperature": 0.7,
        "filter_zero_std_groups": True,
    },
    "distillation": {
        "teacher_model": "org/teacher-8b",
        "teacher_temperature": 0.7,
        "distillation_alpha": 0.5,
        **SFT_FIELDS,
    },
    "session_distillation": {
        "session_distillation_alpha": 0.7,
        "session_distillation_temperature": 1.0,
        "session_distillation_min_confidence": 0.6,
        "session_distillation_mask_policy": "target_span_only",
        "session_distillation_context_mode": "hint_injected",
        "session_distillation_reader": "heuristic",
        **SFT_FIELDS,
    },
}


def recipe(strategy: str, **target: Any) -> dict[str, Any]:
    return {
        "strategy": strategy,
        "dataset_path": "data/train.jsonl",
        "base_model": "org/model-1b",
        **STORAGE,
        **RECIPES[strategy],
        **(target or {"compute_target": "local"}),
    }


@pytest.mark.parametrize("strategy", list(RECIPES))
def test_each_recipe_validates_with_only_ids_and_paths_substituted(strategy: str) -> None:
    request = request_from_recipe(recipe(strategy))
    assert request.method == strategy


def test_method_is_the_field_and_strategy_its_former_name_is_still_accepted() -> None:
    sent = {k: v for k, v in recipe("dpo").items() if k != "strategy"}
    assert request_from_recipe({**sent, "method": "dpo"}) == request_from_recipe({**sent, "strategy": "dpo"})
    assert "method" in request_from_recipe({**sent, "strategy": "dpo"}).model_dump()
    assert request_from_recipe({**sent, "method": "dpo", "strategy": "dpo"}).method == "dpo"
    with pytest.raises(ValueError, match=r"`strategy` .* is the former name of `method`"):
        request_from_recipe({**sent, "method": "sft", "strategy": "dpo"})
    with pytest.raises(ValueError, match="method `ppo` is unknown; use one of sft, dpo"):
        request_from_recipe({**sent, "strategy": "ppo"})


@pytest.mark.parametrize("strategy", list(RECIPES))
def test_each_recipe_accepts_the_remote_ssh_form(strategy: str) -> None:
    request = request_from_recipe(recipe(strategy, use_remote_ssh=True, device_id="gpu-box"))
    assert (request.lane, request.ssh_device) == ("ssh", "gpu-box")


def test_a_misspelt_field_is_refused_with_the_closest_name() -> None:
    payload = recipe("sft")
    payload["epochs"] = payload.pop("num_epochs")
    with pytest.raises(ValidationError, match=r"`epochs` is not a field; did you mean `num_epochs`\?"):
        request_from_recipe(payload)


@pytest.mark.parametrize(
    ("strategy", "instead"),
    [
        ("dppo", "Train on-policy with `grpo`"),
        ("cascade", "`kind: cascade`"),
        ("mopd", "`kind: cascade`"),
        ("echo", "bashgym eval run"),
        ("rwml", "bashgym eval run"),
        ("echo_rwml", "bashgym eval run"),
    ],
)
def test_methods_bashgym_does_not_train_are_refused_saying_what_to_do_instead(strategy: str, instead: str) -> None:
    with pytest.raises(ValidationError, match=f"method `{strategy}` is refused") as refused:
        TrainingRequest.model_validate({**recipe("sft"), "strategy": strategy})
    assert instead in str(refused.value)
    assert "surface" not in str(refused.value) and "separate" not in str(refused.value)


@pytest.mark.parametrize(
    ("sent", "method"),
    [
        ("reward_model", "reward_model"),
        ("reward-model", "reward_model"),
        ("rm", "reward_model"),
        ("embedding", "embedding_retriever"),
        ("retriever", "embedding_retriever"),
    ],
)
def test_the_workflows_are_methods_under_the_names_users_send(sent: str, method: str) -> None:
    sent_request = {"strategy": sent, "base_model": "org/model-1b", "dataset_path": "/data/train.jsonl"}
    request = TrainingRequest.model_validate(sent_request)
    assert request.method == method
    if method == "embedding_retriever":
        assert request.batch_size == 16  # in-batch negatives need a batch; 1 is refused when sent
        with pytest.raises(ValidationError, match="set batch_size 2 or more"):
            TrainingRequest.model_validate({**sent_request, "batch_size": 1})


def test_grpo_rewarded_by_a_reward_model_names_it_trains_locally_and_rlvr_refuses_it() -> None:
    fields = {"grpo_reward_source": "reward_model", "grpo_reward_model": "mv-reward"}
    request = request_from_recipe(recipe("grpo", **fields))
    assert request.grpo_reward_model == "mv-reward"
    with pytest.raises(ValidationError, match="needs grpo_reward_model"):
        request_from_recipe(recipe("grpo", grpo_reward_source="reward_model"))
    with pytest.raises(ValidationError, match="rlvr rewards come from a deterministic verifier"):
        request_from_recipe(recipe("rlvr", **fields))
    with pytest.raises(ValidationError, match="trains on `local`"):
        request_from_recipe(recipe("grpo", **fields, compute_target="ssh:gpu1"))
    with pytest.raises(ValidationError, match="grpo_reward_model is read only with grpo_reward_source"):
        request_from_recipe(recipe("grpo", grpo_reward_model="mv-reward"))


@pytest.mark.parametrize(
    "target", ["cloud", "hf-jobs", "managed:openai", "skypilot", "skypilot:aws", "dstack", "kubernetes:x"]
)
def test_targets_that_are_not_lanes_are_refused(target: str) -> None:
    with pytest.raises(ValidationError, match=r"refused|not a lane"):
        TrainingRequest.model_validate({**recipe("sft"), "compute_target": target})


def test_ssh_fields_must_agree() -> None:
    with pytest.raises(ValidationError, match="must agree"):
        TrainingRequest.model_validate({**recipe("sft"), "compute_target": "ssh:a", "device_id": "b"})
    with pytest.raises(ValidationError, match="use_remote_ssh is false"):
        TrainingRequest.model_validate({**recipe("sft"), "compute_target": "ssh:a", "use_remote_ssh": False})
    with pytest.raises(ValidationError, match="a device belongs only"):
        TrainingRequest.model_validate({**recipe("sft"), "device_id": "a"})
    assert parse_compute_target("cloud:nemo-customizer") == ("nemo", None)


def test_hub_push_needs_a_repository_name() -> None:
    with pytest.raises(ValidationError, match="never invents"):
        TrainingRequest.model_validate({**recipe("sft"), "auto_push_hf": True})


def test_a_config_file_may_not_set_what_the_command_line_owns() -> None:
    with pytest.raises(ValueError, match="base_model"):
        merge_config_file({"base_model": "x", "learning_rate": 1e-4})
    with pytest.raises(ValueError, match="did you mean `learning_rate`"):
        merge_config_file({"learning_rte": 1e-4})
    assert merge_config_file({"dpo_beta": 0.2}) == {"dpo_beta": 0.2}


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("cloud:hf-jobs", "Hugging Face Jobs run through their own surface"),
        ("cloud:skypilot", "bashgym compute plan --engine skypilot"),
        ("cloud:managed:openai", "Managed provider fine-tunes"),
        ("cloud:nemo", "did you mean `cloud:nemo-customizer`"),
        ("cloud", "Bare `cloud` names no lane"),
        ("cloud:somewhere", "is not a lane"),
    ],
)
def test_a_refused_cloud_target_is_refused_for_the_lane_it_names(target: str, says: str) -> None:
    """`cloud:hf-jobs` and `cloud:nemo` were told "Bare `cloud` names no lane"."""
    with pytest.raises(ValidationError, match=re.escape(says)):
        TrainingRequest.model_validate({**recipe("sft"), "compute_target": target})


@pytest.mark.parametrize(
    "overrides, names",
    [
        ({"num_epochs": 3, "max_steps": 100}, "`num_epochs` 3 is ignored: max_steps 100 overrides it"),
        ({"hf_repo_name": "acme/run"}, "`hf_repo_name` is read only when auto_push_hf is true"),
        ({"hf_private": False}, "`hf_private` is read only when auto_push_hf is true"),
        ({"hf_upload_artifact": "merged"}, "`hf_upload_artifact` is read only when auto_push_hf is true"),
    ],
)
def test_a_field_another_field_makes_the_trainer_ignore_is_refused(overrides: dict[str, Any], names: str) -> None:
    with pytest.raises(ValueError, match=re.escape(names)):
        request_from_recipe({**recipe("sft"), **overrides})


def test_the_storage_block_at_its_defaults_and_one_epoch_beside_max_steps_are_accepted() -> None:
    request = request_from_recipe({**recipe("sft"), "max_steps": 100})  # the recipe's num_epochs 1 and storage block
    assert (request.max_steps, request.auto_push_hf, request.hf_private) == (100, False, True)
