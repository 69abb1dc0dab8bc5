"""Like for like: two results compare only when they were evaluated alike, and a split of the suite is a suite of
its own.

A cascade stage evaluated greedily was compared with its predecessor evaluated at temperature 0.7, and the
comparison said `ran_alike: true`, +0.08: the gain was the temperature's. Every setting that changes a score is now
recorded on the result, from the request the daemon wrote; `evaluations/compare` refuses results that differ in any
of them, a comparison recorded anyway is marked unlike, and the gate never counts it. One tiny run, trained once,
is evaluated on four tasks with eight new tokens at most, to stay cheap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, wait_for_run

pytestmark = pytest.mark.timeout(600)
PROJECT = "nightly"
# Four tasks (one from each of four families: the paired bootstrap needs two families at least), eight new tokens.
QUICK = {"limit_tasks": 4, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("home"), PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("base") / "model")


@pytest.fixture(scope="module")
def run_id(daemon: RunningDaemon, base_model: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A completed tiny SFT run of two steps, which every test evaluates."""
    data = sft_data(tmp_path_factory.mktemp("data"))
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=training_request(base_model, data, max_steps=2))
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, PROJECT, started.json()["run_id"], {"completed", "failed"}, timeout_s=240)
    assert run["status"] == "completed", run
    return str(run["run_id"])


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    """A researcher: eval.run and ledger.read, the least a comparison needs."""
    return issue_token(daemon, "rita", "researcher", project=PROJECT)


def evaluate(daemon: RunningDaemon, **body: Any) -> dict[str, Any]:
    """An evaluation started through the API, waited for, and its recorded result."""
    with daemon.client() as admin:
        job = admin.post(f"/v1/projects/{PROJECT}/evaluations", json=body)
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 300
        while (state := admin.get(f"/v1/projects/{PROJECT}/evaluations/{job.json()['evaluation_id']}").json())[
            "status"
        ] in {"queued", "running"}:
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        assert state["status"] == "completed", state
        listing = admin.get(f"/v1/projects/{PROJECT}/evaluations", params={"suite": state["suite_id"]}).json()
    return dict(next(r for r in listing["results"] if r["result_id"] == state["result_id"]))


@pytest.fixture(scope="module")
def greedy(daemon: RunningDaemon, run_id: str) -> dict[str, Any]:
    return evaluate(daemon, run_id=run_id, temperature=0.0, **QUICK)


@pytest.fixture(scope="module")
def warm(daemon: RunningDaemon, run_id: str) -> dict[str, Any]:
    return evaluate(daemon, run_id=run_id, temperature=0.7, **QUICK)


def test_results_evaluated_at_different_temperatures_are_not_compared(
    daemon: RunningDaemon, run_id: str, greedy: dict[str, Any], warm: dict[str, Any], rita: str
) -> None:
    # Both on the same partial suite: only the temperature tells them apart.
    assert greedy["suite_id"] == warm["suite_id"] == "bash-tasks-v1.partial-4-of-88"
    body = {"baseline_result_id": warm["result_id"], "candidate_result_id": greedy["result_id"]}
    with tenant(daemon, rita) as client:
        refused = client.post(f"/v1/projects/{PROJECT}/evaluations/compare", json=body)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert "temperature" in error["message"] and "0.7" in error["message"] and "0.0" in error["message"]
    assert {"max_new_tokens", "limit_tasks", "samples", "seed"}.isdisjoint(error["message"].split()), error
    # The next step is the exact command that evaluates the baseline's model as the candidate was evaluated.
    command = (
        f"bashgym eval run --project {PROJECT} --run {run_id} --samples 1 --temperature 0.0 --max-new-tokens 8 "
        "--seed 0 --limit-tasks 4"
    )
    assert command in error["hint"], error["hint"]
    assert error["details"]["unlike"]["temperature"] == {"baseline": 0.7, "candidate": 0.0}
    # Recorded on each result from the request the daemon wrote.
    assert greedy["details"]["settings"]["temperature"] == 0.0 and warm["details"]["settings"]["temperature"] == 0.7

    env = {**daemon.env(), "BASHGYM_TOKEN": rita}
    args = ("--baseline", greedy["result_id"], "--candidate", warm["result_id"])
    answer = cli(env, "eval", "compare", "--project", PROJECT, *args)
    assert answer.code == 7, answer.stdout + answer.stderr
    assert "temperature" in answer.stderr and "--temperature 0.7" in answer.stderr, answer.stderr


def test_results_evaluated_alike_compare_and_the_comparison_says_so(
    daemon: RunningDaemon, base_model: Path, greedy: dict[str, Any], rita: str
) -> None:
    env = daemon.env()
    registered = cli(
        env, "model", "register", "--project", PROJECT, "--model", "tiny", "--version", "tiny-base",
        "--dir", str(base_model), "--json",
    )  # fmt: skip
    assert registered.code == 0, registered.stderr
    base = evaluate(daemon, model_version_id="tiny-base", temperature=0.0, **QUICK)
    assert base["details"]["settings"] == greedy["details"]["settings"]
    args = ("--baseline", base["result_id"], "--candidate", greedy["result_id"], "--json")
    answer = cli({**env, "BASHGYM_TOKEN": rita}, "eval", "compare", "--project", PROJECT, *args)
    assert answer.code == 0, answer.stdout + answer.stderr
    details = answer.json()["details"]
    assert details["alike"] is True and details["unlike"] == {}, details
    assert details["ran_alike"] is True


@pytest.mark.slow  # a second run; the gate's unit tests keep unlike_comparison in the default suite
def test_a_comparison_of_unlike_results_recorded_anyway_is_marked_and_never_ships(
    daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory, base_model: Path
) -> None:
    """Held-out rows make a whole suite of their own (a partial suite never counts, alike or not): the run evaluated
    on them with 4 and with 8 new tokens, and a comparison of the two typed in with a gain, claiming alike."""
    tmp = tmp_path_factory.mktemp("gate")
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=training_request(base_model, sft_data(tmp), max_steps=2))
        assert started.status_code == 201, started.text
        judged = wait_for_run(admin, PROJECT, started.json()["run_id"], {"completed", "failed"}, timeout_s=240)
    rows = str(sft_data(tmp_path_factory.mktemp("heldout"), rows=3))
    short = evaluate(daemon, run_id=judged["run_id"], dataset_path=rows, max_new_tokens=4)
    long = evaluate(daemon, run_id=judged["run_id"], dataset_path=rows, max_new_tokens=8)
    assert short["suite_id"] == long["suite_id"] and short["suite_id"].startswith("heldout-generation-")

    importer = issue_token(daemon, "ivy", "viewer", project=PROJECT, capabilities=("evidence.import",))
    typed = {
        "baseline_result_id": short["result_id"],
        "candidate_result_id": long["result_id"],
        "primary_metric": "exact_match",
        "delta": 0.2,
        "ci_low": 0.1,
        "ci_high": 0.3,
        "details": {"alike": True, "unlike": {}, "ran_alike": True},
    }
    with tenant(daemon, importer) as client:
        recorded = client.post(f"/v1/projects/{PROJECT}/comparisons", json=typed)
    assert recorded.status_code == 201, recorded.text
    details = recorded.json()["record"]["details"]
    assert details["alike"] is False, "the daemon marks it from the results, whatever the caller claimed"
    assert details["unlike"] == {"max_new_tokens": {"baseline": 4, "candidate": 8}}

    gate = cli(daemon.env(), "promote", "gate", "--project", PROJECT, "--run", judged["run_id"], "--json")
    assert gate.code == 7, gate.stdout + gate.stderr
    blockers = {b["code"]: b for b in gate.json()["blockers"]}
    unlike = blockers.get("unlike_comparison")
    assert unlike, f"an unlike comparison was counted: {sorted(blockers)}"
    assert "max_new_tokens" in unlike["message"] and "4" in unlike["message"] and "8" in unlike["message"]
    assert "--max-new-tokens 8" in unlike["next_action"], unlike
    assert "no_improvement" not in blockers, "the typed-in gain is not weighed at all"


@pytest.mark.slow  # 24 tasks evaluated; the unit tests of the gate keep partial_suite_only in the default suite
def test_a_holdout_split_is_a_suite_of_its_own_and_never_the_whole_suites_evidence(
    daemon: RunningDaemon, run_id: str
) -> None:
    env = daemon.env()
    answer = cli(
        env, "eval", "run", "--project", PROJECT, "--run", run_id, "--split", "holdout", "--json", timeout_s=600
    )
    assert answer.code == 0, answer.stdout + answer.stderr
    result = answer.json()
    assert result["suite_id"] == "bash-tasks-v1.holdout", result["suite_id"]
    partial = result["details"]["partial"]
    assert partial == {"of_suite": "bash-tasks-v1", "split": "holdout", "tasks": 24, "of_tasks": 24}
    assert result["details"]["settings"]["split"] == "holdout"
    with daemon.client() as admin:
        listing = admin.get(f"/v1/projects/{PROJECT}/evaluations").json()
    kinds = {s["suite_id"]: s["kind"] for s in listing["suites"]}
    assert kinds["bash-tasks-v1.holdout"] == "terminal_tasks_partial"
    # The run's terminal evaluations are on four tasks (other tests) and on the holdout split: none is whole.
    gate = cli(env, "promote", "gate", "--project", PROJECT, "--run", run_id, "--json")
    assert gate.code == 7, gate.stdout + gate.stderr
    blockers = {b["code"]: b for b in gate.json()["blockers"]}
    assert "partial_suite_only" in blockers, sorted(blockers)
    assert "bash-tasks-v1.holdout" in blockers["partial_suite_only"]["message"]
    assert "--split holdout" in blockers["partial_suite_only"]["next_action"]
