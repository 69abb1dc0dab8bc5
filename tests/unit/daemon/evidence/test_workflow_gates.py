"""The gate of the two workflows: a reward model and a retriever ship on their own evidence, and each of its
blockers is reachable, without a training run."""

from __future__ import annotations

import copy
from typing import Any

from bashgym.daemon.evidence.promotion import Evidence, build_runcard, downstream_of, gate

from tests.unit.daemon.evidence.test_promotion_gate import shipping

REWARD_SUITE = {
    "suite_id": "heldout-reward-x",
    "kind": "heldout_reward",
    "scoring_contract": {"primary_metric": "pair_accuracy", "metrics": {"pair_accuracy": {"direction": "maximize"}}},
}
RETRIEVAL_SUITE = {
    "suite_id": "retrieval-x",
    "kind": "retrieval",
    "scoring_contract": {
        "primary_metric": "ndcg@10",
        "metrics": {"ndcg@10": {"direction": "maximize"}, "contamination": {"direction": "minimize"}},
    },
}


def reward_result(result_id: str, accuracy: float, **details: Any) -> dict[str, Any]:
    return {
        "result_id": result_id,
        "suite_id": "heldout-reward-x",
        "run_id": "rm-1",
        "status": "completed",
        "provenance": "measured",
        "metrics": {"pair_accuracy": accuracy, "ece": 0.05, "longer_rejected_accuracy": 0.9, "leaked_pairs": 0.0},
        "details": {
            "dataset_sha256": "2" * 64,
            "leakage": {"checked": True, "count": 0, "leaked_pairs": []},
            "length_slices": {
                "rejected-longer": {"pairs": 20, "accuracy": 0.9},
                "chosen-longer": {"pairs": 20, "accuracy": 0.85},
            },
            "by_source": {"web": {"pairs": 20, "accuracy": 0.9}},
            **details,
        },
    }


def evidence_for(method: str, result: dict[str, Any], suite: dict[str, Any]) -> Evidence:
    run = {
        "run_id": "rm-1",
        "project_id": "p",
        "method": method,
        "status": "completed",
        "metric_summary": {"train.loss": {"count": 200, "last_step": 200}},
        "attempts": [{"attempt_id": "rm-1.a1"}],
        "artifacts": [],
        "config": {"dataset_sha256": "1" * 64},
        "context_status": "verified",
        "model_version_id": "mv-base",  # the model it started from, which the pinned baseline evaluated
    }
    comparison = {
        "comparison_id": "cmp",
        "suite_id": suite["suite_id"],
        "baseline_result_id": "base",
        "candidate_result_id": result["result_id"],
        "delta": 0.3,
        "ci_low": 0.1,
        "ci_high": 0.5,
        "provenance": "measured",
        "details": {"alike": True, "unlike": {}},
    }
    baseline = {**copy.deepcopy(result), "result_id": "base", "run_id": None, "model_version_id": "mv-base"}
    evidence = Evidence(
        run=run,
        results=[result],
        comparisons=[comparison],
        baselines={"base": baseline},
        suites={suite["suite_id"]: suite},
        runcards=[],
    )
    card = build_runcard(evidence, claim_tier="narrow", decision="pending", limitations=["small"], creator="a")
    evidence.runcards = [{"card_id": "c1", "claim_tier": "narrow", "card": card}]
    return evidence


def reward_evidence(**details: Any) -> Evidence:
    evidence = evidence_for("reward_model", reward_result("cand", 0.9, **details), REWARD_SUITE)
    evidence.downstream = [{"run_id": "grpo-1", "comparisons": ["cmp-grpo"]}]
    return evidence


def codes(evidence: Evidence) -> tuple[set[str], set[str]]:
    verdict = gate(evidence)
    return {b["code"] for b in verdict["blockers"]}, {w["code"] for w in verdict["warnings"]}


def test_a_reward_model_with_its_evidence_ships() -> None:
    assert codes(reward_evidence()) == (set(), set())


def test_a_reward_model_evaluated_on_its_training_pairs_does_not_ship() -> None:
    blockers, _ = codes(reward_evidence(dataset_sha256="1" * 64))
    assert "reward_evaluation_missing" in blockers


def test_leaked_pairs_and_length_bias_block_and_miscalibration_warns() -> None:
    evidence = reward_evidence(
        leakage={"checked": True, "count": 3, "leaked_pairs": [0, 1, 2]},
        length_slices={"rejected-longer": {"pairs": 20, "accuracy": 0.3}},
    )
    evidence.results[0]["metrics"]["ece"] = 0.4
    blockers, warnings = codes(evidence)
    assert {"reward_pairs_leaked", "length_bias"} <= blockers
    assert "reward_model_miscalibrated" in warnings


def test_a_reward_model_that_prefers_the_shorter_answer_is_blocked_too() -> None:
    """Issue 51, item 11: length bias was judged one way only, so a model rewarding brevity passed."""
    brief = {"rejected-longer": {"pairs": 20, "accuracy": 0.95}, "chosen-longer": {"pairs": 20, "accuracy": 0.2}}
    evidence = reward_evidence(length_slices=brief)
    blocker = next(b for b in gate(evidence)["blockers"] if b["code"] == "length_bias")
    assert "the chosen answer is the longer one" in blocker["message"] and "rewards brevity" in blocker["message"]


def test_too_few_longer_rejected_pairs_warn_and_a_source_below_chance_warns() -> None:
    _, warnings = codes(
        reward_evidence(
            length_slices={"rejected-longer": {"pairs": 3, "accuracy": 0.0}},
            by_source={"forum": {"pairs": 12, "accuracy": 0.25}},
        )
    )
    assert {"length_bias_unmeasured", "source_below_chance"} <= warnings


def test_a_reward_model_no_run_was_rewarded_by_does_not_ship_and_says_how_to_use_it() -> None:
    evidence = reward_evidence()
    evidence.downstream = [{"run_id": "grpo-1", "comparisons": []}]
    verdict = gate(evidence)
    downstream = next(b for b in verdict["blockers"] if b["code"] == "reward_model_downstream_missing")
    assert "grpo-1 used it, with no measured comparison" in downstream["message"]
    assert "grpo_reward_source reward_model" in downstream["next_action"]


def retrieval_result(contamination: float = 0.0, **metrics: float) -> dict[str, Any]:
    return {
        "result_id": "cand",
        "suite_id": "retrieval-x",
        "run_id": "rm-1",
        "status": "completed",
        "provenance": "measured",
        "metrics": {"ndcg@10": 0.6, "hard.ndcg@10": 0.4, "contamination": contamination, **metrics},
        "details": {"trained_on": "1" * 64},
    }


def test_a_retriever_ships_on_its_frozen_split_and_contamination_blocks() -> None:
    assert codes(evidence_for("embedding_retriever", retrieval_result(), RETRIEVAL_SUITE)) == (set(), set())
    blockers, _ = codes(evidence_for("embedding_retriever", retrieval_result(contamination=2), RETRIEVAL_SUITE))
    assert "retrieval_contaminated" in blockers


def test_a_retriever_below_its_start_on_unseen_templates_ships_with_a_warning_that_says_so() -> None:
    evidence = evidence_for(
        "embedding_retriever", retrieval_result(**{"heldout_templates.ndcg@10": 0.293}), RETRIEVAL_SUITE
    )
    evidence.baselines["base"]["metrics"]["heldout_templates.ndcg@10"] = 0.322
    verdict = gate(evidence)
    assert verdict["ship"], verdict["blockers"]
    (warning,) = [w for w in verdict["warnings"] if w["code"] == "retrieval_heldout_templates_fell"]
    assert "nDCG@10 0.293 against its start's 0.322" in warning["message"]
    evidence.baselines["base"]["metrics"]["heldout_templates.ndcg@10"] = 0.2
    assert "retrieval_heldout_templates_fell" not in codes(evidence)[1]


def test_a_retriever_without_a_retrieval_evaluation_does_not_ship() -> None:
    evidence = evidence_for("embedding_retriever", reward_result("cand", 0.9), REWARD_SUITE)
    blockers, _ = codes(evidence)
    assert "retrieval_evaluation_missing" in blockers


def test_downstream_evidence_is_a_whole_suite_gain_over_the_policys_own_start() -> None:
    """Issue 51, finding 7: a reward model shipped on any downstream comparison (a partial suite, delta 0.0)."""
    policy = shipping("grpo")  # compared with its start mv-student (+0.2, CI [0.05, 0.35]) and with mv-teacher
    assert downstream_of(policy)["comparisons"] == ["cmp-1"]

    rewarded = reward_evidence()
    flat = copy.deepcopy(policy)
    flat.comparisons[0].update(delta=0.0, ci_low=0.0, ci_high=0.0)  # scored exactly its start
    rewarded.downstream = [downstream_of(flat)]
    blocker = next(b for b in gate(rewarded)["blockers"] if b["code"] == "reward_model_downstream_missing")
    assert "run-1 was compared with its start mv-student and showed no gain (best delta 0.0" in blocker["message"]

    partial = copy.deepcopy(policy)
    partial.suites["bash-tasks-v1"]["kind"] = "terminal_tasks_partial"  # every comparison on a partial suite
    rewarded.downstream = [downstream_of(partial)]
    blocker = next(b for b in gate(rewarded)["blockers"] if b["code"] == "reward_model_downstream_missing")
    assert "only comparisons on partial suites or against other models" in blocker["message"], blocker
    assert "cmp-1, cmp-2" in blocker["message"]

    stranger = copy.deepcopy(policy)
    stranger.comparisons = stranger.comparisons[1:]  # a gain over mv-teacher only: context
    assert downstream_of(stranger)["comparisons"] == [] and downstream_of(stranger)["context"] == ["cmp-2"]
