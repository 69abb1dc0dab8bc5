"""The demo's pure parts: options it refuses, the trained families' share of a result, progress without a
terminal, and the summary table."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from bashgym.cli.demo import Display, render_summary, threads_chosen_by
from bashgym.cli.demo_figures import SEEN, against_seen, render_against_seen
from bashgym.cli.demo_loop import DemoOptions, _rest, check_options, suite_split
from bashgym.cli.eta import StepRate
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def eta_of(line: str) -> str:
    return line.rsplit("ETA ", 1)[1]


def drawn(err: io.StringIO) -> str:
    """The bar a terminal shows now: the text after the last clear of the line."""
    return err.getvalue().rsplit("\r\033[K", 1)[-1]


def on_a_terminal(clock: FakeClock) -> tuple[Display, io.StringIO]:
    err = io.StringIO()
    display = Display(io.StringIO(), err, clock=clock)
    display.tty = True  # redraw in place, as on a terminal
    return display, err


def test_the_eta_comes_from_the_measured_step_rate_and_holds_steady_at_a_steady_pace() -> None:
    clock = FakeClock()
    display, err = on_a_terminal(clock)
    etas = []
    for step in range(0, 201):  # a step every 2 s: 1,000 steps take 2,000 s
        clock.now = 2.0 * step
        display.progress("training", step, 1000, "steps")
        if step >= 10:
            etas.append(eta_of(drawn(err)))
    assert etas[0] == "33:00"  # 990 steps left at 2 s each
    assert etas[-1] == "26:40"  # 800 steps left at 2 s each, whatever came before
    minutes = [int(eta.split(":")[0]) for eta in etas]
    assert minutes == sorted(minutes, reverse=True), "it only counts down"


def test_the_eta_follows_a_change_of_pace_within_a_minute() -> None:
    clock = FakeClock()
    display, err = on_a_terminal(clock)
    step = 0
    for _ in range(300):  # five minutes at 10 steps a second: the machine was idle
        clock.now += 0.1
        step += 1
        display.progress("training", step, 10_000, "steps")
    for _ in range(40):  # then the load rose: a step every 2 s, for 80 s
        clock.now += 2.0
        step += 1
        display.progress("training", step, 10_000, "steps")
    left = 10_000 - step
    assert eta_of(drawn(err)) == f"{left * 2 // 60}:{left * 2 % 60:02d}", "the last minute's pace, not the average"


def test_a_step_rate_needs_a_few_seconds_of_progress_and_starts_over_when_counting_restarts() -> None:
    rate = StepRate(window_s=60.0, min_span_s=3.0)
    rate.observe(0.0, 0)
    rate.observe(1.0, 5)
    assert rate.per_second(1.0) is None and rate.seconds_left(1.0, 5, 100) is None  # one second: too little
    rate.observe(4.0, 20)
    assert rate.per_second(4.0) == 5.0 and rate.seconds_left(4.0, 20, 100) == 16.0
    assert rate.per_second(8.0) == 2.5, "a stall since the last step slows the rate"
    rate.observe(9.0, 3)  # a resumed run counts from its checkpoint again
    assert rate.per_second(9.0) is None


def test_the_default_demo_s_figures_are_shown_beside_the_range_machines_gave() -> None:
    summary = {
        "candidate": {"held_out_instances": {"pass@1": 0.7421875}},
        "comparison": {"delta": 0.5398, "ci_low": 0.3067, "ci_high": 0.7784},
    }
    compared = against_seen(summary)
    assert [row["within"] for row in compared] == [True, True, True, True]
    lines = render_against_seen(compared)
    assert lines[0] == "  held-out pass@1 0.742: within the range machines gave (0.742 to 0.770)"
    assert "  Δ pass@1 +0.540: within the range machines gave (+0.540 to +0.560)" in lines
    summary["candidate"]["held_out_instances"]["pass@1"] = 0.7
    lines = render_against_seen(against_seen(summary))
    assert lines[0] == "  held-out pass@1 0.700: OUTSIDE the range machines gave (0.742 to 0.770)"
    assert "please report it" in lines[-1]
    seen = {r.name: (r.low, r.high) for r in SEEN}
    assert seen["held-out pass@1"] == (0.742, 0.770)  # README, 'The demo', quotes these


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
        "training": {"steps": 1000, "trace_rows": 796, "run_id": "run-1", "cpu_threads": 1},
        "evaluation_threads": {"baseline": 2, "candidate": 1},
        "against_other_machines": against_seen({"candidate": figures(0.6, 0.7, 0.8, 0.05), "comparison": {}}),
        "seconds": 300.0,
    }
    text = render_summary(summary)
    assert "held-out instances (64 tasks of the trained families)" in text
    assert "family holdout (24 tasks of 2 untrained families)" in text and "untrained families: a, b" in text
    assert "0.800" in text and "0.050" in text
    assert "Δ pass@1 +0.600, 95% CI [+0.500, +0.700]" in text
    assert "promotion gate      ship" in text and "champion -> v2" in text
    assert "torch threads       training 1, evaluations 2 and 1 (the load at each start;" in text
    summary["threads_chosen_by"] = threads_chosen_by({"BASHGYM_TRAINER_THREADS": "1"})
    assert "evaluations 2 and 1 (BASHGYM_TRAINER_THREADS=1)" in render_summary(summary)
    assert "  held-out pass@1 0.800: OUTSIDE the range machines gave (0.742 to 0.770)" in text
    assert "  Δ pass@1: not measured (machines gave +0.540 to +0.560)" in text
    summary["gate"] = {"ship": False, "blockers": ["no_improvement"]}
    summary["promoted"] = None
    assert "blocked (no_improvement)" in render_summary(summary)
