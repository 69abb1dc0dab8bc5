"""The demo's pure parts: options it refuses, the trained families' share of a result, progress without a
terminal, and the summary table."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from bashgym.cli.demo import Display, render_summary
from bashgym.cli.demo_loop import DemoOptions, _rest, check_options, suite_split
from bashgym.client.errors import InvalidInput


def test_options_that_cannot_work_are_refused_with_what_to_set() -> None:
    with pytest.raises(InvalidInput, match="two task families"):
        check_options(DemoOptions(home=Path("/tmp/x"), limit_tasks=1), {})
    with pytest.raises(InvalidInput) as missing:
        check_options(DemoOptions(home=Path("/tmp/x"), discord=True), {"BASHGYM_DISCORD_TOKEN": "t"})
    assert "BASHGYM_DISCORD_APPLICATION_ID" in missing.value.message
    assert "BASHGYM_DISCORD_DEFAULT_CHANNEL (or --channel)" in missing.value.message
    assert "t" not in missing.value.message.split()  # the token's value is never echoed


def test_the_trained_families_share_follows_from_the_whole_and_the_holdout() -> None:
    # 88 tasks at 0.5 overall, of which 24 held out at 0.0: the other 64 average 44/64.
    assert _rest(0.5, 0.0, 88, 24) == pytest.approx(44 / 64)
    assert _rest(None, 0.0, 88, 24) is None
    split = suite_split()
    assert len(split.holdout_families) == 3 and len(split.train_families) == 8
    assert not set(split.holdout_families) & set(split.train_families)


def test_progress_without_a_terminal_prints_a_few_lines_with_an_eta() -> None:
    out, err = io.StringIO(), io.StringIO()
    display = Display(out, err)
    for done in range(0, 101):
        display.progress("training", done, 100, "steps")
    lines = err.getvalue().splitlines()
    assert 4 <= len(lines) <= 8, lines  # each quarter, not each step
    assert lines[-1].startswith("  training [") and "100/100 steps" in lines[-1]
    display.step("Next")
    assert "[1] Next" in out.getvalue()


def test_the_summary_table_shows_each_split_the_ci_and_the_verdicts() -> None:
    def figures(p1: float, p4: float, seen: float, held: float) -> dict[str, object]:
        return {
            "result_id": "r",
            "pass@1": p1,
            "pass@4": p4,
            "held_out_instances": {"pass@1": seen, "pass@4": seen},
            "family_holdout": {"pass@1": held, "pass@4": held},
        }

    summary = {
        "suite": {"tasks": 88, "held_out_instances": 64, "family_holdout_tasks": 24, "holdout_families": ["a", "b"]},
        "baseline": figures(0.0, 0.0, 0.0, 0.0),
        "candidate": figures(0.6, 0.7, 0.8, 0.05),
        "comparison": {"metric": "pass@1", "delta": 0.6, "ci_low": 0.5, "ci_high": 0.7, "paired_tasks": 88},
        "campaign_decision": {"decision": "keep", "reason_code": "improved"},
        "gate": {"ship": True, "blockers": []},
        "runcard_id": "card-1",
        "promoted": {"alias": "champion", "model_version_id": "v2"},
        "report": {"path": "/home/reports/rep-1"},
        "ledger_verified": True,
        "training": {"steps": 1000, "trace_rows": 796, "run_id": "run-1"},
        "seconds": 300.0,
    }
    text = render_summary(summary)
    assert "held-out instances (64 tasks of the trained families)" in text
    assert "family holdout (24 tasks of 2 untrained families)" in text and "untrained families: a, b" in text
    assert "0.800" in text and "0.050" in text
    assert "Δ pass@1 +0.600, 95% CI [+0.500, +0.700]" in text
    assert "promotion gate      ship" in text and "champion -> v2" in text
    summary["gate"] = {"ship": False, "blockers": ["no_improvement"]}
    summary["promoted"] = None
    assert "blocked (no_improvement)" in render_summary(summary)
