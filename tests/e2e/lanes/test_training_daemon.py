"""Training through the daemon on the local lane: a real tiny-model run, watched into the ledger."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from bashgym.daemon.lanes.supervisor import METRICS_EVERY_S
from bashgym.daemon.training import scrub_logs
from bashgym.trainers.tiny import build_tiny
from transformers import AutoModelForCausalLM

from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import SUITE_ROOT, RunningDaemon, cli, running_daemon
from tests.support.helpers import wait_for_run as wait_for

TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def trainer_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("home"), env={"BASHGYM_LOCAL_SLOTS": "1"}) as running:
        yield running


def run_to_its_end(client: httpx.Client, request: dict[str, Any]) -> dict[str, Any]:
    """Launch `request` (an official run of project nightly) and wait for its end."""
    started = client.post("/v1/training/start", json=request)
    assert started.status_code == 201, started.text
    return wait_for(client, "nightly", started.json()["run_id"], TERMINAL)


def test_a_tiny_sft_run_goes_queued_running_completed_with_metrics_and_artifacts(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    with trainer_daemon.client() as client:
        started = client.post(
            "/v1/training/start",
            json=training_request(tiny, sft_data(tmp_path)),
            headers={"X-Correlation-Id": "cor-sft-1"},
        )
        assert started.status_code == 201, started.text
        info = started.json()
        assert (info["status"], info["context_status"], info["lane"]) == ("queued", "verified", "local")
        assert info["correlation_id"] == "cor-sft-1"
        run = wait_for(client, "nightly", info["run_id"], TERMINAL)
        assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
        events = client.get("/v1/projects/nightly/events", params={"limit": 1000}).json()["events"]
    kinds = [e["event_type"] for e in events if e["run_id"] == info["run_id"]]
    assert (
        kinds.index("run.queued")
        < kinds.index("run.preparing")
        < kinds.index("run.started")
        < kinds.index("run.completed")
    )
    assert "run.checkpoint" in kinds
    assert run["metric_summary"]["train.loss"]["count"] == 4
    # The trainer's system sampler (settings.system_metrics_s): at least its last sample, at a trained step.
    for metric in ("system.cpu_percent", "system.memory_rss_mb", "system.host_cpu_percent"):
        assert 1 <= run["metric_summary"][metric]["count"] <= 4, metric
        assert 0 < run["metric_summary"][metric]["last_step"] <= 4, metric
    assert run["metric_summary"]["system.memory_rss_mb"]["latest"] > 50  # a Python that imported torch
    assert {a["kind"] for a in run["artifacts"]} == {"adapter", "config"}  # config: effective_config.json
    assert all(len(a["sha256"]) == 64 and a["size_bytes"] > 0 for a in run["artifacts"])
    # The environment the trainer measured at its start, digested by the daemon beside the launch's planned one.
    measured = run["environment"]
    assert (measured["measured_by"], measured["environment"]["packages"]["torch"]) == ("trainer", torch.__version__)
    assert measured["environment"]["git"] is None  # the trainer is BashGym's own code, not a user's repository
    assert len(measured["digest"]) == 64 and measured["planned_digest"] not in {"", measured["digest"]}
    assert "run.environment" in kinds
    run_dir = trainer_daemon.home / "runs" / info["run_id"]
    assert not list(run_dir.glob("checkpoint-*")), "adapter_only retention"
    assert cli(trainer_daemon.env(), "ledger", "verify").code == 0


def test_a_running_run_shows_every_step_between_its_logged_ones_and_records_its_threads(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    # Logged once, at the end: the ledger's metrics alone would hold the bar at 0 until the last step.
    request = training_request(tiny, sft_data(tmp_path), max_steps=30, logging_steps=30, save_steps=31)
    with trainer_daemon.client() as client:
        started = client.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        where = f"/v1/projects/nightly/runs/{started.json()['run_id']}"
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 120
        while (run := client.get(where).json())["status"] not in TERMINAL and time.monotonic() < deadline:
            if "live" in run:
                seen.append(run["live"] | {"logged": (run["metric_summary"].get("train.loss") or {}).get("last_step")})
            time.sleep(0.05)  # a poll spinning faster takes the cores the trainer needs
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
    steps = [s["step"] for s in seen]
    assert steps == sorted(steps) and {s["max_steps"] for s in seen} == {30}, seen
    assert len({s for s in steps if 0 < s < 30}) >= 3, f"the bar moved between logged steps: {steps}"
    assert all(s["logged"] is None for s in seen if s["step"] < 30), "no metric before the 30th step"
    assert "live" not in run, "an ended run has no live step"
    threads = run["metric_summary"]["system.cpu_threads"]
    assert threads["count"] == 1 and 1 <= threads["latest"] <= (os.cpu_count() or 1)


@pytest.mark.slow  # make test-slow: the default suite keeps to its 10 minutes
def test_with_two_local_slots_a_trainer_and_an_evaluator_get_half_the_cores_and_record_it(
    tiny: Path, tmp_path: Path
) -> None:
    # With torch's thread per core in each, two runs sharing 2 cores took 82 ms a step instead of 17.
    # (An empty OMP_NUM_THREADS: the suite's own limit is not the daemon's.)
    env = {"BASHGYM_LOCAL_SLOTS": "2", "OMP_NUM_THREADS": ""}
    with running_daemon(tmp_path / "home", env=env) as daemon, daemon.client() as client:
        run = run_to_its_end(client, training_request(tiny, sft_data(tmp_path), max_steps=2))
        assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
        evaluation = evaluate_to_its_end(client, {"run_id": run["run_id"], "limit_tasks": 2, "max_new_tokens": 4})
        results = client.get("/v1/projects/nightly/evaluations").json()["results"]
    profile = json.loads((tmp_path / "home" / "runs" / run["run_id"] / "model_profile.json").read_text())
    cpus = os.cpu_count() or 1
    threads = max(1, cpus // 2)
    assert cpus == 1 or profile["speed"]["cpu_threads"] == (
        f"auto -> {threads} ({threads} of {cpus} CPUs: OMP_NUM_THREADS, the daemon's share, or the load at start)"
    )
    assert evaluation["status"] == "completed", evaluation.get("error")
    (result,) = [r for r in results if r["result_id"] == evaluation["result_id"]]
    assert result["details"]["cpu_threads"] == threads


def evaluate_to_its_end(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    started = client.post("/v1/projects/nightly/evaluations", json=body)
    assert started.status_code == 202, started.text
    evaluation_id = started.json()["evaluation_id"]
    deadline = time.monotonic() + 100
    while (job := client.get(f"/v1/projects/nightly/evaluations/{evaluation_id}").json())["status"] not in TERMINAL:
        assert time.monotonic() < deadline, job
        time.sleep(0.3)
    return dict(job)


def test_a_run_shorter_than_its_logging_interval_still_completes(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    # No progress line comes before `completed`: the supervisor must still pass through running.
    request = training_request(tiny, sft_data(tmp_path), max_steps=2, logging_steps=50, save_steps=100)
    with trainer_daemon.client() as client:
        run = run_to_its_end(client, request)
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]


def test_a_run_logging_every_step_reaches_the_ledger_in_batches_of_about_a_second_losing_no_step(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    # One ledger write per logged step would cost the daemon CPU on the trainer's own cores (issue 13's overhead
    # target); the supervisor gathers the steps logged within METRICS_EVERY_S into one write.
    request = training_request(tiny, sft_data(tmp_path), max_steps=30, logging_steps=1, save_steps=100)
    with trainer_daemon.client() as client:
        run = run_to_its_end(client, request)
        events = client.get("/v1/projects/nightly/events", params={"limit": 1000}).json()["events"]
    run_id = run["run_id"]
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
    assert run["metric_summary"]["train.loss"]["count"] == 30
    logged = (trainer_daemon.home / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    span_s = json.loads(logged[-1])["time"] - json.loads(logged[0])["time"]
    writes = [e for e in events if e["run_id"] == run_id and e["event_type"] == "metrics.ingested"]
    # The first step at once, then one batch a second, plus what the checkpoint, the end and the exit gather.
    assert 1 <= len(writes) <= span_s / METRICS_EVERY_S + 4 < 30, (len(writes), span_s)


def test_a_run_whose_loss_is_nan_is_flagged_as_it_trains(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    # A diverged model: every loss is NaN. transformers' default logged each as 0.0, and nothing was flagged.
    diverged = tmp_path / "diverged"
    shutil.copytree(tiny, diverged)
    model = AutoModelForCausalLM.from_pretrained(diverged)
    with torch.no_grad():
        model.get_output_embeddings().weight.fill_(float("nan"))
    model.save_pretrained(diverged)
    # Another model than tiny-v1 (its weights and config.json differ): a version of its own.
    diverged_version = tracking_context(model_version_id="tiny-diverged", model_source_uri="bashgym://models/diverged")
    request = training_request(
        diverged, sft_data(tmp_path), max_steps=3, logging_steps=1, save_steps=100, tracking_context=diverged_version
    )
    with trainer_daemon.client() as client:
        run = run_to_its_end(client, request)
        events = client.get("/v1/projects/nightly/events", params={"limit": 1000}).json()["events"]
    flagged = [e["payload"] for e in events if e["run_id"] == run["run_id"] and e["event_type"] == "run.anomaly"]
    assert [(a["kind"], a["step"], a["detail"]) for a in flagged] == [
        ("non_finite_loss", 1, "train.loss is nan at step 1.")
    ]
    logged = (trainer_daemon.home / "runs" / run["run_id"] / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["metrics"]["train.loss"] for line in logged if "train.loss" in line]
    assert len(losses) == 3 and all(math.isnan(loss) for loss in losses), losses


def test_a_dataset_breaking_its_contract_is_refused_before_launch(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "no answer"}]}\n')
    with trainer_daemon.client() as client:
        refused = client.post("/v1/training/start", json=training_request(tiny, bad))
    assert refused.status_code == 422
    assert "bad.jsonl:1" in refused.json()["error"]["message"]


def test_a_run_that_fails_in_training_is_failed_with_its_error(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    broken_model = tmp_path / "not-a-model"  # a model directory by its shape, whose architecture nothing knows
    broken_model.mkdir()
    (broken_model / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with trainer_daemon.client() as client:
        info = client.post(
            "/v1/training/start",
            json=training_request(tiny, sft_data(tmp_path), base_model=str(broken_model), tracking_context=None),
        ).json()
        assert info["context_status"] == "unassigned"
        run = wait_for(client, "unassigned", info["run_id"], TERMINAL)
    assert run["status"] == "failed"
    assert run["attempts"][-1]["error_summary"]


def test_pause_resume_and_stop_through_the_cli(trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path) -> None:
    env = trainer_daemon.env()
    with trainer_daemon.client() as client:
        info = client.post(
            "/v1/training/start",
            json=training_request(tiny, sft_data(tmp_path, 64), max_steps=20_000, save_steps=1000, learning_rate=1e-4),
        ).json()
        wait_for(client, "nightly", info["run_id"], {"running"})
        paused = cli(env, "training", "pause", info["run_id"], "--project", "nightly", "--json")
        assert paused.code == 0, paused.stderr
        run = wait_for(client, "nightly", info["run_id"], {"paused"})
        assert any(e for e in run["attempts"] if e["status"] == "paused")
        assert list((trainer_daemon.home / "runs" / info["run_id"]).glob("checkpoint-*"))
        assert cli(env, "training", "resume", info["run_id"], "--project", "nightly").code == 0
        wait_for(client, "nightly", info["run_id"], {"running"})
        stopped = cli(env, "training", "stop", info["run_id"], "--project", "nightly", "--yes", "--json")
        assert stopped.code == 0, stopped.stderr
        run = wait_for(client, "nightly", info["run_id"], TERMINAL)
    assert run["status"] == "cancelled"
    log = cli(env, "training", "log", info["run_id"], "--project", "nightly", "--tail", "5", "--json")
    assert log.code == 0 and log.json()["lines"]


def test_training_start_wait_follows_the_run_from_its_launch_to_its_end(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    data = sft_data(tmp_path)
    config = tmp_path / "method.json"
    config.write_text(json.dumps({"max_steps": 4, "batch_size": 4, "save_steps": 2, "max_seq_length": 128}))
    started = cli(
        trainer_daemon.env(),
        "training", "start", "--strategy", "sft", "--model", str(tiny), "--dataset-path", str(data),
        "--config", str(config), "--wait",
    )  # fmt: skip
    assert started.code == 0, started.stderr
    assert re.search(r"^Run run-\S+\s+completed$", started.stdout, re.MULTILINE), started.stdout  # the run's report
    # Its progress, read from the run's own events onwards: the launch's answer says where they begin.
    assert "run.started" in started.stderr and "run.completed" in started.stderr
    as_json = cli(
        trainer_daemon.env(),
        "training", "start", "--strategy", "sft", "--model", str(tiny), "--dataset-path", str(data),
        "--config", str(config), "--wait", "--json",
    )  # fmt: skip
    assert as_json.code == 0, as_json.stderr
    answer = as_json.json()
    assert answer["status"] == "completed" and answer["run"]["status"] == "completed"
    with trainer_daemon.client() as client:
        first = client.get("/v1/projects/unassigned/events", params={"limit": 1, "type": "run.registered"}).json()
    assert answer["cursor"] > first["events"][0]["cursor"], "the second run's events begin after the first's"


def test_a_run_stopped_while_queued_or_paused_gives_back_its_budget_reservation(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    context = tracking_context(project_id="stopped", project_display_name="Stopped")
    body = training_request(
        tiny, sft_data(tmp_path, 64), tracking_context=context, max_steps=20_000, save_steps=1000, learning_rate=1e-4
    )
    with trainer_daemon.client() as client:
        client.post("/v1/projects", json={"project_id": "stopped", "name": "Stopped"})
        holder = client.post("/v1/training/start", json=body).json()["run_id"]
        wait_for(client, "stopped", holder, {"running"})
        waiting = client.post("/v1/training/start", json={**body, "seed": 7}).json()["run_id"]  # one slot: queued
        assert client.get(f"/v1/projects/stopped/runs/{waiting}").json()["status"] == "queued"
        assert client.get("/v1/projects/stopped/budget").json()["reserved"]["runs"] == 2
        stopped = client.post(f"/v1/projects/stopped/runs/{waiting}/stop")
        assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled", stopped.text
        assert client.post(f"/v1/projects/stopped/runs/{holder}/pause").status_code == 202
        wait_for(client, "stopped", holder, {"paused"})
        assert client.post(f"/v1/projects/stopped/runs/{holder}/stop").json()["status"] == "cancelled"
        runs = [client.get(f"/v1/projects/stopped/runs/{r}").json() for r in (waiting, holder)]
        budget = client.get("/v1/projects/stopped/budget").json()
    reasons = [run["attempts"][-1]["status_reason"] for run in runs]
    # Each end says who stopped it and how (admin's token, through the API).
    assert reasons == [
        "stopped before it ran, by admin (training stop)",
        "stopped while paused, by admin (training stop)",
    ], reasons
    assert budget["reserved"]["runs"] == 0 and budget["settled"]["runs"] == 2, budget


def test_a_request_holding_a_credential_is_refused_before_anything_keeps_it(tiny: Path, tmp_path: Path) -> None:
    # A run keeps its settings as sent (request.json, effective_config.json): a token in a model path or a
    # repository name would be kept too, so the daemon takes none (tokens come from its environment).
    fake_token = "hf_" + "Kx7" * 12  # shaped like a Hugging Face token; never real
    home = tmp_path / "home"
    model = Path(f"{SUITE_ROOT}/models/{fake_token}/tiny")
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    with running_daemon(home, env={"HF_TOKEN": fake_token}) as daemon, daemon.client() as client:
        for body in (
            training_request(tiny, sft_data(tmp_path), tracking_context=None, base_model=str(model)),
            training_request(
                tiny, sft_data(tmp_path), tracking_context=None, auto_push_hf=True, hf_repo_name=f"team/{fake_token}"
            ),
        ):
            for route in ("/v1/training/plan", "/v1/training/start"):
                refused = client.post(route, json=body)
                assert refused.status_code == 422, refused.text
                assert "credential-shaped" in refused.text and fake_token not in refused.text
        listed = client.get("/v1/projects/unassigned/runs")
        daemon.stop()
    assert listed.status_code == 404 or listed.json() == [], listed.text  # no run was registered
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    for path in home.glob("ledger.sqlite3*"):
        assert fake_token.encode() not in path.read_bytes()
    assert fake_token not in (home / "daemon.log").read_text()


def test_an_ended_runs_logs_and_state_lose_what_a_trainer_printed(tmp_path: Path) -> None:
    # What a trainer meets and prints (a library's message, a traceback) is scrubbed once the run has ended.
    fake_token = "ghp_" + "Qz4" * 12
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "training.log").write_text(f"loading /models/{fake_token}/tiny\rOSError: bad config\n")
    (run_dir / "rank-1.log").write_text(f"rank 1: {fake_token}\n")
    (run_dir / "run_state.json").write_text(json.dumps({"status": "failed", "error": f"at /m/{fake_token}"}))
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "metrics": {"train.loss": 1.0}}\n')
    scrub_logs(run_dir)
    for name in ("training.log", "rank-1.log", "run_state.json"):
        text = (run_dir / name).read_text()
        assert fake_token not in text and "[redacted]" in text, name
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "failed"


def test_a_launch_over_budget_is_refused_until_amended(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    env = trainer_daemon.env()
    context = tracking_context(project_id="budgeted", project_display_name="Budgeted")
    with trainer_daemon.client() as admin:
        admin.post("/v1/projects", json={"project_id": "budgeted", "name": "Budgeted"})
    assert (
        cli(env, "budget", "set", "--project", "budgeted", "--runs", "1", "--gpu-hours", "2", "--reason", "pilot").code
        == 0
    )
    researcher = cli(env, "auth", "issue", "--actor", "rita", "--profile", "researcher", "--json").json()["token"]
    body = training_request(tiny, sft_data(tmp_path), tracking_context=context, max_steps=1)
    with httpx.Client(
        base_url=trainer_daemon.url, headers={"Authorization": f"Bearer {researcher}"}, timeout=60
    ) as rita:
        first = rita.post("/v1/training/start", json=body)
        assert first.status_code == 201, first.text
        second = rita.post("/v1/training/start", json={**body, "seed": 7})
        assert second.status_code == 422
        error = second.json()["error"]
        assert error["code"] == "budget_exceeded" and error["details"]["remaining"]["runs"] == 0
        assert cli(env, "budget", "amend", "--project", "budgeted", "--runs", "1", "--reason", "more").code == 0
        third = rita.post("/v1/training/start", json={**body, "seed": 8})
        assert third.status_code == 201, third.text
        for started in (first.json(), third.json()):
            wait_for(rita, "budgeted", started["run_id"], TERMINAL)
    summary = cli(env, "budget", "show", "--project", "budgeted", "--json").json()
    assert summary["settled"]["runs"] == 2 and summary["reserved"]["runs"] == 0


def test_an_official_run_must_train_on_the_data_its_context_names(
    trainer_daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    body = training_request(tiny, sft_data(tmp_path))
    body["tracking_context"] = {**body["tracking_context"], "dataset_content_digest": "0" * 64}
    with trainer_daemon.client() as client:
        refused = client.post("/v1/training/start", json=body)
    assert refused.status_code == 422
    assert "must train on the exact data it names" in refused.json()["error"]["message"]
