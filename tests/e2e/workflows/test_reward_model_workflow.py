"""A tiny reward model through a real daemon: trained on a learnable synthetic preference, evaluated on held-out
pairs against its pinned untrained baseline, gated on the reward-model evidence, registered as a model version of
kind reward_model, and then the reward of a GRPO run whose rewards come from its scores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.helpers import RunningDaemon, cli, running_daemon, wait_for_run
from tests.support.reward_models import evaluate, reward_model_request, rewarded_grpo_request
from tests.support.reward_pairs import reward_pairs, write_jsonl

TERMINAL = {"completed", "failed", "cancelled"}
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("reward") / "home", env={"BASHGYM_LOCAL_SLOTS": "1"}) as running:
        yield running


def test_a_reward_model_trains_is_judged_on_its_own_evidence_and_rewards_a_grpo_run(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    tiny = build_tiny(tmp_path / "tiny")
    train = write_jsonl(tmp_path / "pairs.jsonl", reward_pairs(seed=1, n=64))
    held_out = write_jsonl(tmp_path / "heldout.jsonl", reward_pairs(seed=2, n=40))
    request = reward_model_request(tiny, train, held_out)
    with daemon.client() as admin:
        # Held-out pairs that are training pairs are refused before anything trains, line-numbered.
        leaky = write_jsonl(tmp_path / "leaky.jsonl", reward_pairs(seed=1, n=3))
        refused = admin.post("/v1/training/start", json={**request, "eval_dataset_path": str(leaky)})
        assert refused.status_code == 422 and "leaky.jsonl:1" in refused.text and "leaked_pair" in refused.text

        started = admin.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, "nightly", started.json()["run_id"], TERMINAL, timeout_s=240)
        assert run["status"] == "completed", run["attempts"][-1]
        assert run["metric_summary"]["train.pair_accuracy"]["count"] >= 1
        run_id = run["run_id"]

        # The pinned baseline: the same base with an untrained scalar head, registered as a reward model.
        registered = cli(
            daemon.env(), "model", "register", "--project", "nightly", "--model", "tiny-rm", "--version", "rm-base",
            "--dir", str(tiny), "--kind", "reward_model",
        )  # fmt: skip
        assert registered.code == 0, registered.stderr
        candidate = evaluate(admin, {"run_id": run_id, "dataset_path": str(held_out)})
        baseline = evaluate(admin, {"model_version_id": "rm-base", "dataset_path": str(held_out)})
        results = {r["result_id"]: r for r in admin.get("/v1/projects/nightly/evaluations").json()["results"]}
        mine, theirs = results[candidate["result_id"]], results[baseline["result_id"]]
        assert mine["suite_id"] == theirs["suite_id"] and mine["suite_id"].startswith("heldout-reward-")
        assert mine["metrics"]["pair_accuracy"] > 0.9 > 0.5  # above chance on pairs it never saw
        assert {"ece", "longer_rejected_accuracy", "longer_chosen_accuracy"} <= set(mine["metrics"])
        assert mine["details"]["leakage"] == {"checked": True, "leaked_pairs": [], "count": 0}
        assert set(mine["details"]["by_source"]) == {"search", "listing", "counting", "reading"}
        compared = admin.post(
            "/v1/projects/nightly/evaluations/compare",
            json={"baseline_result_id": baseline["result_id"], "candidate_result_id": candidate["result_id"]},
        )
        assert compared.status_code == 201, compared.text
        assert compared.json()["primary_metric"] == "pair_accuracy" and compared.json()["ci_low"] > 0
        card = admin.post(f"/v1/projects/nightly/runs/{run_id}/runcards", json={"known_limitations": ["tiny"]})
        assert card.status_code == 201, card.text

        gate = admin.get(f"/v1/projects/nightly/runs/{run_id}/gate").json()
        blockers = {b["code"] for b in gate["blockers"]}
        # Its own evidence holds: accuracy beats the baseline, no leakage, no length bias, calibration measured.
        assert not blockers & {"no_improvement", "reward_evaluation_missing", "length_bias", "reward_pairs_leaked"}
        # What it still lacks is said: a downstream use, and enough steps to be more than a smoke run.
        assert {"reward_model_downstream_missing", "smoke_claim"} <= blockers, gate

        # Registered from the run, it is a reward model, and GRPO takes its scores as rewards.
        version = admin.post(
            f"/v1/projects/nightly/runs/{run_id}/model-version",
            json={"model_version_id": "rm-v1", "model_id": "tiny-rm"},
        )
        assert version.status_code == 201, version.text
        assert version.json()["record"]["kind"] == "reward_model"
        grpo = rewarded_grpo_request(tiny, tmp_path)
        policy_model = admin.post("/v1/training/start", json={**grpo, "grpo_reward_model": "rm-base-is-not"})
        assert policy_model.status_code == 422 and "is not a model version" in policy_model.text
        started = admin.post("/v1/training/start", json={**grpo, "grpo_reward_model": "rm-v1"})
        assert started.status_code == 201, started.text
        rewarded = wait_for_run(admin, "nightly", started.json()["run_id"], TERMINAL, timeout_s=240)
        assert rewarded["status"] == "completed", rewarded["attempts"][-1]
        assert rewarded["config"]["grpo_reward_model_version_id"] == "rm-v1"
        rewards = rewarded["metric_summary"]["train.reward_mean"]
        assert rewards["count"] >= 1 and rewards["latest"] != 0.0  # a learned score, not a 0/1 verifier

        gate = admin.get(f"/v1/projects/nightly/runs/{run_id}/gate").json()
        downstream = next(b for b in gate["blockers"] if b["code"] == "reward_model_downstream_missing")
        assert rewarded["run_id"] in downstream["message"]  # used, and now waiting for its comparison
