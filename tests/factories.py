"""Record factories: valid specs with overridable fields."""

from __future__ import annotations

import hashlib
from typing import Any


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def tracking_context(**overrides: Any) -> dict[str, Any]:
    context = {
        "workspace_id": "default",
        "project_id": "nightly",
        "project_display_name": "Nightly SFT",
        "experiment_id": "lr-sweep",
        "experiment_name": "LR sweep",
        "objective": "Find the learning rate",
        "task_type": "terminal-agent",
        "model_id": "tiny",
        "model_version_id": "tiny-v1",
        "model_source_uri": "bashgym://models/tiny",
        "model_config_digest": digest("config"),
        "dataset_id": "traces",
        "dataset_version_id": "traces-v1",
        "dataset_source_uri": "bashgym://datasets/traces",
        "dataset_content_digest": digest("rows"),
        "environment_id": "cpu-local",
        "environment_runtime_digest": digest("runtime"),
    }
    context.update(overrides)
    return context


def suite(suite_id: str = "bash-heldout", **overrides: Any) -> dict[str, Any]:
    spec = {
        "suite_id": suite_id,
        "kind": "terminal_tasks",
        "scoring_contract": {
            "primary_metric": "pass_at_1",
            "metrics": {"pass_at_1": {"direction": "maximize"}, "timeout_rate": {"direction": "minimize"}},
        },
        "code_digest": digest(f"suite-{suite_id}"),
    }
    spec.update(overrides)
    return spec
