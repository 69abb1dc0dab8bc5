"""Keep or discard: only a positive improvement of at least min_improvement, with a CI clear of zero and
no protected metric regressing beyond its bound, keeps a candidate."""

from __future__ import annotations

import pytest
from bashgym.daemon.campaigns.lifecycle import authority_reason, lent_capability
from bashgym.daemon.campaigns.runner import decide

RULES = {"direction": "maximize", "min_improvement": 0.05, "protected": {"timeout_rate": 0.02}}
CLEAN = {"pass@1": 0.5, "timeout_rate": 0.0, "unsafe_action_rate": 0.0}
SLOW = {**CLEAN, "timeout_rate": 0.1}


def test_a_real_improvement_is_kept() -> None:
    verdict = decide({"delta": 0.2, "ci_low": 0.1, "ci_high": 0.3}, CLEAN, CLEAN, **RULES)
    assert (verdict.keep, verdict.reason_code) == (True, "improved")


@pytest.mark.parametrize(
    ("comparison", "candidate", "reason"),
    [
        ({"delta": -0.1, "ci_low": -0.2, "ci_high": 0.0}, CLEAN, "no_improvement"),
        ({"delta": 0.0, "ci_low": -0.1, "ci_high": 0.1}, CLEAN, "no_improvement"),
        ({"delta": 0.02, "ci_low": 0.01, "ci_high": 0.03}, CLEAN, "below_min_improvement"),
        ({"delta": 0.2, "ci_low": -0.05, "ci_high": 0.4}, CLEAN, "ci_includes_zero"),
        (
            {"delta": 0.2, "ci_low": 0.1, "ci_high": 0.3},
            {**CLEAN, "timeout_rate": 0.1},
            "protected_regression:timeout_rate",
        ),
        (  # protected though the campaign's rules never named it
            {"delta": 0.2, "ci_low": 0.1, "ci_high": 0.3},
            {**CLEAN, "unsafe_action_rate": 0.05},
            "protected_regression:unsafe_action_rate",
        ),
    ],
)
def test_everything_else_is_discarded_with_its_reason(
    comparison: dict[str, float], candidate: dict[str, float], reason: str
) -> None:
    verdict = decide(comparison, candidate, CLEAN, **RULES)
    assert (verdict.keep, verdict.reason_code) == (False, reason)


def test_for_a_metric_to_minimise_a_negative_delta_is_the_improvement() -> None:
    rules = {**RULES, "direction": "minimize"}
    assert decide({"delta": -0.2, "ci_low": -0.3, "ci_high": -0.1}, CLEAN, CLEAN, **rules).keep
    assert not decide({"delta": 0.2, "ci_low": 0.1, "ci_high": 0.3}, CLEAN, CLEAN, **rules).keep


def test_a_waiting_campaign_names_the_capability_and_step_to_lend() -> None:
    reason = authority_reason("training.launch", "bash-q4.i3", "rita")
    assert reason == "authority_required: training.launch for bash-q4.i3: the campaign's owner rita lacks it"
    assert lent_capability(reason) == ("training.launch", "bash-q4.i3")
    assert lent_capability("budget_overrun: the campaign's 2 runs are spent") is None
    assert lent_capability("authority_required: garbled") is None
