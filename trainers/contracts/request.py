"""The training request: the one model every launch surface validates, importable without torch.

Field names are those of the operator documents (see ../shared/RECIPES.md); an unknown field is
refused with the closest valid name, so a typo never trains with defaults.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Method = Literal[
    "sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation", "reward_model", "embedding_retriever"
]  # fmt: skip
# The six methods that train the policy itself (a causal LM), judged on the terminal-task suite.
DIRECT_METHODS: tuple[str, ...] = ("sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation")
# Workflows that train something next to the policy, each with evidence of its own (daemon/evidence/promotion.py):
# a reward model (a scalar head over a causal LM, TRL's RewardTrainer) and an embedding retriever
# (sentence-transformers), the latter only in a project whose profile is `embedding_retrieval`.
WORKFLOW_METHODS: tuple[str, ...] = ("reward_model", "embedding_retriever")
METHODS: tuple[str, ...] = (*DIRECT_METHODS, *WORKFLOW_METHODS)
# A retriever's batch when the request leaves it out: each query is contrasted with the batch's other positives.
RETRIEVER_BATCH_SIZE = 16
# The names users already send for the workflows; a request is stored under the canonical name.
METHOD_ALIASES: dict[str, str] = {
    "reward-model": "reward_model",
    "rm": "reward_model",
    "reward": "reward_model",
    "embedding": "embedding_retriever",
    "embedding-retriever": "embedding_retriever",
    "retriever": "embedding_retriever",
}

# Methods BashGym knows of but does not train, and what to do instead.
REFUSED_METHODS: dict[str, str] = {
    "dppo": "BashGym does not train DPPO replay. Train on-policy with `grpo`, or replay stored pairs offline with "
    "`dpo`; a DPPO run trained elsewhere can be recorded with its metrics through `POST /v1/runs`.",
    "cascade": "A cascade is a sequence of runs, not one: declare its stages (for example sft, then dpo, then grpo) in "
    "a campaign spec with `kind: cascade` and start it with `bashgym campaign create`.",
    "mopd": "BashGym does not train multi-objective (MOPD) cascades beyond declared stages. Declare the stages as a "
    "`kind: cascade` campaign (bashgym campaign create), each stage a method of its own.",
    "echo": "BashGym does not compute ECHO/RWML diagnostics. Judge a policy with `bashgym eval run` (pass@k, holdout, "
    "canaries, unsafe actions) and its reward signal with the GRPO run's reward diagnostics (bashgym training "
    "metrics).",
    "rwml": "BashGym does not compute ECHO/RWML diagnostics. Judge a policy with `bashgym eval run` (pass@k, holdout, "
    "canaries, unsafe actions) and its reward signal with the GRPO run's reward diagnostics (bashgym training "
    "metrics).",
}
REFUSED_METHODS["echo_rwml"] = REFUSED_METHODS["echo"]

REFUSED_TARGETS: dict[str, str] = {
    "cloud": "Bare `cloud` names no lane; use `cloud:nemo-customizer`, `ssh:<device_id>`, `ssh-group:<group_id>` or "
    "`local`.",
    "hf-jobs": "Hugging Face Jobs run through their own surface and keep their job identity: use `bashgym jobs hf "
    "submit` (POST /v1/jobs/hf).",
    "managed": "Managed provider fine-tunes run through their own surface: use `bashgym jobs provider submit` "
    "(POST /v1/jobs/providers/NAME).",
    "skypilot": "SkyPilot runs from a plan: `bashgym compute plan --engine skypilot` renders (and with --launch "
    "submits) it.",
    "dstack": "dstack runs from a plan: `bashgym compute plan --engine dstack` renders (and with --launch submits) it.",
}

_DEVICE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Lanes that name a registered thing: the target's prefix, its lane, and what to send when the name is malformed.
_NAMED_LANES = (
    ("ssh:", "ssh", "a device; use ssh:<device_id> with a registered id (bashgym device list)"),
    (
        "ssh-group:",
        "ssh-group",
        "a device group; use ssh-group:<group_id> with a registered group (bashgym device group list)",
    ),
    ("slurm:", "slurm", "a cluster; use slurm:<cluster_id> with a registered id (bashgym cluster list)"),
)
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
# A speed setting: "auto" lets the trainer decide from the machine and the data; true or false forces it.
Toggle = Literal["auto"] | bool
SPEED_FIELDS: tuple[str, ...] = (
    "compile",
    "packing",
    "liger",
    "bf16",
    "fused_adamw",
    "gradient_checkpointing",
    "dataloader_workers",
    "pin_memory",
    "find_unused_parameters",
)
# Scale-out (issue 14): the strategies `accelerate launch` runs; DeepSpeed's only where the package is installed.
DistributedStrategy = Literal["ddp", "fsdp", "deepspeed-zero2", "deepspeed-zero3"]
MixedPrecision = Literal["auto", "no", "bf16", "fp16"]
# The team's own trackers a launched run may report to as well (transformers' report_to), each as the operator
# configured it in the daemon's settings (daemon/launch/trackers.py); BashGym's ledger records the run regardless.
Tracker = Literal["mlflow", "wandb", "trackio"]
TRACKERS: tuple[str, ...] = ("mlflow", "wandb", "trackio")


class InvalidRequest(ValueError):
    """A request that cannot be trained as sent; the message says what to send instead."""


def closest_field(name: str, fields: list[str]) -> str | None:
    matches = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
    if matches:
        return matches[0]
    # "epochs" is far from "num_epochs" by ratio but is its suffix; accept such containment.
    contained = [f for f in fields if f.endswith(name) or name.endswith(f)]
    return min(contained, key=len) if contained else None


def parse_compute_target(target: str) -> tuple[str, str | None]:
    """Split a compute target into (lane, device id); raise InvalidRequest for anything not a real lane."""
    if target == "local":
        return "local", None
    if target == "cloud:nemo-customizer":
        return "nemo", None
    for prefix, lane, names in _NAMED_LANES:
        if target.startswith(prefix):
            name = target[len(prefix) :]
            if not _DEVICE_ID.match(name):
                raise InvalidRequest(f"`{target}` does not name {names}.")
            return lane, name
    head, _, rest = target.lower().partition(":")
    if head == "cloud" and rest:
        # `cloud:<name>` names the lane it means: say that lane's refusal, not bare cloud's.
        if rest.startswith("nemo"):
            raise InvalidRequest(f"compute_target `{target}` is not a lane; did you mean `cloud:nemo-customizer`?")
        head = rest.split(":", 1)[0]
    for prefix, reason in REFUSED_TARGETS.items():
        if head == prefix or head.startswith(prefix):
            raise InvalidRequest(f"compute_target `{target}` is refused. {reason}")
    raise InvalidRequest(
        f"compute_target `{target}` is not a lane; use `local`, `ssh:<device_id>`, `ssh-group:<group_id>`, "
        "`slurm:<cluster_id>` or `cloud:nemo-customizer`."
    )


class TrainingRequest(BaseModel):
    """One training launch, exactly as the operator documents spell it."""

    # allow_inf_nan=False: NaN passes no range check's comparison, so `learning_rate: NaN` would otherwise be
    # refused as "less than or equal to 1" instead of as what it is.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    method: Method  # sent as `strategy` too, its former name (_explain_unknown_and_refused)
    base_model: Annotated[str, Field(min_length=1, max_length=500)]
    dataset_path: Annotated[str, Field(min_length=1, max_length=4000)]
    eval_dataset_path: str | None = None
    num_epochs: Annotated[float, Field(gt=0, le=1000)] = 1.0
    max_steps: Annotated[int, Field(ge=-1)] = -1
    batch_size: Annotated[int, Field(ge=1, le=4096)] = 1
    gradient_accumulation_steps: Annotated[int, Field(ge=1, le=4096)] = 8
    learning_rate: Annotated[float, Field(gt=0, le=1.0)] = 2e-5
    warmup_ratio: Probability = 0.0
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "linear"
    # Speed (issue 13): "auto" resolves per machine and run (bashgym.trainers.speed); the run records what
    # was asked and what was used. null is read as "auto" (it used to mean the trainer's default).
    gradient_checkpointing: Toggle = "auto"
    compile: Toggle = "auto"
    packing: Toggle = "auto"
    liger: Toggle = "auto"
    bf16: Toggle = "auto"
    fused_adamw: Toggle = "auto"
    dataloader_workers: Annotated[int, Field(ge=0, le=64)] | Literal["auto"] = "auto"
    pin_memory: Toggle = "auto"
    # DDP's search for weights a step did not reach (a scaled-out run only).
    find_unused_parameters: Toggle = "auto"
    # Scale-out (issue 14), in accelerate's terms: num_processes counts every process over all machines.
    # One process on one machine with ddp is the plain path; anything else runs through `accelerate launch`.
    num_processes: Annotated[int, Field(ge=1, le=4096)] = 1
    num_machines: Annotated[int, Field(ge=1, le=64)] = 1
    distributed_strategy: DistributedStrategy = "ddp"
    # "auto" follows the bf16 speed setting; "no", "bf16" and "fp16" fix it for every rank.
    mixed_precision: MixedPrecision = "auto"
    max_seq_length: Annotated[int, Field(ge=8, le=1_048_576)] = 4096
    save_steps: Annotated[int, Field(ge=1)] = 500
    logging_steps: Annotated[int, Field(ge=1)] = 1
    seed: int = 42
    use_lora: bool = True
    lora_rank: Annotated[int, Field(ge=1, le=1024)] = 16
    lora_alpha: Annotated[int, Field(ge=1, le=4096)] = 32
    lora_dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    load_in_4bit: bool = False
    sft_backend: Literal["auto", "plain"] = "auto"
    # DPO
    dpo_beta: Annotated[float, Field(gt=0, le=100)] = 0.1
    dpo_backend: Literal["auto", "plain"] = "auto"
    # GRPO / RLVR
    training_profile: Literal["default", "terminal_rl_tmax_like"] = "default"
    grpo_backend: Literal["auto", "plain"] = "auto"
    grpo_loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = "dapo"
    grpo_reward_mode: Literal["verification", "execution"] = "verification"
    grpo_group_size: Annotated[int, Field(ge=2, le=1024)] = 32
    grpo_num_generations: Annotated[int, Field(ge=2, le=1024)] = 32
    grpo_temperature: Annotated[float, Field(gt=0, le=5)] = 0.7
    grpo_max_completion_length: Annotated[int, Field(ge=1, le=65536)] = 256
    filter_zero_std_groups: bool = True
    active_sampling: bool = False
    token_level_loss: bool = True
    lm_head_fp32: bool = False
    # Where GRPO's rewards come from: `verifier` runs each row's verifier; `reward_model` scores each completion with
    # a trained reward model (grpo_reward_model: a model version of kind reward_model in the run's project, which
    # the daemon resolves to its directory). rlvr's rewards are verifiable by definition, so it takes verifier only.
    grpo_reward_source: Literal["verifier", "reward_model"] = "verifier"
    grpo_reward_model: Annotated[str, Field(min_length=1, max_length=4000)] | None = None
    # Teacher distillation
    teacher_model: str | None = None
    teacher_temperature: Annotated[float, Field(gt=0, le=10)] = 0.7
    distillation_alpha: Probability = 0.5
    distillation_max_completion_length: Annotated[int, Field(ge=1, le=65536)] = 256
    # Session distillation
    session_distillation_alpha: Probability = 0.7
    session_distillation_temperature: Annotated[float, Field(gt=0, le=10)] = 1.0
    session_distillation_min_confidence: Probability = 0.6
    session_distillation_mask_policy: Literal["target_span_only"] = "target_span_only"
    session_distillation_context_mode: Literal["hint_injected"] = "hint_injected"
    session_distillation_reader: Literal["heuristic"] = "heuristic"
    # Storage and publication
    checkpoint_limit: Annotated[int, Field(ge=1, le=20)] = 1
    artifact_retention: Literal["adapter_only", "adapter_checkpoint", "deployable", "full_run"] = "adapter_only"
    auto_push_hf: bool = False
    hf_repo_name: (
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")] | None
    ) = None
    hf_private: bool = True
    hf_upload_artifact: Literal["auto", "adapter", "merged"] = "auto"
    # Set by the daemon at launch, never by a request: `<workspace>/<project>` the run is recorded under. The
    # trainer pushes only into a repository it created for that project (trainers/hub.py).
    hf_repo_owner: Annotated[str, Field(max_length=400)] | None = None
    # Where and for whom
    compute_target: str = "local"
    device_id: str | None = None
    nemo_dataset: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")] | None = None
    use_remote_ssh: bool = False
    tracking_context: dict[str, Any] | None = None
    report_to: Annotated[
        list[Tracker], Field(max_length=len(TRACKERS)), AfterValidator(lambda named: list(dict.fromkeys(named)))
    ] = Field(default_factory=list)
    correlation_id: Annotated[str, Field(max_length=200)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _explain_unknown_and_refused(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = with_method(data)
        unknown = unknown_fields(data, list(cls.model_fields))
        if unknown:  # every unknown field at once, not one per round trip
            raise InvalidRequest(" ".join(unknown))
        if data.get("gradient_checkpointing", "auto") is None:
            # Requests stored before the speed fields said null for "the trainer's default"; auto replaces it.
            data = {**data, "gradient_checkpointing": "auto"}
        method = str(data.get("method", "")).lower()
        if method in METHOD_ALIASES:
            data = {**data, "method": METHOD_ALIASES[method]}
            method = METHOD_ALIASES[method]
        if method == "embedding_retriever":
            # In-batch negatives need company: the default batch of 1 would refuse every request that left it out.
            # A small encoder trains in full unless LoRA is asked for (it needs a newer peft: methods/retriever.py).
            data = {"batch_size": RETRIEVER_BATCH_SIZE, "use_lora": False, **data}
        if method in REFUSED_METHODS:
            raise InvalidRequest(f"method `{method}` is refused. {REFUSED_METHODS[method]}")
        if method and method not in METHODS:
            raise InvalidRequest(f"method `{method}` is unknown; use one of {', '.join(METHODS)}.")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TrainingRequest:
        lane, device = parse_compute_target(self.compute_target)
        if lane == "ssh":
            if self.device_id is not None and self.device_id != device:
                raise InvalidRequest(
                    f"compute_target names device `{device}` but device_id is `{self.device_id}`; they must agree."
                )
            if "use_remote_ssh" in self.model_fields_set and not self.use_remote_ssh:
                raise InvalidRequest(
                    f"compute_target `{self.compute_target}` runs over SSH, but use_remote_ssh is "
                    "false; drop use_remote_ssh or set it true."
                )
            # Normalised, so the request as stored (request.json) validates again as it was accepted.
            object.__setattr__(self, "use_remote_ssh", True)
            object.__setattr__(self, "device_id", device)
        elif self.use_remote_ssh:
            raise InvalidRequest(
                f"use_remote_ssh is true but compute_target is `{self.compute_target}`; use "
                "compute_target `ssh:<device_id>`."
            )
        elif self.device_id is not None:
            raise InvalidRequest(
                f"device_id `{self.device_id}` is set with compute_target `{self.compute_target}`; "
                "a device belongs only with `ssh:<device_id>`."
            )
        self._check_scale_out(lane)
        if self.nemo_dataset is not None and lane != "nemo":
            raise InvalidRequest(
                f"nemo_dataset names a NeMo Data Store dataset, which only compute_target "
                f"`cloud:nemo-customizer` reads; drop it for `{self.compute_target}`."
            )
        if self.auto_push_hf and not self.hf_repo_name:
            raise InvalidRequest("auto_push_hf needs hf_repo_name; BashGym never invents a repository name.")
        both = {"token_level_loss", "grpo_loss_type"} <= self.model_fields_set
        if both and self.token_level_loss != (self.grpo_loss_type in {"dapo", "bnpo", "dr_grpo"}):
            averaging = "per sequence" if self.token_level_loss else "over tokens"
            raise InvalidRequest(
                f"token_level_loss is {str(self.token_level_loss).lower()} but grpo_loss_type "
                f"`{self.grpo_loss_type}` averages {averaging}; "
                "use dapo/bnpo/dr_grpo for token-level loss, grpo for sequence-level."
            )
        self._check_reward_source()
        if self.method == "embedding_retriever" and self.batch_size < 2:
            raise InvalidRequest(
                "embedding_retriever learns from in-batch negatives (each query against the other rows' positives), "
                "so a batch of 1 teaches nothing; set batch_size 2 or more."
            )
        if self.method == "rlvr" and self.grpo_reward_mode != "verification":
            raise InvalidRequest(
                "rlvr rewards come from a deterministic verifier; set grpo_reward_mode "
                "`verification` or use method `grpo`."
            )
        return self

    def _check_reward_source(self) -> None:
        if self.grpo_reward_source == "reward_model":
            if self.method == "rlvr":
                raise InvalidRequest(
                    "rlvr rewards come from a deterministic verifier, never a learned reward model; use method `grpo` "
                    "with grpo_reward_source `reward_model`, or drop grpo_reward_source."
                )
            if not self.grpo_reward_model:
                raise InvalidRequest(
                    "grpo_reward_source `reward_model` needs grpo_reward_model: the model version id of a trained "
                    "reward model in this project (bashgym ledger context lists them)."
                )
            if self.lane != "local":
                raise InvalidRequest(
                    "grpo_reward_source `reward_model` trains on `local`: the reward model's files are on the "
                    "daemon's host. Use compute_target `local`, or reward with each row's verifier."
                )
        elif self.grpo_reward_model is not None:
            raise InvalidRequest(
                "grpo_reward_model is read only with grpo_reward_source `reward_model`; set that too, or drop "
                "grpo_reward_model to reward with each row's verifier."
            )
        if self.method in WORKFLOW_METHODS and self.lane in {"nemo", "ssh-group"}:
            raise InvalidRequest(
                f"method `{self.method}` trains on compute_target `local` or `ssh:<device_id>`; NeMo Customizer "
                "and device groups train the policy methods only."
            )

    def _check_scale_out(self, lane: str) -> None:
        if self.num_processes % self.num_machines:
            raise InvalidRequest(
                f"num_processes {self.num_processes} does not split evenly over num_machines {self.num_machines}; "
                "num_processes counts every process on every machine (accelerate's meaning), so make it a multiple."
            )
        if self.num_machines > 1 and lane not in {"ssh-group", "slurm"}:
            raise InvalidRequest(
                f"num_machines {self.num_machines} needs compute_target `ssh-group:<group_id>`, a device group with "
                "one member per machine (bashgym device group create), or `slurm:<cluster_id>`, whose nodes Slurm "
                "allocates."
            )
        if lane == "nemo" and (self.is_distributed or self.mixed_precision != "auto"):
            raise InvalidRequest(
                "NeMo Customizer places its own jobs; drop num_processes, num_machines, distributed_strategy and "
                "mixed_precision for `cloud:nemo-customizer`."
            )
        clash = {"bf16": self.bf16 is False, "no": self.bf16 is True, "fp16": self.bf16 is True}
        if clash.get(self.mixed_precision, False):
            raise InvalidRequest(
                f"mixed_precision `{self.mixed_precision}` contradicts bf16 {str(self.bf16).lower()}; set one of them, "
                "or make them agree."
            )

    @property
    def is_distributed(self) -> bool:
        """Whether the run goes through `accelerate launch` rather than one plain trainer process."""
        return self.num_processes > 1 or self.num_machines > 1 or self.distributed_strategy != "ddp"

    @property
    def lane(self) -> str:
        return parse_compute_target(self.compute_target)[0]

    @property
    def ssh_device(self) -> str | None:
        lane, name = parse_compute_target(self.compute_target)
        return name if lane == "ssh" else None

    @property
    def device_group(self) -> str | None:
        lane, name = parse_compute_target(self.compute_target)
        return name if lane == "ssh-group" else None

    @property
    def slurm_cluster(self) -> str | None:
        lane, name = parse_compute_target(self.compute_target)
        return name if lane == "slurm" else None


CLI_ONLY_FIELDS = frozenset(
    {"method", "strategy", "base_model", "dataset_path", "compute_target", "correlation_id", "tracking_context"}
)


def with_method(data: dict[str, Any]) -> dict[str, Any]:
    """A request body with its training method under `method`: `strategy`, its former name, is still accepted
    where users already send it (recipes, campaign specs, older request files), but not beside `method`."""
    if "strategy" not in data:
        return data
    if "method" in data and data["method"] != data["strategy"]:
        raise InvalidRequest(
            f"`strategy` ({data['strategy']!r}) is the former name of `method` ({data['method']!r}); "
            "send `method` only."
        )
    renamed = {k: v for k, v in data.items() if k != "strategy"}
    return {"method": data["strategy"], **renamed}


def merge_config_file(config: dict[str, Any]) -> dict[str, Any]:
    """Check a --config file: known request fields only, and never the ones the command line owns."""
    owned = sorted(CLI_ONLY_FIELDS & set(config))
    if owned:
        raise InvalidRequest(f"--config may not set {', '.join(owned)}; pass them as command-line flags.")
    unknown = unknown_fields(config, list(TrainingRequest.model_fields), where=" in --config")
    if unknown:
        raise InvalidRequest(" ".join(unknown))
    return dict(config)


def unknown_fields(data: dict[str, Any], fields: list[str], *, where: str = "") -> list[str]:
    """Each key that is not a field, with the closest field where one is close: all of them, not the first."""
    found = []
    for key in data:
        if key not in fields:
            suggestion = closest_field(str(key), fields)
            found.append(f"`{key}`{where} is not a field" + (f"; did you mean `{suggestion}`?" if suggestion else "."))
    return found
