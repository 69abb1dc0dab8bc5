"""The TrainingArguments every method shares, and the evaluation settings of those that evaluate as they train."""

from __future__ import annotations

from typing import Any

import torch
from bashgym.trainers.contracts.fields import shared_args
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory


def common_args(request: TrainingRequest, run: RunDirectory) -> dict[str, Any]:
    """TrainingArguments every method shares: the request's (trainers/settings.shared_args) and the run's.

    The speed settings (bf16, optimizer, checkpointing, data loading) come from the run's SpeedPlan.
    """
    return {
        "output_dir": str(run.root),
        **shared_args(request),
        # transformers' default swaps a NaN or infinite step loss for the window's average (0.0 when every step
        # logs): a diverged run then logs a fine loss, and the daemon's non-finite-loss check never fires. The
        # check also reads the loss back every step, which makes the host wait for the GPU.
        "logging_nan_inf_filter": False,
        # Over several machines each one keeps its own copy of every checkpoint (its local main process writes
        # it), so a resume finds the checkpoint already there instead of copying it through the daemon.
        "save_on_each_node": request.num_machines > 1,
        **reporting_args(request, run),
        "disable_tqdm": True,
        "use_cpu": not torch.cuda.is_available(),
    }


def reporting_args(request: TrainingRequest, run: RunDirectory) -> dict[str, Any]:
    """The trackers the run reports to besides the ledger (request.report_to), under the run's id and project; each
    one reads the operator's configuration from the environment the daemon gave the trainer (MLFLOW_TRACKING_URI,
    WANDB_PROJECT and WANDB_API_KEY, TRACKIO_DIR: daemon/launch/trackers.py)."""
    if not request.report_to:
        return {"report_to": "none"}
    # hf_repo_owner is `<workspace>/<project>`, set by the daemon at launch: Trackio's project, as MLflow's experiment
    # (MLFLOW_EXPERIMENT_NAME) and W&B's group are.
    project = request.hf_repo_owner or "bashgym"
    return {"report_to": list(request.report_to), "run_name": run.root.name, "project": project}


def eval_args(request: TrainingRequest) -> dict[str, Any]:
    """Evaluate on eval_dataset_path every save_steps (it logs eval.loss), when one is given."""
    if not request.eval_dataset_path:
        return {}
    return {
        "eval_strategy": "steps",
        "eval_steps": request.save_steps,
        "per_device_eval_batch_size": request.batch_size,
    }
