"""Issue 51's acceptance: a hurried colleague tries to ship an untrained run by every route that writes evidence,
each with the least-privileged token that might succeed, and the gate blocks every attempt, naming the cause and
the next step.

One 2-step SFT run from a registered start model (`tiny-start`, its files stored), evaluated by the daemon on
held-out rows. The attempts: typed-in results and comparisons (`evidence.import`), the daemon's comparison of typed
figures, a loss curve and an artifact for the run (`ledger.write`), an overclaiming card (`runcard.write`), a
promotion decision and a promote (`promotion.decide`), an alias moved by hand, results evaluated unlike, a stranger
baseline, a model whose files are not the version's, and a dataset holding the held-out families. Each item also
has its own test file; this one holds them together against one daemon.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.daemon.evidence.evaluations import terminal_suite_spec
from bashgym.trainers.environments.terminal_tasks import default_suite, gold_sft_rows
from bashgym.trainers.tiny import build_tiny

from tests.e2e.evidence.test_baselines_and_tiers import as_token, blockers, compare, evaluate, register
from tests.e2e.evidence.test_provenance import posted, typed_result
from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, wait_for_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # each attempt has a cheaper test in the default suite
PROJECT = "nightly"  # the helpers imported above speak to this project
P = f"/v1/projects/{PROJECT}"
START = "tiny-start"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("attempts") / "home") as running:
        yield running


@pytest.fixture(scope="module")
def tiny(daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = build_tiny(tmp_path_factory.mktemp("tiny") / "model")
    register(daemon, model, START)
    return model


@pytest.fixture(scope="module")
def trained(daemon: RunningDaemon, tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    context = tracking_context(model_version_id=START, model_config_digest=sha256(tiny / "config.json"))
    request = training_request(tiny, sft_data(tmp_path_factory.mktemp("train")), max_steps=2, save_steps=2,
                               tracking_context=context)  # fmt: skip
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, PROJECT, str(started.json()["run_id"]), {"completed", "failed"}, timeout_s=240)
    assert run["status"] == "completed", run
    return str(run["run_id"])


def token(daemon: RunningDaemon, name: str, *capabilities: str) -> str:
    """A viewer of the project holding only `capabilities` beyond reading: the least that might succeed."""
    return issue_token(daemon, name, "viewer", project=PROJECT, capabilities=capabilities)


def named_with_a_next_step(found: dict[str, dict[str, str]], code: str, *words: str) -> None:
    blocker = found.get(code)
    assert blocker is not None, f"{code} not among {sorted(found)}"
    assert blocker["next_action"] and all(word in blocker["message"] for word in words), blocker


def test_every_route_that_writes_evidence_leaves_the_gate_blocking(
    daemon: RunningDaemon, tiny: Path, trained: str, tmp_path: Path
) -> None:
    (tmp_path / "heldout").mkdir()
    rows = sft_data(tmp_path / "heldout", rows=6)
    rita = token(daemon, "rita", "eval.run", "ledger.write", "runcard.write")
    imre = token(daemon, "imre", "evidence.import", "ledger.write")
    dana = token(daemon, "dana", "promotion.decide")

    # Typed-in figures, and the daemon's comparison of them: asserted, never counted.
    suite = default_suite()
    tasks = {task.task_id: task.task_family for task in suite.tasks[:16]}
    with tenant(daemon, imre) as importer, tenant(daemon, rita) as researcher:
        posted(importer, "eval-suites", terminal_suite_spec(suite).model_dump(mode="json"))
        typed = posted(importer, "eval-results", typed_result(trained, 0.95, tasks, suite.suite_id))
        floor = posted(importer, "eval-results", typed_result(None, 0.05, tasks, suite.suite_id))
        ids = {"baseline_result_id": floor["result_id"], "candidate_result_id": typed["result_id"]}
        assert posted(researcher, "evaluations/compare", ids)["provenance"] == "asserted"
        claimed = {**ids, "primary_metric": "pass@1", "delta": 0.9, "ci_low": 0.8, "ci_high": 1.0,
                   "details": {"alike": True}}  # fmt: skip
        assert posted(importer, "comparisons", claimed)["details"]["alike"] is None  # the ledger says, not the caller

        # The run's own record is the daemon's: no loss curve of 200 steps, no artifact naming another file.
        attempt = researcher.get(f"{P}/runs/{trained}").json()["attempts"][-1]["attempt_id"]
        curve = [{"metric": "train.loss", "step": step, "value": 0.01} for step in range(1, 201)]
        typed_curve = researcher.post(f"{P}/metrics", json={"run_id": trained, "attempt_id": attempt, "points": curve})
        assert typed_curve.status_code == 409 and "records its metrics" in typed_curve.text, typed_curve.text
        kept = {"run_id": trained, "kind": "adapter", "uri": "file:///x", "sha256": "0" * 64, "size_bytes": 1}
        assert researcher.post(f"{P}/artifacts", json=kept).status_code == 409

        # A card may not claim more than the evidence supports.
        broad = researcher.post(f"{P}/runs/{trained}/runcards", json={"claim_tier": "broad", "known_limitations": []})
        assert broad.status_code == 422 and "the evidence supports local_smoke" in broad.text, broad.text
        assert researcher.post(f"{P}/runs/{trained}/runcards", json={"known_limitations": ["2 steps"]}).is_success

    found = blockers(daemon, rita, trained)
    named_with_a_next_step(found, "evidence_asserted", typed["result_id"])
    named_with_a_next_step(found, "smoke_claim")

    # Measured, but unlike: the start evaluated with fewer new tokens than the run.
    candidate = evaluate(daemon, rita, rows, "--run", trained)
    short = cli(
        as_token(daemon, rita), "eval", "run", "--project", PROJECT, "--model-version", START, "--dataset-path",
        str(rows), "--max-new-tokens", "4", "--device", "cpu", "--json", timeout_s=300,
    )  # fmt: skip
    assert short.code == 0, short.stderr
    unlike = cli(as_token(daemon, rita), "eval", "compare", "--project", PROJECT, "--baseline",
                 short.json()["result_id"], "--candidate", candidate["result_id"])  # fmt: skip
    assert unlike.code == 7 and "max_new_tokens 4 and 48" in unlike.stderr and "--max-new-tokens 48" in unlike.stderr

    # Measured and alike, against a stranger: context, not evidence.
    register(daemon, tiny, "old-model")
    stranger = evaluate(daemon, rita, rows, "--model-version", "old-model")
    compare(daemon, rita, stranger["result_id"], candidate["result_id"])
    found = blockers(daemon, rita, trained)
    named_with_a_next_step(found, "start_baseline_missing", START, "old-model")

    # Promotion: a decision is a record, not a ship; the promote route asks the gate; an alias by hand needs more.
    with tenant(daemon, dana) as decider:
        decision = {"decision_type": "promotion", "outcome": "promote", "rationale": "trust me", "run_id": trained}
        assert decider.post(f"{P}/decisions", json=decision).status_code == 201
        promote = decider.post(f"{P}/runs/{trained}/promote", json={"alias": "champion"})
        assert promote.status_code == 422 and "start_baseline_missing" in promote.text, promote.text
        by_hand = decider.post(f"{P}/aliases", json={"alias": "champion", "model_version_id": f"mv-{trained}"})
        assert by_hand.status_code == 403 and "promotion.override" in by_hand.text, by_hand.text
    named_with_a_next_step(blockers(daemon, rita, trained), "start_baseline_missing")


def test_a_launch_of_other_weights_or_of_held_out_families_never_reaches_the_gate(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    rita = token(daemon, "launcher", "training.launch", "ledger.write")
    with daemon.client() as admin:
        before = admin.get(f"{P}/runs").json()
    other = build_tiny(tmp_path / "other", seed=1)  # tiny-start's shape and config, other weights
    data = sft_data(tmp_path)
    named = tracking_context(model_version_id=START, model_config_digest=sha256(tiny / "config.json"))
    swapped = training_request(other, data, max_steps=2, tracking_context=named)
    recipe = tmp_path / "recipe.jsonl"  # README's old recipe: every family, the held-out ones included
    recipe.write_text("".join(json.dumps(row) + "\n" for row in gold_sft_rows(range(1, 2), per_family=2)))
    contaminated = training_request(tiny, recipe, max_steps=2, tracking_context=named)
    with tenant(daemon, rita) as launcher:
        for body, cause in (
            (swapped, "files differ from those the version recorded"),
            (contaminated, "held_out_family"),
        ):
            plan = launcher.post("/v1/training/plan", json=body).json()
            assert not plan["ready"] and any(cause in r for r in plan["reasons"]), plan["reasons"]
            refused = launcher.post("/v1/training/start", json=body)
            assert refused.status_code == 422 and cause in refused.text and refused.json()["error"]["hint"]
    with daemon.client() as admin:
        assert admin.get(f"{P}/runs").json() == before, "a refused launch registered a run"
