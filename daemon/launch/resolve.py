"""The tracking context of a launch that names its project and registered versions, composed from the ledger's
own records, never guessed.

A person who picks a project in Discord (or `?project=` on the API) asks for an official run there: the daemon
fills the context from what the project has registered (the project's name, the model version and dataset
version with their digests, the experiment) and from where the run goes (the environment). The campaign runner
composes its candidates' contexts the same way.
"""

from __future__ import annotations

import hashlib
import platform
from typing import Any

from bashgym.daemon.version import bashgym_version
from bashgym.ledger.store import Ledger

# The experiment of runs launched one at a time, outside a campaign, when the launch names none.
ADHOC_EXPERIMENT = "adhoc"
ADHOC = {
    "name": "Ad-hoc runs",
    "objective": "Runs launched one at a time, outside a campaign.",
    "task_type": "adhoc",
}


def runtime_digest() -> str:
    """The daemon's runtime: the BashGym and Python versions its trainers run with."""
    return hashlib.sha256(f"bashgym {bashgym_version()} python {platform.python_version()}".encode()).hexdigest()


def environment_id(compute_target: str, *, prefix: str = "") -> str:
    """The environment a run goes to, named by its compute target (`ssh:gpu1` -> `ssh-gpu1`)."""
    return f"{prefix}{compute_target.replace(':', '-')}"[:128]


async def registered_context(
    ledger: Ledger,
    ws: str,
    project: str,
    *,
    model: dict[str, Any],
    dataset: dict[str, Any],
    experiment: dict[str, str],
    environment: str,
) -> dict[str, Any]:
    """A complete tracking context from a project's records: `model` and `dataset` are its registered version
    records, `experiment` holds experiment_id, name, objective and task_type."""
    project_record = await ledger.get_project(ws, project)
    return {
        "workspace_id": ws,
        "project_id": project,
        "project_display_name": project_record["name"],
        "experiment_id": experiment["experiment_id"],
        "experiment_name": experiment["name"],
        "objective": experiment["objective"],
        "task_type": experiment["task_type"],
        "model_id": model["model_id"],
        "model_version_id": model["model_version_id"],
        "model_source_uri": model["source_uri"],
        "model_config_digest": model["config_digest"] or hashlib.sha256(model["source_uri"].encode()).hexdigest(),
        "dataset_id": dataset["dataset_id"],
        "dataset_version_id": dataset["dataset_version_id"],
        "dataset_source_uri": dataset["source_uri"],
        "dataset_content_digest": dataset["content_digest"],
        "environment_id": environment,
        "environment_runtime_digest": runtime_digest(),
    }


async def named_experiment(ledger: Ledger, ws: str, project: str, experiment_id: str | None) -> dict[str, str]:
    """The experiment a launch names: its registered name and objective, or a new one with the ad-hoc wording;
    none named is the project's ad-hoc experiment."""
    wanted = experiment_id or ADHOC_EXPERIMENT
    record = next((e for e in await ledger.list_experiments(ws, project) if e["experiment_id"] == wanted), None)
    if record is None:
        name = ADHOC["name"] if wanted == ADHOC_EXPERIMENT else wanted
        return {"experiment_id": wanted, **ADHOC, "name": name}
    return {
        "experiment_id": wanted,
        "name": record["name"],
        "objective": record["objective"],
        "task_type": record["task_type"],
    }
