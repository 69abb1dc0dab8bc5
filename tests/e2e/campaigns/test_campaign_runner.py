"""The campaign runner end to end on CPU: the baseline is evaluated, candidates train, are evaluated,
compared with the incumbent and decided by the rules; a daemon killed mid-training resumes the same
stage; a spent budget waits for an amendment; the campaign exhausts on max_iterations."""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, cli, running_daemon

WHERE = ["bash-q4", "--project", "nightly"]


def wait_until(daemon: RunningDaemon, done: Any, timeout_s: float = 400) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    with daemon.client() as client:
        while time.monotonic() < deadline:
            campaign = client.get("/v1/projects/nightly/campaigns/bash-q4").json()
            campaign["iterations"] = client.get("/v1/projects/nightly/campaigns/bash-q4/iterations").json()[
                "iterations"
            ]
            if done(campaign):
                return dict(campaign)
            time.sleep(0.5)
    raise AssertionError(f"the campaign never got there; last {campaign['status']}: {campaign['iterations']}")


@dataclass
class Setup:
    """What a campaign runs on: the starting model, its training data, the recipe and the hypotheses."""

    model: Path
    traces: Path
    base_recipe: dict[str, Any]
    hypotheses: list[dict[str, Any]]
    evaluation: dict[str, Any]


def start_campaign(env: dict[str, str], daemon: RunningDaemon, tmp_path: Path, setup: Setup) -> None:
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
    with daemon.client() as client:
        model = {"model_version_id": "tiny-v1", "model_id": "tiny", "source_uri": f"file://{setup.model}"}
        assert client.post("/v1/projects/nightly/model-versions", json=model).status_code == 201
    registered = cli(
        env, "dataset", "register", "--project", "nightly", "--dataset", "traces", "--version", "traces-v1",
        "--file", str(setup.traces),
    )  # fmt: skip
    assert registered.code == 0, registered.stderr
    spec = {
        "campaign_id": "bash-q4",
        "title": "Better bash commands",
        "objective": "Raise pass@1 on the terminal-task suite.",
        "suite_id": "bash-tasks-v1",
        "starting_model_version_id": "tiny-v1",
        "dataset_version_ids": ["traces-v1"],
        "base_recipe": setup.base_recipe,
        "budget": {"runs": 1},
        "stop_rules": {"max_iterations": 2, "min_improvement": 0.05},
        "evaluation": setup.evaluation,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "queue.json").write_text(json.dumps(setup.hypotheses))
    assert cli(env, "campaign", "create", "--project", "nightly", "--spec", str(tmp_path / "spec.json")).code == 0
    assert cli(env, "campaign", "queue", *WHERE, "--hypotheses", str(tmp_path / "queue.json")).code == 0
    assert cli(env, "campaign", "validate", *WHERE).code == 0
    assert cli(env, "campaign", "start", *WHERE).code == 0


@dataclass
class Outcome:
    final: dict[str, Any]
    events: list[dict[str, Any]]
    results: list[dict[str, Any]]
    run: dict[str, Any]  # the first candidate's run
    report: Path


def through_a_kill_and_a_spent_budget(tmp_path: Path, setup: Setup, timeout_s: float = 400) -> Outcome:
    """Start the campaign, SIGKILL the daemon while the first candidate trains, restart, amend the spent
    budget, and follow it to its end; then draw its report."""
    home = tmp_path / "home"
    with running_daemon(home) as first:
        start_campaign(first.env(), first, tmp_path, setup)
        training = wait_until(first, lambda c: any(i["stage"] == "training" for i in c["iterations"]), timeout_s)
        first.proc.send_signal(signal.SIGKILL)  # mid-training: the trainer outlives the daemon
        first.proc.wait(timeout=10)
    candidate_run = next(i["run_id"] for i in training["iterations"] if i["stage"] == "training")

    stopped = {"awaiting_authority", "exhausted", "failed"}
    with running_daemon(home) as second:
        env = second.env()
        waiting = wait_until(second, lambda c: c["status"] in stopped, timeout_s)
        assert waiting["status"] == "awaiting_authority", waiting["status_reason"]
        assert waiting["status_reason"].startswith("budget_overrun")
        amended = cli(env, "budget", "amend", "--project", "nightly", "--campaign", "bash-q4", "--runs", "1",
                      "--reason", "one more candidate")  # fmt: skip
        assert amended.code == 0, amended.stderr
        # The amendment alone resumes it: the runner sees the budget has room again.
        resumed = wait_until(second, lambda c: c["status"] != "awaiting_authority", timeout_s)
        assert resumed["status_reason"].startswith("budget amended"), resumed["status_reason"]
        final = wait_until(second, lambda c: c["status"] in stopped, timeout_s)
        assert final["status"] == "exhausted" and final["status_reason"].startswith("max_iterations")
        with second.client() as client:
            events = client.get("/v1/projects/nightly/events", params={"limit": 1000}).json()["events"]
            results = client.get("/v1/projects/nightly/evaluations").json()["results"]
            run = client.get(f"/v1/projects/nightly/runs/{candidate_run}").json()
        assert cli(env, "ledger", "verify").code == 0
        report = tmp_path / "report"
        made = cli(env, "campaign", "report", *WHERE, "--out", str(report), "--json")
        assert made.code == 0, made.stderr
    assert final["iterations"][1]["run_id"] == candidate_run and run["status"] == "completed"
    assert run["context_status"] == "verified"
    return Outcome(final, events, results, run, report)


def assert_no_stage_repeated(outcome: Outcome) -> None:
    baseline, first_candidate, _ = outcome.final["iterations"]
    stages = [
        (e["payload"]["iteration_id"], e["payload"]["stage"])
        for e in outcome.events
        if e["event_type"] == "campaign.stage"
    ]
    assert stages.count((baseline["iteration_id"], "decided")) == 1, "the baseline was not evaluated again"
    assert stages.count((first_candidate["iteration_id"], "training")) == 1, "the training was not launched twice"
    assert len([r for r in outcome.results if r["model_version_id"] == "tiny-v1"]) == 1
    moves = [e["payload"]["status"] for e in outcome.events if e["event_type"] == "campaign.transitioned"]
    assert moves == ["ready", "active", "awaiting_authority", "active", "exhausted"]


@pytest.mark.slow  # minutes of training; the crash matrix keeps a campaign killed mid-stage in the default suite
@pytest.mark.timeout(900)
def test_a_campaign_survives_a_kill_waits_for_budget_and_exhausts_by_its_rules(tmp_path: Path) -> None:
    setup = Setup(
        model=build_tiny(tmp_path / "tiny"),
        traces=sft_data(tmp_path, rows=16),
        base_recipe={
            "strategy": "sft", "max_steps": 40, "batch_size": 4, "gradient_accumulation_steps": 1,
            "learning_rate": 5e-3, "save_steps": 100, "max_seq_length": 128,
        },
        hypotheses=[
            {"primary_variable": "learning_rate", "value": 1e-3, "rationale": "gentler steps"},
            {"primary_variable": "lora_rank", "value": 8, "rationale": "a smaller adapter"},
        ],
        evaluation={"limit_tasks": 11, "temperature": 0.0},
    )  # fmt: skip
    outcome = through_a_kill_and_a_spent_budget(tmp_path, setup)
    baseline, first_candidate, second_candidate = outcome.final["iterations"]
    assert baseline["decision"] == "baseline" and outcome.final["incumbent_iteration_id"] == baseline["iteration_id"]
    for candidate in (first_candidate, second_candidate):
        assert candidate["stage"] == "decided" and candidate["decision"] == "discard", candidate
        assert candidate["reason_code"] in {"no_improvement", "below_min_improvement", "ci_includes_zero"}
    assert outcome.run["config"]["learning_rate"] == 1e-3
    assert_no_stage_repeated(outcome)
    assert "Engineering evidence only" not in (outcome.report / "report.md").read_text()


@pytest.mark.slow  # about 55 s of campaign stages; the authority rules themselves have unit tests
@pytest.mark.timeout(600)
def test_a_step_the_owner_may_not_take_waits_for_a_holder_to_lend_the_capability(tmp_path: Path) -> None:
    with running_daemon(tmp_path / "home") as daemon:
        env = daemon.env()
        tiny = build_tiny(tmp_path / "tiny")
        assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
        data = sft_data(tmp_path, rows=8)
        registered = cli(env, "dataset", "register", "--project", "nightly", "--dataset", "traces", "--version",
                         "traces-v1", "--file", str(data))  # fmt: skip
        assert registered.code == 0, registered.stderr
        with daemon.client() as admin:
            model = {"model_version_id": "tiny-v1", "model_id": "tiny", "source_uri": f"file://{tiny}"}
            assert admin.post("/v1/projects/nightly/model-versions", json=model).status_code == 201
            # Rita runs campaigns but may not launch training herself.
            caps = ["ledger.read", "ledger.write", "eval.run", "campaign.create", "campaign.control"]
            issued = admin.post(
                "/v1/auth/tokens",
                json={"actor_id": "rita", "capabilities": caps, "project_id": "nightly", "workspace_id": "default"},
            )
            assert issued.status_code == 201, issued.text
        spec = {
            "campaign_id": "bash-q4", "title": "Rita's loop", "objective": "Raise pass@1.",
            "suite_id": "bash-tasks-v1", "starting_model_version_id": "tiny-v1", "dataset_version_ids": ["traces-v1"],
            "base_recipe": {"strategy": "sft", "max_steps": 2, "batch_size": 2, "max_seq_length": 96},
            "budget": {"runs": 2}, "stop_rules": {"max_iterations": 1},
            "evaluation": {"limit_tasks": 2, "temperature": 0.0},
        }  # fmt: skip
        base = "/v1/projects/nightly/campaigns/bash-q4"
        with daemon.client(issued.json()["token"]) as rita:
            assert rita.post("/v1/projects/nightly/campaigns", json=spec).status_code == 201
            change = {"primary_variable": "learning_rate", "value": 1e-3, "rationale": "gentler steps"}
            assert rita.post(f"{base}/propose", json=change).status_code == 201
            checked = rita.post(f"{base}/validate", json={"expected_version": 1}).json()
            assert checked["ok"], checked["findings"]
            assert rita.post(f"{base}/start", json={"expected_version": 2}).is_success
            waiting = wait_until(daemon, lambda c: c["status"] != "active", timeout_s=300)
            assert waiting["status"] == "awaiting_authority", waiting["status_reason"]
            candidate = waiting["iterations"][1]
            assert waiting["status_reason"].startswith(
                f"authority_required: training.launch for {candidate['iteration_id']}"
            )
            assert "rita lacks it" in waiting["status_reason"] and candidate["stage"] == "queued"
            refused = rita.post(f"{base}/resume", json={"expected_version": waiting["version"]})
            assert refused.status_code == 403, refused.text
            assert "waits for training.launch" in refused.json()["error"]["message"]
        with daemon.client() as admin:
            lent = admin.post(f"{base}/resume", json={"expected_version": waiting["version"]})
            assert lent.is_success, lent.text
            final = wait_until(daemon, lambda c: c["status"] not in {"active"}, timeout_s=300)
            events = admin.get("/v1/projects/nightly/events", params={"limit": 1000}).json()["events"]
    assert final["status"] == "exhausted", final["status_reason"]
    assert final["iterations"][1]["run_id"], "the lent capability launched the candidate"
    moves = [e["payload"] for e in events if e["event_type"] == "campaign.transitioned"]
    assert [m["status"] for m in moves] == ["ready", "active", "awaiting_authority", "active", "exhausted"]
    assert moves[3]["approved_capability"] == "training.launch"
    assert moves[3]["approved_iteration_id"] == candidate["iteration_id"]
