"""report_to (issue 53, item 7): what a launched run's trainer gets to report to the team's own tracker too. The
trackers' packages are not in .venv and nothing here reaches a tracker: these check what the daemon hands the
trainer (its environment, by tracker, never a request field) and the TrainingArguments the trainer builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from bashgym.client.errors import RuleRejected
from bashgym.daemon.launch.trackers import check_report_to, missing_settings, trainer_environment
from bashgym.daemon.settings import load_settings, secret_env_names
from bashgym.trainers.contracts.request import InvalidRequest, TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory
from bashgym.trainers.methods.common import common_args
from pydantic import ValidationError
from transformers import TrainingArguments

WANDB_KEY = "wandb-" + "Wk3" * 12  # shaped like a key, never real
DAEMON_ENV = {"PATH": "/usr/bin:/bin", "WANDB_API_KEY": WANDB_KEY, "MLFLOW_TRACKING_TOKEN": "mlf-" + "Tq8" * 8}


def request(**fields: object) -> TrainingRequest:
    base = {"method": "sft", "base_model": "/models/tiny", "dataset_path": "/data/rows.jsonl"}
    return TrainingRequest.model_validate({**base, "hf_repo_owner": "default/nightly", **fields})


def test_mlflow_gets_the_operators_file_store_and_the_runs_project_and_no_other_trackers_secret(
    tmp_path: Path,
) -> None:
    store = (tmp_path / "mlruns").as_uri()  # file:///...: MLflow's file store
    settings = load_settings({"BASHGYM_MLFLOW_TRACKING_URI": store}, home=str(tmp_path))
    env = trainer_environment(settings, DAEMON_ENV, request(report_to=["mlflow"]))
    assert env["MLFLOW_TRACKING_URI"] == store and env["MLFLOW_EXPERIMENT_NAME"] == "default/nightly"
    assert env["MLFLOW_TRACKING_TOKEN"] == DAEMON_ENV["MLFLOW_TRACKING_TOKEN"]
    assert WANDB_KEY not in env.values()
    assert env["BASHGYM_SYSTEM_METRICS_S"] == "10"

    plain = trainer_environment(settings, DAEMON_ENV, request())
    assert not {name for name in plain if name.startswith(("MLFLOW_", "WANDB_", "TRACKIO_"))}, plain
    assert {"WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN"} <= set(secret_env_names(settings))  # redacted everywhere


def test_wandb_gets_the_key_only_when_asked_and_a_request_records_tracker_names_alone(tmp_path: Path) -> None:
    settings = load_settings(
        {"BASHGYM_WANDB_PROJECT": "team-runs", "BASHGYM_SYSTEM_METRICS_S": "0"}, home=str(tmp_path)
    )
    asked = request(report_to=["wandb", "wandb"])
    env = trainer_environment(settings, DAEMON_ENV, asked)
    assert (env["WANDB_API_KEY"], env["WANDB_PROJECT"], env["WANDB_RUN_GROUP"]) == (
        WANDB_KEY,
        "team-runs",
        "default/nightly",
    )
    assert "WANDB_ENTITY" not in env and env["BASHGYM_SYSTEM_METRICS_S"] == "0"
    assert asked.report_to == ["wandb"] and WANDB_KEY not in asked.model_dump_json()
    check_report_to(settings, DAEMON_ENV, asked)  # configured: no refusal
    with pytest.raises(RuleRejected) as refused:
        check_report_to(settings, {}, asked)  # the key is missing from the daemon's environment
    assert "WANDB_API_KEY (the W&B API key" in str(refused.value)


def test_an_unconfigured_tracker_a_remote_lane_and_an_unknown_name_are_refused(tmp_path: Path) -> None:
    settings = load_settings({}, home=str(tmp_path))
    assert missing_settings(settings, {}, "trackio") == ["BASHGYM_TRACKIO_DIR"]
    with pytest.raises(RuleRejected) as refused:
        check_report_to(settings, DAEMON_ENV, request(report_to=["mlflow", "trackio"]))
    said = str(refused.value)
    assert "mlflow needs BASHGYM_MLFLOW_TRACKING_URI" in said and "trackio needs BASHGYM_TRACKIO_DIR" in said
    configured = load_settings({"BASHGYM_MLFLOW_TRACKING_URI": "file:///srv/mlruns"}, home=str(tmp_path))
    with pytest.raises(RuleRejected, match="local lane only"):
        check_report_to(configured, {}, request(report_to=["mlflow"], compute_target="ssh:gpu-box"))
    with pytest.raises((ValidationError, InvalidRequest)):
        request(report_to=["tensorboard"])


def test_the_trainers_training_arguments_report_to_the_named_trackers_under_the_run(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run-abc123")
    args = common_args(request(report_to=["mlflow", "trackio"]), run)
    assert (args["report_to"], args["run_name"], args["project"]) == (
        ["mlflow", "trackio"],
        "run-abc123",
        "default/nightly",
    )
    built = TrainingArguments(**args)  # transformers takes them (its callbacks need the packages only at Trainer())
    assert built.report_to == ["mlflow", "trackio"] and built.run_name == "run-abc123"
    assert common_args(request(), run)["report_to"] == "none"
