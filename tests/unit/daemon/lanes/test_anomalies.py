"""A GRPO step that trained nothing is an anomaly: at once where the metrics say why, else after three in a row."""

from __future__ import annotations

from bashgym.daemon.lanes.anomalies import NO_GRADIENT_STEPS, AnomalyWatch

TRAINED = {
    "train.grad_norm": 0.4,
    "train.truncated_fraction": 0.5,
    "train.truncated_masked_fraction": 0.5,
    "train.frac_zero_std_groups": 0.25,
}
ALL_MASKED = {"train.truncated_fraction": 1.0, "train.truncated_masked_fraction": 1.0}


def test_every_completion_truncated_and_masked_is_named_at_its_first_step() -> None:
    watch = AnomalyWatch("grpo")
    assert watch.observe(1, TRAINED) == []
    (found,) = watch.observe(2, {**TRAINED, "train.grad_norm": 0.0, **ALL_MASKED})
    assert (found.kind, found.step) == ("no_gradient", 2)
    assert "max_completion_length" in found.detail and "filter_zero_std_groups" not in found.detail
    assert watch.observe(3, {**TRAINED, "train.grad_norm": 0.0, **ALL_MASKED}) == []  # once


def test_every_completion_truncated_but_left_in_the_loss_is_not_said_to_be_masked() -> None:
    # Without mask_truncated_completions a truncated completion still trains: a zero gradient has another cause.
    watch = AnomalyWatch("grpo")
    unmasked = {
        **TRAINED,
        "train.grad_norm": 0.0,
        "train.truncated_fraction": 1.0,
        "train.truncated_masked_fraction": 0.0,
    }
    assert watch.observe(1, unmasked) == []
    (found,) = watch.observe(2, {**unmasked, "train.frac_zero_std_groups": 1.0})
    assert "filter_zero_std_groups" in found.detail and "max_completion_length" not in found.detail


def test_a_zero_gradient_of_no_known_cause_is_an_anomaly_only_when_it_lasts() -> None:
    watch = AnomalyWatch("rlvr")
    silent = {**TRAINED, "train.grad_norm": 0.0}
    assert watch.observe(1, silent) == [] and watch.observe(2, TRAINED) == []  # a lone step happens
    found = [a for step in range(3, 3 + NO_GRADIENT_STEPS) for a in watch.observe(step, silent)]
    assert [(a.kind, a.step) for a in found] == [("no_gradient", 2 + NO_GRADIENT_STEPS)]
    assert f"{NO_GRADIENT_STEPS} logged steps in a row" in found[0].detail


def test_methods_without_groups_never_raise_it() -> None:
    watch = AnomalyWatch("sft")
    assert all(watch.observe(step, {"train.grad_norm": 0.0, "train.loss": 1.0}) == [] for step in range(1, 6))
