"""What a cloud:nemo-customizer launch sends: the validated dataset in the Customizer's format, named by its
content, and the job's body. Pure values; daemon/lanes/nemo.py sends them.

Rows: sft `{"messages": [...]}` (a `text` row becomes `{"prompt": "", "completion": text}`), dpo `{"prompt",
"chosen_response", "rejected_response"}` ("Format Training Dataset"; NeMo-Agent-Toolkit's DPO adapter). The job's
`hyperparameters`: `training_type` sft|dpo, `finetuning_type` lora|all_weights, epochs, batch_size,
learning_rate, `max_steps` and `seed` when sent, `lora {adapter_dim, adapter_dropout, alpha?}`, `dpo
{ref_policy_kl_penalty}` ("Hyperparameter Options", LoraParameters, DpoParameters).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bashgym.trainers.contracts.fields import NEMO_METHODS
from bashgym.trainers.contracts.request import TrainingRequest

TRAINING_TYPES = NEMO_METHODS  # the values of hyperparameters.training_type this lane sends
FINETUNING_TYPES = ("lora", "all_weights")
TRAINING_FILE = "training/training.jsonl"
VALIDATION_FILE = "validation/validation.jsonl"
DATA_DIRS = ("training/", "validation/")


@dataclass(frozen=True)
class DatasetFile:
    path_in_repo: str
    content: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@dataclass(frozen=True)
class NemoDataset:
    """A dataset as uploaded: where it lives in the Data Store and the exact bytes of each file."""

    namespace: str
    name: str
    files: tuple[DatasetFile, ...]

    @property
    def dataset_id(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def files_url(self) -> str:
        return f"hf://datasets/{self.dataset_id}"

    @property
    def digests(self) -> dict[str, str]:
        """The Entity Store's custom_fields that say which content the dataset holds."""
        keys = {TRAINING_FILE: "bashgym_sha256", VALIDATION_FILE: "bashgym_validation_sha256"}
        return {keys[f.path_in_repo]: f.sha256 for f in self.files}

    def record(self) -> dict[str, Any]:
        """What the run records: the Data Store id, and the digest of the training bytes (and of each file)."""
        return {
            "dataset_id": self.dataset_id,
            "files_url": self.files_url,
            "sha256": self.files[0].sha256,
            "files": {f.path_in_repo: {"sha256": f.sha256, "size_bytes": len(f.content)} for f in self.files},
        }


def job_hyperparameters(request: TrainingRequest) -> dict[str, Any]:
    """The job's `hyperparameters` for `request` (sft or dpo); `training plan` shows them before launch."""
    if request.method not in TRAINING_TYPES:
        raise ValueError(f"NeMo Customizer training_type {request.method!r} is not one of {', '.join(TRAINING_TYPES)}.")
    sent = request.model_fields_set
    hyperparameters: dict[str, Any] = {
        "training_type": request.method,
        "finetuning_type": "lora" if request.use_lora else "all_weights",
        "epochs": int(request.num_epochs),
        "batch_size": request.batch_size,
        "learning_rate": request.learning_rate,
    }
    # Optional fields go only when sent: otherwise the Customizer's own default applies, as the plan shows.
    if request.max_steps > 0:
        hyperparameters["max_steps"] = request.max_steps
    if "seed" in sent:
        hyperparameters["seed"] = request.seed
    if request.use_lora:
        lora: dict[str, Any] = {"adapter_dim": request.lora_rank, "adapter_dropout": request.lora_dropout}
        hyperparameters["lora"] = lora | ({"alpha": request.lora_alpha} if "lora_alpha" in sent else {})
    if request.method == "dpo":
        hyperparameters["dpo"] = {"ref_policy_kl_penalty": request.dpo_beta}
    return hyperparameters


def job_body(
    *,
    config: str,
    dataset_namespace: str,
    dataset_name: str,
    hyperparameters: dict[str, Any],
    name: str,
    description: str,
    output_model: str | None,
) -> dict[str, Any]:
    """The body of POST /v1/customization/jobs; the `lora` block goes only with finetuning_type "lora"."""
    finetuning_type = hyperparameters.get("finetuning_type")
    if finetuning_type not in FINETUNING_TYPES:
        raise ValueError(f"finetuning_type {finetuning_type!r} is not one of {', '.join(FINETUNING_TYPES)}.")
    if finetuning_type != "lora" and "lora" in hyperparameters:
        raise ValueError("a lora block goes only with finetuning_type 'lora'.")
    body: dict[str, Any] = {
        "name": name,
        "description": description,
        "config": config,
        "dataset": {"name": dataset_name, "namespace": dataset_namespace},
        "hyperparameters": hyperparameters,
    }
    if output_model is not None:
        body["output_model"] = output_model
    return body


def customizer_dataset(request: TrainingRequest, *, namespace: str) -> NemoDataset:
    """The request's validated data in the Customizer's format, named `nemo_dataset` or `bashgym-<sha256[:12]>` of
    the training bytes (and of the validation bytes, with eval_dataset_path). Reads the files: run it in a thread."""
    files = [DatasetFile(TRAINING_FILE, customizer_rows(request.method, Path(request.dataset_path).read_bytes()))]
    if request.eval_dataset_path:
        evaluation = Path(request.eval_dataset_path).read_bytes()
        files.append(DatasetFile(VALIDATION_FILE, customizer_rows(request.method, evaluation)))
    if request.nemo_dataset:
        named_namespace, _, name = request.nemo_dataset.partition("/")
        return NemoDataset(named_namespace, name, tuple(files))
    name = "-".join(["bashgym", *(f.sha256[:12] for f in files)])
    return NemoDataset(namespace, name, tuple(files))


def customizer_rows(method: str, raw: bytes) -> bytes:
    """A validated JSONL file of ours, row by row in the Customizer's format for `method`."""
    rows = [json.loads(line.decode("utf-8-sig")) for line in raw.splitlines() if line.strip()]
    return "".join(json.dumps(customizer_row(method, row), ensure_ascii=False) + "\n" for row in rows).encode()


def customizer_row(method: str, row: dict[str, Any]) -> dict[str, Any]:
    match method:
        case "sft" if "messages" in row:
            return {"messages": row["messages"]}
        case "sft":
            return {"prompt": "", "completion": row["text"]}
        case "dpo":
            return {"prompt": row["prompt"], "chosen_response": row["chosen"], "rejected_response": row["rejected"]}
    raise ValueError(f"NeMo Customizer has no dataset format for method {method!r}.")
