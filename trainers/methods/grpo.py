"""GRPO and RLVR with TRL's GRPOTrainer; rewards come from executing each row's verifier, or (GRPO only) from a
trained reward model's score of each prompt and completion."""

from __future__ import annotations

import json
import math
from typing import Any

import torch
from bashgym.trainers.contracts.fields import method_args
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.environments.verifiers import reward_function
from bashgym.trainers.loading import load_reward_model, load_rows, lora_config
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer


def _row(row: dict[str, Any]) -> dict[str, Any]:
    """A row's reward source: its inline verifier, or the shipped terminal task its task_id names.

    The verifier travels as JSON text: an Arrow column of dicts is one struct over every row's keys, so rows whose
    `files` name different files each got every other row's names as None (and an invalid `files` map)."""
    verifier = row.get("verifier")
    if not isinstance(verifier, dict) or verifier.get("kind", "terminal_task") == "terminal_task":
        task_id = (verifier or {}).get("task_id") or row.get("task_id")
        verifier = {"kind": "terminal_task", "task_id": task_id}
    return {"prompt": row["prompt"], "verifier": json.dumps(verifier)}


# The method settings (trainers/settings.method_args) that are GRPOConfig's own arguments, by the same names.
GRPO_CONFIG_KEYS = (
    "num_generations",
    "temperature",
    "max_completion_length",
    "loss_type",
    "beta",
    "epsilon_high",
    "mask_truncated_completions",
    "cast_lm_head_to_fp32",
)


class FilteringGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer, with groups whose rewards did not vary taken out of the loss (filter_zero_std_groups),
    and `entropy` measured on the policy's tokens, not on the loss's mask.

    Such a group's advantages are all zero, so its policy term is zero; left in, its tokens still count in the
    loss's normaliser (dapo divides by every completion token of the batch), diluting the groups that do teach,
    and a KL term (beta > 0) would still pull on them. The filter goes into the loss mask only (TRL's `tool_mask`,
    which multiplies completion_mask in the loss): the completions stay visible to attention, so what the model
    computes for them is what it computes when sampling.

    TRL averages `entropy` over the loss mask: with every group filtered it logged 0.0 for a policy whose entropy
    was 6.88, and the kept groups' entropy otherwise. It is the mean over every completion token the model saw
    (completion_mask: all but the padding, and the truncated completions TRL masks), NaN (not logged) where there
    is none."""

    def __init__(self, *args: Any, filter_zero_std_groups: bool, group_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filter_zero_std_groups = filter_zero_std_groups
        self.group_size = group_size
        self._entropies: torch.Tensor | None = None

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        training = self.model is not None and self.model.training
        # The share of completions the loss never sees: mask_truncated_completions zeroes a truncated one's whole
        # completion_mask, where one that ended keeps its EOS at least. Truncated but not masked still trains.
        unseen = (output["completion_mask"].sum(dim=1) == 0).float()
        masked = self.accelerator.gather(unseen).mean().item()
        self._metrics["train" if training else "eval"]["completions/masked_truncated_ratio"].append(masked)
        if not (self.filter_zero_std_groups and training):
            return output
        completion_mask = output["completion_mask"]
        taught = taught_rows(output["advantages"], self.group_size).unsqueeze(1).to(completion_mask.dtype)
        output["tool_mask"] = output.get("tool_mask", torch.ones_like(completion_mask)) * taught
        output["num_items_in_batch"] = self.accelerator.gather((completion_mask * output["tool_mask"]).sum()).sum()
        return output

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        answer = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if kwargs.get("compute_entropy"):
            self._entropies = answer[1]
        return answer

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        self._entropies = None
        loss: torch.Tensor = super()._compute_loss(model, inputs)
        mode = "train" if self.model is not None and self.model.training else "eval"
        logged = self._metrics[mode]["entropy"]
        if self._entropies is not None and logged:
            seen = inputs["completion_mask"].to(self._entropies.dtype)
            local = torch.stack([(self._entropies.detach() * seen).sum(), seen.sum()])
            total, tokens = self.accelerator.reduce(local, reduction="sum").tolist()
            logged[-1] = total / tokens if tokens else math.nan
        return loss


def taught_rows(advantages: torch.Tensor, group_size: int) -> torch.Tensor:
    """1 for each completion whose group's rewards varied, 0 for a group whose advantages are all zero.

    Groups are consecutive runs of `group_size` rows (TRL's sampler repeats each prompt that many times); a slice
    that does not start on a group boundary is judged by the rows it holds."""
    rows = advantages.shape[0]
    padded = -(-rows // group_size) * group_size
    varied = torch.zeros(padded, dtype=torch.bool, device=advantages.device)
    varied[:rows] = advantages != 0
    keep = varied.view(-1, group_size).any(dim=1, keepdim=True).expand(-1, group_size).reshape(-1)[:rows]
    return keep.to(advantages.dtype)


def build(request: TrainingRequest, model: Any, tokenizer: Any, run: RunDirectory, args: dict[str, Any]) -> Any:
    settings = method_args(request)
    config = GRPOConfig(**args, **{key: settings[key] for key in GRPO_CONFIG_KEYS})
    rows = load_rows(request.dataset_path)
    if request.grpo_reward_source == "reward_model":
        scorer, scorer_tokenizer = load_reward_model(str(request.grpo_reward_model))
        dataset = Dataset.from_list([{"prompt": row["prompt"]} for row in rows])
        rewards: dict[str, Any] = {"reward_funcs": [scorer], "reward_processing_classes": [scorer_tokenizer]}
    else:
        dataset = Dataset.from_list([_row(row) for row in rows])
        rewards = {"reward_funcs": [reward_function]}
    return FilteringGRPOTrainer(
        model=model,
        **rewards,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(request),
        filter_zero_std_groups=settings["filter_zero_std_groups"],
        group_size=settings["num_generations"],
    )
