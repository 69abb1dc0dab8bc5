"""A launched run reporting to the team's own tracker too (the request's `report_to`): what the operator configures
for each tracker, the check stage's refusal of a tracker that is not configured, and the environment a local
trainer gets. BashGym's ledger records the run whatever it names; the request carries tracker names only, and each
tracker's configuration (a W&B key among it) reaches the trainer's environment alone, never a request, a run's
recorded config or an event."""

from __future__ import annotations

from collections.abc import Mapping

from bashgym.client.errors import RuleRejected
from bashgym.daemon.settings import MLFLOW_SECRET_ENV, SYSTEM_METRICS_ENV, Settings, child_environment
from bashgym.trainers.contracts.request import TrainingRequest


def missing_settings(settings: Settings, environ: Mapping[str, str], tracker: str) -> list[str]:
    """What the operator must still set before runs may report to `tracker` (empty: configured)."""
    match tracker:
        case "mlflow":
            return [] if settings.mlflow_tracking_uri else ["BASHGYM_MLFLOW_TRACKING_URI"]
        case "wandb":
            missing = [] if settings.wandb_project else ["BASHGYM_WANDB_PROJECT"]
            if not environ.get(settings.wandb_api_key_env):
                missing.append(f"{settings.wandb_api_key_env} (the W&B API key, in the daemon's environment)")
            return missing
        case "trackio":
            return [] if settings.trackio_dir else ["BASHGYM_TRACKIO_DIR"]
    return [f"a tracker named {tracker!r}, which BashGym does not know"]


def refuse_report_to(request: TrainingRequest, where: str) -> None:
    """Refuse report_to for a trainer that runs `where` the operator's tracker configuration does not reach."""
    if request.report_to:
        raise RuleRejected(
            f"report_to {request.report_to} is taken on the local lane only; {where} does not get the operator's "
            "tracker configuration.",
            hint="Train with compute_target local, or leave report_to out: BashGym's ledger records the run anyway.",
        )


def check_report_to(settings: Settings, environ: Mapping[str, str], request: TrainingRequest) -> None:
    """The check stage's refusal of a tracker the operator has not configured, or of a lane that cannot report."""
    if not request.report_to:
        return
    if request.lane != "local":
        refuse_report_to(request, f"a trainer on the {request.compute_target} lane")
    missing = {tracker: missing_settings(settings, environ, tracker) for tracker in request.report_to}
    unset = {tracker: names for tracker, names in missing.items() if names}
    if unset:
        said = "; ".join(f"{tracker} needs {', '.join(names)}" for tracker, names in unset.items())
        raise RuleRejected(
            f"report_to names {', '.join(unset)}, which this daemon's operator has not configured: {said}.",
            hint='Ask the operator to set them where the daemon starts (docs/tracking.md, "Reporting to your own '
            'tracker too") and restart it, or leave the tracker out of report_to.',
        )


def trainer_environment(settings: Settings, environ: Mapping[str, str], request: TrainingRequest) -> dict[str, str]:
    """A local trainer's environment: the daemon's allow-listed share (child_environment, the Hub token to a run that
    pushes), the system metrics' interval, and the configuration of each tracker the request reports to."""
    env = child_environment(settings, environ, hub_upload=request.auto_push_hf and bool(request.hf_repo_name))
    env[SYSTEM_METRICS_ENV] = f"{settings.system_metrics_s:g}"
    project = request.hf_repo_owner or "bashgym"  # `<workspace>/<project>`, set by the daemon at launch
    if "mlflow" in request.report_to:
        env["MLFLOW_TRACKING_URI"] = settings.mlflow_tracking_uri
        env["MLFLOW_EXPERIMENT_NAME"] = project
        for name in ("MLFLOW_TRACKING_USERNAME", *MLFLOW_SECRET_ENV):
            if environ.get(name):
                env[name] = environ[name]
    if "wandb" in request.report_to:
        env |= {"WANDB_PROJECT": settings.wandb_project, "WANDB_RUN_GROUP": project}
        if settings.wandb_entity:
            env["WANDB_ENTITY"] = settings.wandb_entity
        if environ.get(settings.wandb_api_key_env):
            env["WANDB_API_KEY"] = environ[settings.wandb_api_key_env]
    if "trackio" in request.report_to and settings.trackio_dir is not None:
        env["TRACKIO_DIR"] = str(settings.trackio_dir)
    return env
