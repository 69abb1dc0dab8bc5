"""GRPO's training signals say what the run did (issue 51, item 9), through a real daemon.

TRL averaged `train.entropy` over the loss's mask: 0.0 when every group was filtered out of the loss (the policy's
entropy was 6.88), and the kept groups' entropy otherwise. A run whose every completion hit
`grpo_max_completion_length` and was masked out of the loss (grad norm 0 at every step) completed with no anomaly;
then the anomaly said every completion was masked wherever every one was truncated, masked or not, and the run's
record (`training status`) did not show it at all.
Two tiny GRPO runs of two steps each, whose exact_match check the untrained model never meets (every group's
rewards are equal, so each group is filtered): one with one-token completions masked when truncated, one whose
completions stay in the loss's view.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import grpo_data, training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, train_all

# Two GRPO runs train (~40 s on 2 cores): the default suite keeps the trainer-level entropy test
# (tests/e2e/trainers/test_trainers.py) and the no_gradient rule's unit tests.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PROJECT = "nightly"
TWO_STEPS = {"max_steps": 2, "batch_size": 2, "logging_steps": 1, "save_steps": 100}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("home"), PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def runs(daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Both runs, completed."""
    root = tmp_path_factory.mktemp("grpo")
    tiny, data = build_tiny(root / "tiny"), grpo_data(root)
    requests = {
        # The DAPO-style profile masks truncated completions out of the loss; a one-token completion is truncated
        # unless that token is its end (the seeded sampling of the untrained model never ends one so soon).
        "masked": training_request(
            tiny,
            data,
            method="grpo",
            training_profile="terminal_rl_tmax_like",
            grpo_max_completion_length=1,
            **TWO_STEPS,
        ),
        # The default profile keeps truncated completions in the loss's view: only the filter takes them out.
        "filtered": training_request(tiny, data, method="grpo", **TWO_STEPS),
    }
    with daemon.client() as admin:
        return train_all(admin, PROJECT, requests)


def no_gradient(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The run record's `no_gradient` anomalies (its equal rewards are a `zero_reward_variance` one besides)."""
    return [a for a in record["anomalies"] if a["kind"] == "no_gradient"]


def test_a_run_whose_every_completion_is_truncated_and_masked_is_flagged_as_training_nothing(
    daemon: RunningDaemon, runs: dict[str, dict[str, Any]]
) -> None:
    run = runs["masked"]
    run_id = run["run_id"]
    assert run["status"] == "completed", run["attempts"][-1]
    summary = run["metric_summary"]
    for share in ("train.truncated_fraction", "train.truncated_masked_fraction"):
        assert summary[share]["min"] == summary[share]["max"] == 1.0, summary
    assert summary["train.grad_norm"]["max"] == 0.0, summary
    # The model saw no completion token (each was truncated and masked): no entropy is claimed, least of all 0.0.
    assert "train.entropy" not in summary, summary
    # The run's record says it trained nothing, and why, once.
    flagged = no_gradient(run)
    assert [a["step"] for a in flagged] == [1], run["anomalies"]
    assert "grad norm 0" in flagged[0]["detail"] and "max_completion_length" in flagged[0]["detail"], flagged
    with daemon.client() as admin:
        events = admin.get(f"/v1/projects/{PROJECT}/events", params={"limit": 1000}).json()["events"]
    logged = [e["payload"] for e in events if e["run_id"] == run_id and e["event_type"] == "run.anomaly"]
    assert logged == run["anomalies"], "the record shows the ledger's anomaly events"

    # The CLI shows the same: the anomaly on the run's status, the truncated share in its metrics.
    shown = cli(daemon.env(), "--json", "training", "status", "--project", PROJECT, run_id)
    assert shown.code == 0 and no_gradient(shown.json()) == flagged, shown.stdout[-2000:]
    text = cli(daemon.env(), "training", "status", "--project", PROJECT, run_id)
    words = " ".join(text.stdout.split())
    assert text.code == 0 and f"step 1 no_gradient: {flagged[0]['detail']}" in words, text.stdout
    assert "train.truncated_fraction" in words
    ledger = cli(daemon.env(), "ledger", "run", "--project", PROJECT, run_id)
    assert ledger.code == 0 and "no_gradient" in ledger.stdout, ledger.stdout
    metric = cli(
        daemon.env(), "--json", "training", "metrics", "--project", PROJECT, "--metric", "train.truncated_fraction",
        run_id,
    )  # fmt: skip
    assert metric.code == 0, metric.stderr
    assert metric.json()["summary"]["latest"] == 1.0, metric.stdout


def test_entropy_is_the_policys_when_every_group_is_filtered(
    daemon: RunningDaemon, runs: dict[str, dict[str, Any]]
) -> None:
    run = runs["filtered"]
    assert run["status"] == "completed", run["attempts"][-1]
    summary = run["metric_summary"]
    # Every group's rewards were equal, so every group was filtered out of the loss ...
    assert summary["train.frac_zero_std_groups"]["min"] == 1.0 and summary["train.grad_norm"]["max"] == 0.0, summary
    # ... and the entropy is still the policy's over the tokens it generated, not the empty mask's 0.0.
    assert summary["train.entropy"]["count"] == 2 and summary["train.entropy"]["min"] > 1.0, summary
    shown = cli(daemon.env(), "--json", "training", "status", "--project", PROJECT, run["run_id"])
    assert shown.code == 0, shown.stderr
    assert shown.json()["metric_summary"]["train.entropy"] == summary["train.entropy"]
    # The filter is named as the cause of its zero gradient: its completions, truncated or not, were not masked.
    assert summary["train.truncated_masked_fraction"]["max"] == 0.0, summary
    flagged = no_gradient(run)
    assert len(flagged) == 1 and "filter_zero_std_groups" in flagged[0]["detail"], run["anomalies"]
    assert "max_completion_length" not in flagged[0]["detail"], flagged
