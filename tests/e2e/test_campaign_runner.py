"""The campaign runner end to end on CPU: the baseline is evaluated, a candidate trains, is evaluated,
compared against the incumbent and decided by the rules, and the campaign exhausts on max_iterations."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.factories import sft_data
from tests.helpers import RunningDaemon, cli


def wait_campaign(daemon: RunningDaemon, statuses: set[str], timeout_s: float = 400) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    with daemon.client() as client:
        while time.monotonic() < deadline:
            campaign = client.get("/v1/projects/nightly/campaigns/bash-q4").json()
            if campaign["status"] in statuses:
                return dict(campaign)
            time.sleep(1.0)
    raise AssertionError(f"campaign never reached {statuses}; last {campaign['status']}")


@pytest.mark.timeout(600)
def test_baseline_then_a_candidate_decided_by_the_rules_until_max_iterations(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = daemon.env()
    tiny = build_tiny(tmp_path / "tiny")
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
    with daemon.client() as client:
        model = {"model_version_id": "tiny-v1", "model_id": "tiny", "source_uri": f"file://{tiny}"}
        assert client.post("/v1/projects/nightly/model-versions", json=model).status_code == 201
    data = sft_data(tmp_path, rows=16)
    registered = cli(
        env, "dataset", "register", "--project", "nightly", "--dataset", "traces", "--version", "traces-v1",
        "--file", str(data),
    )  # fmt: skip
    assert registered.code == 0, registered.stderr
    spec = {
        "campaign_id": "bash-q4",
        "title": "Better bash commands",
        "objective": "Raise pass@1 on the terminal-task suite.",
        "suite_id": "bash-tasks-v1",
        "starting_model_version_id": "tiny-v1",
        "dataset_version_ids": ["traces-v1"],
        "base_recipe": {
            "strategy": "sft", "max_steps": 4, "batch_size": 4, "gradient_accumulation_steps": 1,
            "learning_rate": 5e-3, "save_steps": 2, "max_seq_length": 128,
        },
        "budget": {"runs": 3},
        "stop_rules": {"max_iterations": 1, "min_improvement": 0.05},
        "evaluation": {"limit_tasks": 22, "temperature": 0.0},
    }  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    change = tmp_path / "change.json"
    change.write_text(json.dumps({"primary_variable": "learning_rate", "value": 1e-3, "rationale": "gentler"}))
    where = ["bash-q4", "--project", "nightly"]
    assert cli(env, "campaign", "create", "--project", "nightly", "--spec", str(tmp_path / "spec.json")).code == 0
    assert cli(env, "campaign", "propose", *where, "--recipe-change", str(change)).code == 0
    assert cli(env, "campaign", "validate", *where).code == 0
    assert cli(env, "campaign", "start", *where).code == 0

    campaign = wait_campaign(daemon, {"exhausted", "failed", "awaiting_authority"})
    assert campaign["status"] == "exhausted", campaign["status_reason"]
    assert campaign["status_reason"].startswith("max_iterations")
    with daemon.client() as client:
        iterations = client.get("/v1/projects/nightly/campaigns/bash-q4/iterations").json()["iterations"]
        baseline, candidate = iterations
        run = client.get(f"/v1/projects/nightly/runs/{candidate['run_id']}").json()
        budget = client.get("/v1/projects/nightly/budget", params={"scope": "campaign-bash-q4"}).json()
    assert (baseline["kind"], baseline["decision"], baseline["stage"]) == ("baseline", "baseline", "decided")
    assert baseline["result_id"] and campaign["incumbent_iteration_id"] == baseline["iteration_id"]
    assert candidate["stage"] == "decided" and candidate["decision"] == "discard"
    assert candidate["reason_code"] in {"no_improvement", "below_min_improvement", "ci_includes_zero"}
    assert candidate["comparison_id"] and candidate["result_id"]
    assert run["status"] == "completed" and run["context_status"] == "verified"
    assert run["config"]["learning_rate"] == 1e-3, "the candidate's one change reached training"
    assert budget["scope"] == "campaign-bash-q4"
    assert budget["limit"]["runs"] == 3 and budget["settled"]["runs"] == 1 and budget["reserved"]["runs"] == 0
