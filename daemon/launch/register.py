"""The register stage: a checked launch becomes a run of the ledger (verified, or `unassigned` when its tracking
context is incomplete) with its launch reservation, and the answer every launch path gives."""

from __future__ import annotations

from typing import Any

from bashgym.client.specs import Actor, BudgetEntrySpec, RunRegistration, WriteResult
from bashgym.client.validation import canonical_json, sha256_text
from bashgym.daemon.lanes.nemo_data import NemoDataset
from bashgym.daemon.model_identity import new_version_files
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.datasets import JUDGED_TASK_CHECK
from bashgym.trainers.contracts.request import TrainingRequest


async def register_run(
    ledger: Ledger,
    actor: Actor,
    workspace: str,
    request: TrainingRequest,
    found: dict[str, Any],
    *,
    reward_model_version: str | None,
    job: dict[str, Any] | None = None,
    uploaded: NemoDataset | None = None,
    run_id: str | None = None,
) -> WriteResult:
    """Record the run a launch of `request` makes; `found` is what the checks found (check.LaunchChecks), `job` and
    `uploaded` the NeMo Customizer job and the data it trains on, for a run on that lane."""
    model_check, dataset_sha256 = found["model_check"], found["dataset_sha256"]
    # A model version this launch records from its context is recorded with base_model's files.
    model_files = await new_version_files(workspace, request) if model_check == "new_version" else []
    registration = RunRegistration(
        run_id=run_id,
        source_system="nemo-customizer" if job else "bashgym",
        source_run_id=job["id"] if job else None,
        method=request.method,
        tracking_context=request.tracking_context,
        compute_target=request.compute_target,
        config={
            **request.model_dump(mode="json", exclude={"tracking_context"}),
            "dataset_sha256": dataset_sha256,
            JUDGED_TASK_CHECK: "launch",  # the dataset check refused every row asking a task it is judged by
            # How base_model was held to the model version the context names (model_identity).
            **({"model_check": model_check} if model_check else {}),
            # The model version GRPO's rewards come from (grpo_reward_model holds its directory here).
            **({"grpo_reward_model_version_id": reward_model_version} if reward_model_version else {}),
            # The NeMo Data Store dataset the job trains on, and the digest of the bytes uploaded there.
            **({"nemo_upload": uploaded.record()} if uploaded else {}),
        },
        recipe_digest=sha256_text(canonical_json(request.model_dump(mode="json", exclude={"correlation_id"}))),
        correlation_id=request.correlation_id or actor.correlation_id,
    )
    return await ledger.register_run(actor, workspace, registration, model_files=model_files)


async def reserve_launch(ledger: Ledger, actor: Actor, workspace: str, project: str, run_id: str) -> None:
    """One run of the project's budget, reserved when the run is first recorded (a replay reserves nothing)."""
    await ledger.add_budget_entry(
        actor,
        workspace,
        project,
        BudgetEntrySpec(
            entry_id=f"{run_id}.reserve",
            kind="reserve",
            runs=1,
            gpu_hours=0.0,
            run_id=run_id,
            reason="reserved at launch; GPU-hours settle from measured run time",
        ),
    )


def started(request: TrainingRequest, written: WriteResult, attempt_id: str) -> dict[str, Any]:
    """What a launch answers: the run as recorded, where it trains, and where its events begin."""
    run = written.record
    return {
        "run_id": run["run_id"],
        "attempt_id": attempt_id,
        "status": run["status"],
        "lane": request.lane,
        "device_id": request.ssh_device,
        "device_group": request.device_group,
        "world_size": request.num_processes,
        "source_run_id": run["source_run_id"],
        "correlation_id": run["correlation_id"],
        "project_id": run["project_id"],
        "experiment_id": run["experiment_id"],
        "context_status": run["context_status"],
        "missing_context_fields": run["missing_context_fields"],
        "replayed": written.replayed,
        # Where this run's events begin: a client following it reads the events from here, not from the start.
        "cursor": written.cursor,
    }
