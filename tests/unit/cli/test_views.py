"""Terminal views of records a caller wrote: what the ledger accepts, the CLI shows without a traceback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bashgym.cli import output, views
from bashgym.client.render import campaign_state


@pytest.fixture(autouse=True)
def fresh_console(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI makes its console once per process, on the stdout of the moment: each test captures its own."""
    monkeypatch.setattr(output, "_console", None)
    yield


def test_a_comparison_imported_without_a_ci_is_listed_with_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    imported = {
        "comparison_id": "cmp-1",
        "primary_metric": "pass@1",
        "delta": 0.2,
        "ci_low": None,
        "ci_high": None,
        "suite_id": "bash-tasks-v1",
        "provenance": "asserted",
    }
    views.evaluations({"suites": [], "results": [], "comparisons": [imported]})
    shown = capsys.readouterr().out
    assert "cmp-1" in shown and "+0.200" in shown and "[-, -]" in shown, shown


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("max_iterations: 3 candidates decided", "completed: iteration limit reached"),
        ("max_consecutive_discards: 2 in a row", "completed: discard limit reached"),
        ("deadline: the campaign's deadline 2026-12-01T00:00:00Z passed", "completed: deadline passed"),
    ],
)
def test_a_campaign_that_met_its_stop_rule_reads_completed_with_the_rule(
    capsys: pytest.CaptureFixture[str], reason: str, said: str
) -> None:
    """Issue 52: a finished campaign read "exhausted", which names no outcome."""
    assert campaign_state("exhausted", reason) == said
    assert campaign_state("blocked", "budget_overrun") == "blocked"
    views.campaign({"campaign_id": "c1", "status": "exhausted", "status_reason": reason, "spec": {}}, [])
    shown = capsys.readouterr().out
    assert said in shown and "exhausted" not in shown.replace(reason, ""), shown


def test_the_empty_sections_of_a_run_and_a_campaign_name_a_command_with_their_ids(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 52: "none yet: bashgym eval run --project P --run RUN --suite SUITE" could not be pasted."""
    views.run({"run_id": "run-1", "project_id": "nightly", "status": "completed"})
    assert "none yet: bashgym eval run --project nightly --run run-1\n" in capsys.readouterr().out
    views.campaign({"campaign_id": "c1", "project_id": "nightly", "status": "active", "spec": {}}, [])
    shown = " ".join(capsys.readouterr().out.split())
    assert "bashgym campaign propose c1 --project nightly --recipe-change RECIPE_CHANGE" in shown, shown
