"""A raw ledger write needs the capability of the action it records.

Attacks of issue 50, finding 6: with `ledger.write` a researcher pointed `champion` at any version, recorded a
promotion decision, evaluation results and comparisons, marked a colleague's run failed (a running one's trainer kept
running and holding the slot), and lifted a spent budget with `release` or negative `settle` entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, suite, training_request
from tests.support.helpers import RunningDaemon, running_daemon, wait_for_run

P = "/v1/projects/nightly"
TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("raw-writes") / "home") as running:
        yield running


@pytest.fixture(scope="module")
def live_run(daemon: RunningDaemon, tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A colleague's run (the admin's) that trained and is paused: the daemon still owns it (a resume goes on from
    its checkpoint), and no trainer takes a core from the other tests meanwhile."""
    data = sft_data(tmp_path_factory.mktemp("data"))
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=training_request(tiny, data, max_steps=5000, save_steps=5000))
        assert started.status_code == 201, started.text
        run_id = str(started.json()["run_id"])
        assert wait_for_run(admin, "nightly", run_id, {"running", *TERMINAL}, timeout_s=120)["status"] == "running"
        assert admin.post(f"{P}/runs/{run_id}/pause").status_code == 202
        assert wait_for_run(admin, "nightly", run_id, {"paused", *TERMINAL})["status"] == "paused"
        yield run_id
        admin.post(f"{P}/runs/{run_id}/stop")
        wait_for_run(admin, "nightly", run_id, TERMINAL)


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon, live_run: str) -> str:
    """A researcher of the run's project: ledger.write there, and nothing of what the records below record."""
    return issue_token(daemon, "rita", "researcher", project="nightly")


@pytest.fixture(scope="module")
def lee(daemon: RunningDaemon, live_run: str) -> str:
    """A lead of the project: training.stop, promotion.decide and budget.amend, but no override."""
    return issue_token(daemon, "lee", "lead", project="nightly")


def _recorded_by(daemon: RunningDaemon, actor: str) -> list[dict[str, Any]]:
    """Every event `actor` caused (the live run's trainer records its own meanwhile, so the head moves)."""
    with daemon.client() as admin:
        return list(admin.get("/v1/auth/audit", params={"actor": actor}).json())


def _refused(daemon: RunningDaemon, token: str, path: str, body: dict[str, Any], status: int, names: str) -> None:
    with tenant(daemon, token) as caller:
        actor = caller.get("/v1/auth/whoami").json()["actor_id"]
        before = _recorded_by(daemon, actor)
        answer = caller.post(f"{P}/{path}", json=body)
    assert answer.status_code == status, answer.text
    assert names in answer.json()["error"]["message"]
    assert _recorded_by(daemon, actor) == before, "a refused record leaves the ledger as it was"


def test_a_researcher_cannot_move_an_alias_or_record_a_decision(daemon: RunningDaemon, rita: str, lee: str) -> None:
    champion = {"alias": "champion", "model_version_id": "tiny-v1"}
    _refused(daemon, rita, "aliases", champion, 403, "promotion.decide")
    _refused(daemon, lee, "aliases", champion, 403, "promotion.override")  # the gate is not asked here
    decision = {"decision_type": "promotion", "outcome": "promote", "rationale": "looks good"}
    _refused(daemon, rita, "decisions", decision, 403, "promotion.decide")
    with daemon.client() as admin:
        assert "champion" not in str(admin.get(f"{P}/context").json().get("aliases", ""))


def test_a_researcher_cannot_type_in_evaluation_results_or_comparisons(daemon: RunningDaemon, rita: str) -> None:
    with daemon.client() as admin:
        assert admin.post(f"{P}/eval-suites", json=suite("typed")).status_code in {200, 201}
    result = {"suite_id": "typed", "metrics": {"pass_at_1": 0.9}, "details": {"holdout_gate": "passed"}}
    _refused(daemon, rita, "eval-results", result, 403, "evidence.import")
    comparison = {"baseline_result_id": "a", "candidate_result_id": "b", "primary_metric": "pass_at_1"}
    _refused(daemon, rita, "comparisons", comparison, 403, "evidence.import")


def test_a_colleagues_run_cannot_be_marked_failed(daemon: RunningDaemon, live_run: str, rita: str, lee: str) -> None:
    failed = {"status": "failed", "reason": "I say so"}
    _refused(daemon, rita, f"runs/{live_run}/transitions", failed, 403, "training.stop")
    # Even the right to stop it does not write its state: the daemon's trainer records it, so that is a 409.
    _refused(daemon, lee, f"runs/{live_run}/transitions", failed, 409, "trained by this daemon")
    with daemon.client() as admin:
        assert admin.get(f"{P}/runs/{live_run}").json()["status"] == "paused"


def test_a_daemon_runs_metrics_and_artifacts_are_never_typed_in(
    daemon: RunningDaemon, live_run: str, rita: str
) -> None:
    """Issue 51: a loss curve of 200 steps typed in for a short run made it read as trained past every method's
    minimum (the gate's steps and a card's supported tier read it), and an artifact record could name any file."""
    with daemon.client() as admin:
        attempt = admin.get(f"{P}/runs/{live_run}").json()["attempts"][-1]["attempt_id"]
        steps_before = admin.get(f"{P}/runs/{live_run}").json()["metric_summary"]["train.loss"]
    curve = {"run_id": live_run, "attempt_id": attempt,
             "points": [{"metric": "train.loss", "step": step, "value": 0.01} for step in range(1, 201)]}  # fmt: skip
    _refused(daemon, rita, "metrics", curve, 409, "records its metrics")
    kept = {"run_id": live_run, "kind": "adapter", "uri": "file:///elsewhere/adapter.bin", "sha256": "0" * 64,
            "size_bytes": 1}  # fmt: skip
    _refused(daemon, rita, "artifacts", kept, 409, "records its artifacts")
    with daemon.client() as admin:
        assert admin.get(f"{P}/runs/{live_run}").json()["metric_summary"]["train.loss"] == steps_before


def test_a_spent_budget_is_not_lifted_by_bookkeeping(daemon: RunningDaemon, rita: str, lee: str) -> None:
    with daemon.client() as admin:
        limit = {"gpu_hours": 1, "runs": 1, "reason": "one run"}
        assert admin.post(f"{P}/budget/limit", json=limit).status_code == 201
        spent = admin.get(f"{P}/budget").json()["remaining"]
    release = {"entry_id": "lift-1", "kind": "release", "runs": 100, "gpu_hours": 100}
    _refused(daemon, rita, "budget-entries", release, 403, "budget.amend")
    _refused(daemon, lee, "budget-entries", release, 422, "frees more than")
    negative = {"entry_id": "lift-2", "kind": "settle", "runs": -100, "gpu_hours": -100}
    with tenant(daemon, lee) as lead:
        answer = lead.post(f"{P}/budget-entries", json=negative)
    assert answer.status_code == 422, answer.text
    with daemon.client() as admin:
        assert admin.get(f"{P}/budget").json()["remaining"] == spent
