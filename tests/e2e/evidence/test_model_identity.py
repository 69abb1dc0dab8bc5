"""The model a run trains on is the model version its tracking context names, and the model an evaluation
measures is the one its run kept: checked by sha256 of every file, at plan, at launch and at evaluation.

Two tiny models of one shape and different weights (seeds 0 and 1) share a config, so only the file check tells
them apart; a third of another shape has another config."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import sft_data, tracking_context
from tests.support.helpers import RunningDaemon, cli, running_daemon

PROJECT = "identity"
VERSION = "tiny-a"  # model A, registered with its files through the CLI


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "a": build_tiny(root / "a"),
        "b": build_tiny(root / "b", seed=1),  # A's shape and config, other weights
        "teacher": build_tiny(root / "teacher", teacher=True),  # another shape: another config
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sft_data(tmp_path_factory.mktemp("data"), rows=8)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, models: dict[str, Path], data: Path) -> Iterator[RunningDaemon]:
    """A daemon whose project holds model A as version tiny-a (its files stored) and `data` as rows-v1."""
    with running_daemon(tmp_path_factory.mktemp("home")) as running:
        env = running.env()
        for args in (
            ("project", "create", "--id", PROJECT, "--name", "Model identity"),
            ("model", "register", "--project", PROJECT, "--model", "tiny", "--version", VERSION,
             "--dir", str(models["a"])),
            ("dataset", "register", "--project", PROJECT, "--dataset", "rows", "--version", "rows-v1",
             "--file", str(data)),
        ):  # fmt: skip
            done = cli(env, *args)
            assert done.code == 0, done.stderr
        yield running


def context(data: Path, **model: str) -> dict[str, Any]:
    """An official context in PROJECT naming `data` exactly, and the model facts given."""
    digest = sha256(data)
    return tracking_context(
        project_id=PROJECT,
        project_display_name="Model identity",
        dataset_version_id=f"rows-{digest[:12]}",
        dataset_content_digest=digest,
        **model,
    )


def naming_a(data: Path, models: dict[str, Path], **overrides: str) -> dict[str, Any]:
    """A context naming registered version tiny-a with A's config digest, as `model register` recorded it."""
    facts = {
        "model_id": "tiny",
        "model_version_id": VERSION,
        "model_source_uri": "bashgym://models/tiny",
        "model_config_digest": sha256(models["a"] / "config.json"),
    }
    return context(data, **{**facts, **overrides})


def request(model: Path | str, data: Path, ctx: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": "sft",
        "base_model": str(model),
        "dataset_path": str(data),
        "max_steps": 2,
        "batch_size": 4,
        "max_seq_length": 128,
        "save_steps": 2,
        "tracking_context": ctx,
    }


def plan_of(daemon: RunningDaemon, body: dict[str, Any], **params: str) -> dict[str, Any]:
    with daemon.client() as client:
        plan = client.post("/v1/training/plan", json=body, params=params)
    assert plan.status_code == 200, plan.text
    return dict(plan.json())


def plan_and_launch(daemon: RunningDaemon, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The plan's verdict and the launch's answer for one request, through the API."""
    plan = plan_of(daemon, body)
    with daemon.client() as client:
        started = client.post("/v1/training/start", json=body)
    return plan, started


def by_version(version: str) -> dict[str, str]:
    """A launch that names its project's registered versions (the daemon composes the context and base_model)."""
    return {"project": PROJECT, "model_version": version, "dataset_version": "rows-v1"}


METHOD_FIELDS = {"method": "sft", "max_steps": 2, "batch_size": 4, "max_seq_length": 128}


def cli_plan_and_launch(daemon: RunningDaemon, tmp: Path, model: Path, data: Path, ctx: dict[str, Any]) -> list[Any]:
    """`training plan` and `training start` of the same request through the CLI."""
    (tmp / "tracking.json").write_text(json.dumps(ctx))
    (tmp / "sft.json").write_text(json.dumps({"max_steps": 2, "batch_size": 4, "max_seq_length": 128}))
    flags = (
        "--method", "sft", "--model", str(model), "--dataset-path", str(data), "--config", str(tmp / "sft.json"),
        "--tracking-context", str(tmp / "tracking.json"),
    )  # fmt: skip
    return [cli(daemon.env(), "training", verb, *flags) for verb in ("plan", "start")]


def runs_of(daemon: RunningDaemon) -> list[str]:
    with daemon.client() as client:
        answer = client.get(f"/v1/projects/{PROJECT}/runs")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return [r["run_id"] for r in (body["runs"] if isinstance(body, dict) else body)]


def test_a_context_naming_one_model_version_with_other_weights_is_refused_at_plan_and_launch(
    daemon: RunningDaemon, models: dict[str, Path], data: Path, tmp_path: Path
) -> None:
    before = runs_of(daemon)
    ctx = naming_a(data, models)  # the config digest is right: B has A's config, other weights
    plan, started = plan_and_launch(daemon, request(models["b"], data, ctx))
    assert plan["ready"] is False
    assert any(VERSION in r and "model.safetensors" in r for r in plan["reasons"]), plan["reasons"]
    assert started.status_code == 422, started.text
    error = started.json()["error"]
    assert VERSION in error["message"] and "model.safetensors" in error["message"], error
    assert "bashgym model register" in error["hint"] and "model_version" in error["hint"], error

    planned, launched = cli_plan_and_launch(daemon, tmp_path, models["b"], data, ctx)
    assert planned.code == 7 and "model.safetensors" in planned.stdout + planned.stderr, planned
    assert launched.code == 7 and "model.safetensors" in launched.stderr, launched
    assert runs_of(daemon) == before  # nothing was recorded as trained from tiny-a


def test_a_model_of_another_shape_is_refused_by_its_files_and_its_config(
    daemon: RunningDaemon, models: dict[str, Path], data: Path
) -> None:
    ctx = naming_a(data, models, model_config_digest=sha256(models["teacher"] / "config.json"))
    plan, started = plan_and_launch(daemon, request(models["teacher"], data, ctx))
    assert plan["ready"] is False and started.status_code == 422, started.text
    message = started.json()["error"]["message"]
    assert "config.json" in message and "model_config_digest" in message, message


def test_a_made_up_config_digest_is_refused_at_plan_and_launch(
    daemon: RunningDaemon, models: dict[str, Path], data: Path, tmp_path: Path
) -> None:
    before = runs_of(daemon)
    ctx = naming_a(data, models, model_config_digest="c" * 64)  # tiny-a recorded another digest; its files match
    plan, started = plan_and_launch(daemon, request(models["a"], data, ctx))
    assert plan["ready"] is False, plan
    assert any("model_config_digest" in r and VERSION in r for r in plan["reasons"]), plan["reasons"]
    assert started.status_code == 422, started.text
    assert "model_config_digest" in started.json()["error"]["message"]
    planned, launched = cli_plan_and_launch(daemon, tmp_path, models["a"], data, ctx)
    assert planned.code == 7 and "model_config_digest" in planned.stdout + planned.stderr, planned
    assert launched.code == 7 and "model_config_digest" in launched.stderr, launched
    assert runs_of(daemon) == before


def test_a_new_version_is_recorded_only_with_the_config_digest_of_the_model_it_names(
    daemon: RunningDaemon, models: dict[str, Path], data: Path
) -> None:
    """A context naming a version the project never recorded registers it from its claims: a made-up config digest
    (or one of another model) would become the version's record, so it must be base_model's config.json."""
    before = runs_of(daemon)
    made_up = {"model_id": "tiny", "model_version_id": "tiny-new", "model_source_uri": "bashgym://models/tiny-new"}
    for claimed in ("d" * 64, sha256(models["teacher"] / "config.json")):
        ctx = context(data, **made_up, model_config_digest=claimed)
        plan, started = plan_and_launch(daemon, request(models["a"], data, ctx))
        assert plan["ready"] is False and started.status_code == 422, started.text
        message = started.json()["error"]["message"]
        assert f"has config.json of sha256 {sha256(models['a'] / 'config.json')[:12]}" in message, message
        assert "'tiny-new' has model_config_digest" in message and "model register" in started.json()["error"]["hint"]
    assert runs_of(daemon) == before
    honest = context(data, **made_up, model_config_digest=sha256(models["a"] / "config.json"))
    assert plan_of(daemon, request(models["a"], data, honest))["ready"] is True


def test_a_version_first_recorded_by_a_launch_holds_later_runs_to_its_weights(
    daemon: RunningDaemon, models: dict[str, Path], data: Path, tmp_path: Path
) -> None:
    """A and B share a config: a version recorded from a context's claims alone would take B as A. The launch that
    records it records A's files too, and a later run naming it with B's weights is refused, by API and CLI."""
    facts = {"model_id": "tiny", "model_version_id": "tiny-ctx", "model_source_uri": "bashgym://models/tiny-ctx"}
    ctx = context(data, **facts, model_config_digest=sha256(models["a"] / "config.json"))
    with daemon.client() as client:
        started = client.post("/v1/training/start", json=request(models["a"], data, ctx))
        assert started.status_code == 201, started.text
        stopped = client.post(f"/v1/projects/{PROJECT}/runs/{started.json()['run_id']}/stop")  # its record suffices
        assert stopped.status_code == 200, stopped.text
        version = client.get(f"/v1/projects/{PROJECT}/model-versions/tiny-ctx").json()
    recorded = {f["path"]: f["sha256"] for f in version["files"]}
    assert recorded["model.safetensors"] == sha256(models["a"] / "model.safetensors"), version
    before = runs_of(daemon)
    plan, launched = plan_and_launch(daemon, request(models["b"], data, ctx))
    assert plan["ready"] is False and launched.status_code == 422, launched.text
    assert "tiny-ctx" in launched.json()["error"]["message"] and "model.safetensors" in launched.text
    planned, started_by_cli = cli_plan_and_launch(daemon, tmp_path, models["b"], data, ctx)
    assert planned.code == 7 and started_by_cli.code == 7 and "model.safetensors" in started_by_cli.stderr
    assert runs_of(daemon) == before
    assert plan_of(daemon, request(models["a"], data, ctx))["ready"] is True  # A itself still passes


def test_a_hub_version_is_the_repo_the_run_loads(daemon: RunningDaemon, models: dict[str, Path], data: Path) -> None:
    registered = cli(
        daemon.env(), "model", "register", "--project", PROJECT, "--model", "hubby", "--version", "hubby-v1",
        "--hub-id", "acme/hubby", "--revision", "0" * 40,
    )  # fmt: skip
    assert registered.code == 0, registered.stderr
    ctx = context(
        data,
        model_id="hubby",
        model_version_id="hubby-v1",
        model_source_uri="hf://acme/hubby",
        model_config_digest=hashlib.sha256(b"hf://acme/hubby").hexdigest(),
    )
    for model, why in ((models["a"], "a directory"), ("acme/other", "acme/other")):
        plan, started = plan_and_launch(daemon, request(model, data, ctx))
        assert plan["ready"] is False, plan
        assert any("hubby-v1" in r and why in r for r in plan["reasons"]), plan["reasons"]
        assert started.status_code == 422, started.text


def test_the_registered_model_passes_by_its_directory_and_by_its_version(
    daemon: RunningDaemon, models: dict[str, Path], data: Path, tmp_path: Path
) -> None:
    assert plan_of(daemon, request(models["a"], data, naming_a(data, models)))["ready"] is True
    (tmp_path / "tracking.json").write_text(json.dumps(naming_a(data, models)))
    planned = cli(
        daemon.env(), "training", "plan", "--method", "sft", "--model", str(models["a"]), "--dataset-path", str(data),
        "--tracking-context", str(tmp_path / "tracking.json"), "--json",
    )  # fmt: skip
    assert planned.code == 0, planned.stdout + planned.stderr
    # By the version's own id: the daemon's copy of its stored files, and the context it composes.
    plan = plan_of(daemon, METHOD_FIELDS, **by_version(VERSION))
    assert plan["ready"] is True, plan["reasons"]


@pytest.fixture(scope="module")
def trained(daemon: RunningDaemon, models: dict[str, Path], data: Path) -> str:
    """A completed run from tiny-a, launched with the context that names it (the right model launches)."""
    with daemon.client() as client:
        started = client.post("/v1/training/start", json=request(models["a"], data, naming_a(data, models)))
        assert started.status_code == 201, started.text
        run_id = str(started.json()["run_id"])
        deadline = time.monotonic() + 240
        while (run := client.get(f"/v1/projects/{PROJECT}/runs/{run_id}").json())["status"] not in {
            "completed",
            "failed",
        }:
            assert time.monotonic() < deadline, run["status"]
            time.sleep(0.5)
    assert run["status"] == "completed", run
    assert run["config"]["model_check"] == "files", run["config"]
    return run_id


def test_a_run_whose_kept_adapter_was_replaced_is_not_evaluated(daemon: RunningDaemon, trained: str) -> None:
    adapter = daemon.home / "runs" / trained / "final" / "adapter_model.safetensors"
    original = adapter.read_bytes()
    adapter.write_bytes(original[:-8] + bytes(8))  # other weights, the same size
    try:
        with daemon.client() as client:
            answer = client.post(f"/v1/projects/{PROJECT}/evaluations", json={"run_id": trained, "limit_tasks": 1})
        assert answer.status_code == 422, answer.text
        message = answer.json()["error"]["message"]
        assert trained in message and "adapter_model.safetensors" in message, message
        evaluated = cli(daemon.env(), "eval", "run", "--project", PROJECT, "--run", trained, "--limit-tasks", "1")
        assert evaluated.code == 7 and "adapter_model.safetensors" in evaluated.stderr, evaluated
        adapter.unlink()  # a missing file is refused the same way
        evaluated = cli(daemon.env(), "eval", "run", "--project", PROJECT, "--run", trained, "--limit-tasks", "1")
        assert evaluated.code == 7 and "adapter_model.safetensors (missing)" in evaluated.stderr, evaluated
    finally:
        adapter.write_bytes(original)
    with daemon.client() as client:
        run = client.get(f"/v1/projects/{PROJECT}/runs/{trained}").json()
    assert run["evaluations"] == []  # nothing was recorded for the run
    # A run whose files are as recorded is evaluated: every evaluation of a run in tests/e2e/evidence/ passes this
    # check, so it is not repeated here.
