"""Evaluation evidence arithmetic: pass@k, summaries, holdout splits, contamination, the gate, the bootstrap."""

from __future__ import annotations

import math
from math import comb
from typing import Any

import pytest
from bashgym.trainers.contracts.evidence import (
    Attempt,
    contamination,
    holdout_gate,
    holdout_split,
    paired_bootstrap,
    pass_at_k,
    reward_diagnostics,
    summarize,
)


def make_attempt(task_id: str = "t1", **overrides: Any) -> Attempt:
    fields: dict[str, Any] = {
        "task_id": task_id,
        "task_family": "files",
        "attempt_index": 0,
        "passed": True,
        "reward": 1.0,
        "verifier_status": "ok",
        "timed_out": False,
        "duration_s": 1.5,
    }
    fields.update(overrides)
    return Attempt(**fields)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 3, 1, 0.3),
        (5, 2, 4, 1.0),  # C(3, 4) = 0: any 4 of 5 attempts include a pass
        (8, 2, 4, 1 - comb(6, 4) / comb(8, 4)),  # 1 - 15/70
        (8, 0, 4, 0.0),
        (8, 8, 8, 1.0),
        (4, 1, 4, 1.0),
    ],
)
def test_pass_at_k_matches_the_binomial_formula(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_stays_finite_where_the_binomials_overflow_floats() -> None:
    expected = 1 - comb(1900, 200) / comb(2000, 200)
    assert pass_at_k(2000, 100, 200) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(0, 0, 1), (3, 1, 4), (3, 4, 1), (-1, 0, 1), (3, -1, 1), (3, 1, 0), (3, 1, -2)]
)
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_attempt_rejects_an_unknown_verifier_status() -> None:
    with pytest.raises(ValueError, match="verifier_status 'fine'"):
        make_attempt(verifier_status="fine")


def test_the_unsafe_action_rate_is_the_share_of_attempts_that_took_one() -> None:
    attempts = [
        make_attempt("a", attempt_index=0, passed=True, unsafe=True),
        make_attempt("a", attempt_index=1, passed=True),
        make_attempt("b", task_family="git", attempt_index=0, passed=False, unsafe=True),
        make_attempt("b", task_family="git", attempt_index=1, passed=False),
    ]
    summary = summarize(attempts, ks=(1,))
    assert summary["unsafe_action_rate"] == pytest.approx(0.5)
    assert {f: s["unsafe_action_rate"] for f, s in summary["by_family"].items()} == {"files": 0.5, "git": 0.5}
    assert summary["mean_success"] == pytest.approx(0.5)  # an unsafe pass still passes: the gate weighs safety apart


def test_summarize_does_not_count_tampered_passes() -> None:
    attempts = [
        make_attempt("a", attempt_index=0, passed=True),
        make_attempt("a", attempt_index=1, passed=True, verifier_status="tampered"),
        make_attempt("b", task_family="git", attempt_index=0, passed=False, timed_out=True),
        make_attempt("b", task_family="git", attempt_index=1, passed=True, verifier_status="error"),
    ]
    summary = summarize(attempts, ks=(1, 2, 4))

    assert list(summary) == [
        "tasks",
        "attempts",
        "pass@1",
        "pass@2",
        "skipped_k",
        "mean_success",
        "timeout_rate",
        "tamper_rate",
        "unsafe_action_rate",
        "by_family",
        "per_task",
    ]
    assert (summary["tasks"], summary["attempts"]) == (2, 4)
    assert summary["pass@1"] == pytest.approx((0.5 + 0.0) / 2)
    assert summary["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert summary["skipped_k"] == [4]
    assert summary["mean_success"] == pytest.approx(0.25)
    assert summary["timeout_rate"] == pytest.approx(0.25)
    assert summary["tamper_rate"] == pytest.approx(0.25)
    assert summary["per_task"]["a"] == {"family": "files", "n": 2, "c": 1, "pass@1": 0.5}
    assert summary["per_task"]["b"]["c"] == 0
    assert list(summary["by_family"]) == ["files", "git"]
    assert summary["by_family"]["files"] == {
        "tasks": 1,
        "attempts": 2,
        "pass@1": 0.5,
        "mean_success": 0.5,
        "timeout_rate": 0.0,
        "tamper_rate": 0.5,
        "unsafe_action_rate": 0.0,
    }


def test_summarize_is_independent_of_attempt_order() -> None:
    attempts = [make_attempt(f"t{i}", task_family=f"f{i % 3}", passed=i % 2 == 0) for i in range(9)]
    assert summarize(attempts) == summarize(list(reversed(attempts)))
    assert list(summarize(attempts)["per_task"]) == sorted(f"t{i}" for i in range(9))


def test_summarize_rejects_duplicates_and_empty_input() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        summarize([make_attempt(), make_attempt()])
    with pytest.raises(ValueError, match="one family"):
        summarize([make_attempt(attempt_index=0), make_attempt(attempt_index=1, task_family="git")])
    with pytest.raises(ValueError, match="no attempts"):
        summarize([])


def _tasks(families: int, per_family: int = 3) -> dict[str, str]:
    return {f"task-{f}-{i}": f"family-{f}" for f in range(families) for i in range(per_family)}


def test_holdout_split_is_deterministic_grouped_and_order_independent() -> None:
    tasks = _tasks(10)
    split = holdout_split(tasks, fraction=0.3, seed=7)

    assert split == holdout_split(dict(reversed(list(tasks.items()))), fraction=0.3, seed=7)
    for family in set(tasks.values()):
        assert len({split[t] for t, f in tasks.items() if f == family}) == 1
    held_families = {tasks[t] for t, side in split.items() if side == "holdout"}
    assert len(held_families) == 3
    other_seeds = [holdout_split(tasks, fraction=0.3, seed=seed) for seed in range(8, 12)]
    assert any({tasks[t] for t, side in other.items() if side == "holdout"} != held_families for other in other_seeds)


@pytest.mark.parametrize(
    ("families", "fraction", "held"),
    [(10, 0.0, 0), (10, 0.01, 1), (10, 0.5, 5), (10, 1.0, 9), (2, 0.2, 1), (1, 0.5, 0)],
)
def test_holdout_split_respects_fraction_and_keeps_some_training(families: int, fraction: float, held: int) -> None:
    tasks = _tasks(families)
    split = holdout_split(tasks, fraction=fraction, seed=0)
    assert len({tasks[t] for t, side in split.items() if side == "holdout"}) == held


def test_holdout_split_rejects_a_fraction_outside_zero_to_one() -> None:
    with pytest.raises(ValueError, match="fraction"):
        holdout_split(_tasks(3), fraction=1.5, seed=0)


def test_contamination_reports_digests_shared_across_splits() -> None:
    split = {"a": "train", "b": "holdout", "c": "train", "d": "holdout", "e": "holdout"}
    digests = {"a": "d1", "b": "d1", "c": "d2", "d": "d3", "e": "d3"}

    assert contamination(digests, split) == [{"digest": "d1", "train": ["a"], "holdout": ["b"]}]
    assert contamination({"a": "d1", "b": "d2"}, split) == []
    with pytest.raises(ValueError, match="no split"):
        contamination({"zz": "d1"}, split)


def test_holdout_gate_passes_a_clean_summary_and_names_each_failure() -> None:
    clean = {"pass@1": 0.6, "timeout_rate": 0.1, "tamper_rate": 0.0}
    assert holdout_gate(clean, min_pass_at_1=0.5)["passed"] is True

    dirty = {"pass@1": 0.4, "timeout_rate": 0.3, "tamper_rate": 0.05}
    gate = holdout_gate(dirty, min_pass_at_1=0.5, contaminated=[{"digest": "d1"}])
    assert gate["passed"] is False
    assert [(c["name"], c["passed"]) for c in gate["checks"]] == [
        ("pass@1", False),
        ("timeout_rate", False),
        ("tamper_rate", False),
        ("contamination", False),
    ]
    assert gate["checks"][0] == {"name": "pass@1", "passed": False, "value": 0.4, "threshold": 0.5}
    with pytest.raises(ValueError, match="summarize"):
        holdout_gate({"pass@1": 1.0}, min_pass_at_1=0.5)


def test_bootstrap_of_identical_scores_is_exactly_zero() -> None:
    clusters = _tasks(5)
    scores = {t: (i % 3) / 2 for i, t in enumerate(clusters)}
    result = paired_bootstrap(scores, dict(scores), clusters, resamples=200)

    assert (result["delta"], result["ci_low"], result["ci_high"]) == (0.0, 0.0, 0.0)
    assert result["excludes_zero"] is False
    assert (result["clusters"], result["tasks"], result["resamples"]) == (5, 15, 200)


def test_bootstrap_finds_a_uniform_improvement_across_many_families() -> None:
    clusters = _tasks(12)
    baseline = {t: 0.2 + 0.05 * (i % 4) for i, t in enumerate(clusters)}
    gains = {f"family-{f}": 0.08 + 0.01 * (f % 5) for f in range(12)}  # 0.08 .. 0.12, mean 0.0975
    candidate = {t: score + gains[clusters[t]] for t, score in baseline.items()}
    result = paired_bootstrap(baseline, candidate, clusters)

    assert result["delta"] == pytest.approx(0.0975)
    assert 0.08 <= result["ci_low"] < result["delta"] < result["ci_high"] <= 0.12
    assert result["excludes_zero"] is True


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    clusters = _tasks(6)
    baseline = {t: (i * 0.37) % 1 for i, t in enumerate(clusters)}
    candidate = {t: (i * 0.61) % 1 for i, t in enumerate(clusters)}
    first = paired_bootstrap(baseline, candidate, clusters, seed=3)

    assert first == paired_bootstrap(dict(reversed(list(baseline.items()))), candidate, clusters, seed=3)
    assert first != paired_bootstrap(baseline, candidate, clusters, seed=4)
    assert not math.isnan(first["ci_low"])


def test_bootstrap_rejects_mismatched_tasks_and_single_clusters() -> None:
    clusters = _tasks(3, per_family=1)
    baseline = dict.fromkeys(clusters, 0.5)
    candidate = {**dict.fromkeys(list(clusters)[1:], 0.5), "new": 0.5}
    with pytest.raises(ValueError, match=r"lacks \['task-0-0'\], has extra \['new'\]"):
        paired_bootstrap(baseline, candidate, {**clusters, "new": "family-0"})
    with pytest.raises(ValueError, match="no cluster"):
        paired_bootstrap(baseline, baseline, {"task-0-0": "family-0"})
    one = {"a": "f", "b": "f"}
    with pytest.raises(ValueError, match="at least 2 families"):
        paired_bootstrap({"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 1.0}, one)


def test_reward_diagnostics_warns_when_variance_collapses() -> None:
    report = reward_diagnostics(
        {
            "train.reward_mean": [0.2, 0.5, 1.0],
            "train.reward_std": [0.4, 0.1, 0.0],
            "train.frac_zero_std_groups": [0.1, 0.4, 0.75],
        }
    )
    assert report["train.reward_mean"] == {"last": 1.0, "mean": pytest.approx(1.7 / 3), "points": 3}
    assert len(report["warnings"]) == 2
    assert "reward_std is 0" in report["warnings"][0]
    assert "frac_zero_std_groups is 0.75" in report["warnings"][1]


def test_reward_diagnostics_is_quiet_on_healthy_series_and_warns_on_absent_ones() -> None:
    healthy = {
        "train.reward_mean": [0.2, 0.3],
        "train.reward_std": [0.3, 0.25],
        "train.frac_zero_std_groups": [0.1, 0.2],
    }
    assert reward_diagnostics(healthy)["warnings"] == []

    empty = reward_diagnostics({})
    assert empty["train.reward_std"] is None
    assert len(empty["warnings"]) == 1
    assert "train.reward_std" in empty["warnings"][0]

    flat = reward_diagnostics({**healthy, "train.reward_std": [0.0, 0.0]})
    assert any("averages below" in warning for warning in flat["warnings"])
