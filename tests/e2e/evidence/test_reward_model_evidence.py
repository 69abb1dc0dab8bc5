"""A reward model is judged on what it rewards and on what a policy it rewarded shows, measured by the daemon.

Issue 51, item 11: `length_bias` was judged one way only: a reward model that prefers the shorter answer passed.
Item 7: a reward model shipped on any downstream comparison, a partial suite or a delta of 0.0; the downstream
evidence is a whole-suite comparison of a policy it rewarded against that policy's own start, with a CI above zero.
One tiny reward model per module, trained on pairs where the chosen answer is always the shorter one (and the
better command in only half of them, so brevity is all it can learn); it rewards a 2-step GRPO run that starts
from a registered model version. A researcher of the project evaluates, compares and asks the gate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, wait_for_run
from tests.support.reward_models import evaluate, reward_model_request, rewarded_grpo_request
from tests.support.reward_pairs import reward_pairs, write_jsonl

PROJECT = "nightly"
P = f"/v1/projects/{PROJECT}"
POLICY_START = "policy-start"
TERMINAL = {"completed", "failed", "cancelled"}
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("reward-evidence") / "home", PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    """A researcher of the project: evaluates, compares and asks the gate; never promotes."""
    return issue_token(daemon, "rita", "researcher", project=PROJECT)


@pytest.fixture(scope="module")
def brevity_rm(daemon: RunningDaemon, tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The completed reward-model run trained to prefer the shorter answer, and its measured result on held-out
    pairs where the longer answer is the chosen one in half the pairs."""
    tmp = tmp_path_factory.mktemp("brevity")
    train = write_jsonl(tmp / "shorter.jsonl", reward_pairs(seed=3, n=64, preferring="brevity"))
    held_out = write_jsonl(tmp / "heldout.jsonl", reward_pairs(seed=2, n=40))
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=reward_model_request(tiny, train, held_out))
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, PROJECT, started.json()["run_id"], TERMINAL, timeout_s=240)
        assert run["status"] == "completed", run["attempts"][-1]
        job = evaluate(admin, {"run_id": run["run_id"], "dataset_path": str(held_out)})
        results = {r["result_id"]: r for r in admin.get(f"{P}/evaluations").json()["results"]}
    return {"run_id": run["run_id"], "result": results[job["result_id"]]}


@pytest.fixture(scope="module")
def rewarded(
    daemon: RunningDaemon, tiny: Path, brevity_rm: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A 2-step GRPO run from model version policy-start whose rewards are the reward model's scores."""
    with daemon.client() as admin:
        version = admin.post(
            f"{P}/runs/{brevity_rm['run_id']}/model-version", json={"model_version_id": "rm-v1", "model_id": "tiny-rm"}
        )
        assert version.status_code == 201, version.text
        grpo = rewarded_grpo_request(
            tiny,
            tmp_path_factory.mktemp("grpo"),
            model_version_id=POLICY_START,
            model_source_uri=f"file://{tiny}",
            model_config_digest=hashlib.sha256((tiny / "config.json").read_bytes()).hexdigest(),
        )
        grpo["grpo_reward_model"] = "rm-v1"
        started = admin.post("/v1/training/start", json=grpo)
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, PROJECT, started.json()["run_id"], TERMINAL, timeout_s=240)
    assert run["status"] == "completed", run["attempts"][-1]
    assert run["model_version_id"] == POLICY_START and run["config"]["grpo_reward_model_version_id"] == "rm-v1"
    return str(run["run_id"])


def as_token(daemon: RunningDaemon, token: str) -> dict[str, str]:
    return {**daemon.env(), "BASHGYM_TOKEN": token}


def eval_run(daemon: RunningDaemon, token: str, *args: str) -> str:
    """A result measured by the daemon's evaluator, asked through the CLI: its id."""
    args = ("eval", "run", "--project", PROJECT, *args, "--device", "cpu", "--json")
    result = cli(as_token(daemon, token), *args, timeout_s=300)
    assert result.code == 0, result.stdout + result.stderr
    return str(result.json()["result_id"])


def compare(daemon: RunningDaemon, token: str, baseline: str, candidate: str) -> dict[str, Any]:
    args = ("eval", "compare", "--project", PROJECT, "--baseline", baseline, "--candidate", candidate, "--json")
    result = cli(as_token(daemon, token), *args)
    assert result.code == 0, result.stdout + result.stderr
    compared = dict(result.json())
    assert compared["provenance"] == "measured", compared
    return compared


def blocker(daemon: RunningDaemon, token: str, run_id: str, code: str) -> dict[str, str]:
    """The gate's blocker `code`, asked through the API and the CLI (which must say it and exit 7)."""
    with tenant(daemon, token) as api:
        answer = api.get(f"{P}/runs/{run_id}/gate")
    assert answer.status_code == 200, answer.text
    found = {b["code"]: b for b in answer.json()["blockers"]}
    assert code in found, answer.json()["blockers"]
    shown = cli(as_token(daemon, token), "promote", "gate", "--project", PROJECT, "--run", run_id)
    assert shown.code == 7, shown.stdout + shown.stderr
    assert code in shown.stdout and found[code]["message"] in " ".join(shown.stdout.split()), shown.stdout
    return dict(found[code])


def test_a_reward_model_that_prefers_the_shorter_answer_is_blocked_for_length_bias(
    daemon: RunningDaemon, rita: str, brevity_rm: dict[str, Any]
) -> None:
    metrics = brevity_rm["result"]["metrics"]
    # It learned brevity: right where the rejected answer is longer, wrong where the chosen one is.
    assert metrics["longer_chosen_accuracy"] < 0.5 < metrics["longer_rejected_accuracy"], metrics
    found = blocker(daemon, rita, brevity_rm["run_id"], "length_bias")
    assert "Where the chosen answer is the longer one" in found["message"], found
    assert "it rewards brevity, not quality" in found["message"], found
    assert f"{metrics['longer_chosen_accuracy']:.0%}" in found["message"], found


def test_a_rewarded_policy_on_a_partial_suite_or_with_no_gain_over_its_start_is_no_downstream_evidence(
    daemon: RunningDaemon, rita: str, tiny: Path, brevity_rm: dict[str, Any], rewarded: str, tmp_path: Path
) -> None:
    rm_run = brevity_rm["run_id"]
    # A measured, alike comparison with its start, on a partial suite (two tasks of the terminal suite).
    partial = compare(
        daemon,
        rita,
        eval_run(daemon, rita, "--model-version", POLICY_START, "--limit-tasks", "2"),
        eval_run(daemon, rita, "--run", rewarded, "--limit-tasks", "2"),
    )
    found = blocker(daemon, rita, rm_run, "reward_model_downstream_missing")
    assert f"{rewarded} has only comparisons on partial suites" in found["message"], found
    assert f"than its start {POLICY_START} ({partial['comparison_id']})" in found["message"], found
    assert "its start (--model-version START) on a whole suite" in found["next_action"], found

    # A whole suite of its own (held-out rows, every row), compared with its start: the tiny policy gains nothing.
    rows = sft_data(tmp_path, rows=6)
    whole = compare(
        daemon,
        rita,
        eval_run(daemon, rita, "--model-version", POLICY_START, "--dataset-path", str(rows)),
        eval_run(daemon, rita, "--run", rewarded, "--dataset-path", str(rows)),
    )
    assert not (whole["delta"] > 0 and whole["ci_low"] > 0), whole  # no gain: it cannot be downstream evidence
    found = blocker(daemon, rita, rm_run, "reward_model_downstream_missing")
    assert f"{rewarded} was compared with its start {POLICY_START} and showed no gain" in found["message"], found
    assert f"best delta {whole['delta']}, CI [{whole['ci_low']}, {whole['ci_high']}]" in found["message"], found
