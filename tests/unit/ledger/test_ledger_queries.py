"""Reads: project isolation, compare on exact suites, trend summaries, event pages and cursors."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bashgym.client.errors import InvalidInput, NotFound, RuleRejected
from bashgym.client.specs import (
    Actor,
    BudgetEntrySpec,
    ComparisonSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    MetricBatch,
    MetricPoint,
    ProjectSpec,
    RunRegistration,
    RunTransition,
)
from bashgym.ledger.queries import summarize
from bashgym.ledger.store import Ledger

from tests.support.factories import suite, tracking_context

pytestmark = pytest.mark.anyio
WS = "default"


async def _run(ledger: Ledger, actor: Actor, project: str = "nightly") -> str:
    context = tracking_context(project_id=project)
    return str(
        (await ledger.register_run(actor, WS, RunRegistration(method="sft", tracking_context=context))).record["run_id"]
    )


async def test_another_projects_rows_look_exactly_like_missing_ones(ledger: Ledger, actor: Actor) -> None:
    run_a = await _run(ledger, actor, "alpha")
    await _run(ledger, actor, "beta")
    with pytest.raises(NotFound) as via_other_project:
        await ledger.get_run(WS, "beta", run_a)
    with pytest.raises(NotFound) as missing:
        await ledger.get_run(WS, "beta", "run-does-not-exist")
    assert via_other_project.value.message.replace(run_a, "X") == missing.value.message.replace(
        "run-does-not-exist", "X"
    )
    with pytest.raises(NotFound) as other_workspace:
        await ledger.get_project("elsewhere", "alpha")
    with pytest.raises(NotFound) as no_project:
        await ledger.get_project("elsewhere", "nope")
    assert other_workspace.value.message.replace("alpha", "X") == no_project.value.message.replace("nope", "X")
    assert all(r["project_id"] == "beta" for r in await ledger.list_runs(WS, "beta"))
    page = await ledger.events_page(WS, "beta", after_cursor=0, limit=1000)
    assert {e.project_id for e in page.events} == {"beta"}


async def test_compare_refuses_runs_evaluated_on_different_suites(ledger: Ledger, actor: Actor) -> None:
    a, b = await _run(ledger, actor), await _run(ledger, actor)
    for suite_id in ("heldout-a", "heldout-b"):
        await ledger.register_eval_suite(actor, WS, "nightly", EvalSuiteSpec.model_validate(suite(suite_id)))
    await ledger.record_eval_result(
        actor, WS, "nightly", EvalResultSpec(suite_id="heldout-a", run_id=a, metrics={"pass_at_1": 0.2})
    )
    await ledger.record_eval_result(
        actor, WS, "nightly", EvalResultSpec(suite_id="heldout-b", run_id=b, metrics={"pass_at_1": 0.6})
    )
    with pytest.raises(RuleRejected, match="exact same suite"):
        await ledger.compare_runs(WS, "nightly", [a, b])


async def test_compare_on_a_shared_suite_gives_deltas_and_lists_the_others(ledger: Ledger, actor: Actor) -> None:
    a, b, c = await _run(ledger, actor), await _run(ledger, actor), await _run(ledger, actor)
    await ledger.register_eval_suite(actor, WS, "nightly", EvalSuiteSpec.model_validate(suite("heldout")))
    for run_id, value in ((a, 0.25), (b, 0.75)):
        await ledger.record_eval_result(
            actor,
            WS,
            "nightly",
            EvalResultSpec(suite_id="heldout", run_id=run_id, metrics={"pass_at_1": value, "timeout_rate": 0.1}),
        )
    result = await ledger.compare_runs(WS, "nightly", [a, b, c])
    assert result["suite_id"] == "heldout"
    second = result["rows"][1]["metrics"]["pass_at_1"]
    assert second == {"value": 0.75, "delta": 0.5, "direction": "maximize", "better": True}
    assert [row["run_id"] for row in result["not_comparable"]] == [c]


async def test_a_comparison_record_across_suites_is_refused(ledger: Ledger, actor: Actor) -> None:
    run = await _run(ledger, actor)
    ids = []
    for suite_id in ("s-a", "s-b"):
        await ledger.register_eval_suite(actor, WS, "nightly", EvalSuiteSpec.model_validate(suite(suite_id)))
        written = await ledger.record_eval_result(
            actor, WS, "nightly", EvalResultSpec(suite_id=suite_id, run_id=run, metrics={"pass_at_1": 0.5})
        )
        ids.append(written.record["result_id"])
    with pytest.raises(InvalidInput, match="exact same suite"):
        await ledger.record_comparison(
            actor,
            WS,
            "nightly",
            ComparisonSpec(baseline_result_id=ids[0], candidate_result_id=ids[1], primary_metric="pass_at_1"),
        )


def test_summary_of_a_series() -> None:
    summary = summarize([0.0, 1.0, 2.0, 3.0], [4.0, 3.0, 2.0, 1.0])
    assert summary == {"count": 4, "first": 4.0, "latest": 1.0, "min": 1.0, "max": 4.0, "delta": -3.0, "slope": -1.0}
    assert summarize([], [])["count"] == 0


async def test_trend_across_runs_uses_each_runs_latest_value(ledger: Ledger, actor: Actor) -> None:
    for final in (3.0, 2.0, 1.0):
        run = await _run(ledger, actor)
        points = [MetricPoint(metric="eval.loss", step=s, value=final + 10 - s) for s in range(11)]
        await ledger.ingest_metrics(
            actor, WS, "nightly", MetricBatch(run_id=run, attempt_id=f"{run}.a1", points=points)
        )
    trend = await ledger.trend(WS, "nightly", "eval.loss")
    assert trend["values"] == [3.0, 2.0, 1.0]
    assert trend["summary"]["slope"] == -1.0


async def test_event_pages_report_next_cursor_and_has_more(ledger: Ledger, actor: Actor) -> None:
    for i in range(7):
        await ledger.create_project(actor, WS, ProjectSpec(project_id=f"p{i}", name="P"))
    first = await ledger.events_page(WS, None, after_cursor=0, limit=5)
    assert [e.cursor for e in first.events] == [1, 2, 3, 4, 5]
    assert first.has_more is True
    second = await ledger.events_page(WS, None, after_cursor=first.next_cursor, limit=5)
    assert [e.cursor for e in second.events] == [6, 7]
    assert (second.has_more, second.next_cursor) == (False, 7)


async def test_consumer_cursors_survive_reopening_and_never_move_back(tmp_path: Path, actor: Actor) -> None:
    path = tmp_path / "ledger.sqlite3"
    async with await Ledger.open(path) as ledger:
        for i in range(3):
            await ledger.create_project(actor, WS, ProjectSpec(project_id=f"p{i}", name="P"))
        await ledger.ack_consumer_cursor("notifier", 2)
        await ledger.ack_consumer_cursor("notifier", 1)
        with pytest.raises(InvalidInput):
            await ledger.ack_consumer_cursor("notifier", 99)
    async with await Ledger.open(path) as ledger:
        assert (await ledger.get_consumer_cursor("notifier"))["cursor"] == 2
        page = await ledger.events_page(WS, None, after_cursor=2, limit=10)
        assert [e.cursor for e in page.events] == [3]


async def test_context_signals_name_failed_and_unevaluated_runs(ledger: Ledger, actor: Actor) -> None:
    from bashgym.client.specs import RunTransition

    done, failed = await _run(ledger, actor), await _run(ledger, actor)
    await ledger.transition_run(actor, WS, "nightly", done, RunTransition(status="running"))
    await ledger.transition_run(actor, WS, "nightly", done, RunTransition(status="completed"))
    await ledger.transition_run(actor, WS, "nightly", failed, RunTransition(status="failed", error_summary="OOM"))
    context = await ledger.project_context(WS, "nightly")
    assert context["signals"]["failed_runs"]["ids"] == [failed]
    assert context["signals"]["completed_without_evaluation"]["ids"] == [done]
    assert context["signals"]["terminal_without_artifact"]["ids"] == [done]
    assert context["inventory"]["runs_by_status"] == {"completed": 1, "failed": 1}


async def test_a_trend_over_large_step_numbers_does_not_overflow(ledger: Ledger, actor: Actor) -> None:
    # 1,001 points at steps near 10^8: the squares of the steps add up past SQLite's 64-bit integers.
    run = await _run(ledger, actor)
    points = [MetricPoint(metric="train.loss", step=100_000_000 + s, value=1.0 - s / 2000) for s in range(1001)]
    for start in range(0, len(points), 500):
        batch = MetricBatch(run_id=run, attempt_id=f"{run}.a1", points=points[start : start + 500])
        await ledger.ingest_metrics(actor, WS, "nightly", batch)
    trend = await ledger.trend(WS, "nightly", "train.loss", run)
    assert trend["summary"]["count"] == 1001 and trend["summary"]["latest"] == pytest.approx(0.5)
    assert trend["summary"]["slope"] == pytest.approx(-1 / 2000, rel=1e-3)


async def test_an_end_settles_the_runs_reservation_in_the_same_write_once(ledger: Ledger, actor: Actor) -> None:
    reserved, unreserved = [await _run(ledger, actor) for _ in range(2)]
    reserve = BudgetEntrySpec(entry_id=f"{reserved}.reserve", kind="reserve", runs=1, run_id=reserved)
    await ledger.add_budget_entry(actor, WS, "nightly", reserve)
    for run_id in (reserved, unreserved):
        await ledger.transition_run(actor, WS, "nightly", run_id, RunTransition(status="running"), settle_gpus=2)
        assert (await ledger.budget_summary(WS, "nightly"))["reserved"]["runs"] == 1, "only an end settles"
    ended = await ledger.transition_run(
        actor, WS, "nightly", reserved, RunTransition(status="completed"), settle_gpus=2
    )
    page = await ledger.events_page(WS, "nightly", after_cursor=ended.cursor - 3, limit=10)
    assert [(e.event_type, e.payload.get("entity_id")) for e in page.events] == [
        ("run.completed", None),
        ("budget.entry", f"{reserved}.release"),
        ("budget.entry", f"{reserved}.settle"),
    ], "the end and its settlement are one write"
    await ledger.transition_run(actor, WS, "nightly", reserved, RunTransition(status="completed"), settle_gpus=2)
    await ledger.transition_run(actor, WS, "nightly", unreserved, RunTransition(status="failed"), settle_gpus=2)
    summary = await ledger.budget_summary(WS, "nightly")
    assert summary["reserved"]["runs"] == 0 and summary["settled"]["runs"] == 1, "once, and only what was reserved"


async def test_a_run_is_charged_the_hours_it_ran_not_those_it_waited_or_was_paused(
    tmp_path: Path, actor: Actor
) -> None:
    now = datetime(2026, 11, 30, 8, tzinfo=UTC)
    async with await Ledger.open(tmp_path / "ledger.sqlite3", clock=lambda: now) as ledger:
        paused, never_ran = [await _run(ledger, actor) for _ in range(2)]
        for run_id in (paused, never_ran):
            reserve = BudgetEntrySpec(entry_id=f"{run_id}.reserve", kind="reserve", runs=1, run_id=run_id)
            await ledger.add_budget_entry(actor, WS, "nightly", reserve)
        moves = ((1, "preparing"), (2, "running"), (3, "paused"), (8, "running"), (10, "failed"))
        for hours_later, status in moves:  # queued 1 h, loading 1 h, ran 1 h, paused 5 h, ran 2 h
            now = datetime(2026, 11, 30, 8 + hours_later, tzinfo=UTC)
            await ledger.transition_run(actor, WS, "nightly", paused, RunTransition(status=status), settle_gpus=4)
        assert (await ledger.budget_summary(WS, "nightly"))["settled"]["gpu_hours"] == pytest.approx((1 + 2) * 4)
        cancelled = RunTransition(status="cancelled")
        await ledger.transition_run(actor, WS, "nightly", never_ran, cancelled, settle_gpus=4)
        summary = await ledger.budget_summary(WS, "nightly")
    assert summary["settled"]["gpu_hours"] == pytest.approx(12) and summary["settled"]["runs"] == 2


LARGEST = sys.float_info.max


@pytest.mark.parametrize(
    ("xs", "ys", "delta", "slope"),
    [
        ([0.0, 1.0], [1e308, 1e308], 0.0, 0.0),
        ([0.0, 1.0], [-1e308, 0.0], 1e308, 1e308),
        ([0.0, 1.0], [-1e308, 1e308], None, None),  # both past the largest double
        ([0.0, 1.0, 2.0], [LARGEST, -LARGEST, LARGEST], 0.0, 0.0),
        ([1.0, 2.0**63 - 1], [1.0, 2.0], 1.0, 1 / 2.0**63),
        ([3e9 + i for i in range(100)], [float(i) for i in range(100)], 99.0, 1.0),
        ([-LARGEST, LARGEST], [0.0, 1.0], 1.0, 1 / LARGEST / 2),
        ([5.0, 5.0], [1.0, 2.0], 1.0, 0.0),  # no spread of x: no slope to speak of
        ([7.0], [0.5], 0.0, None),
    ],
)
def test_a_summary_at_the_extremes_is_finite_or_null_and_keeps_the_slopes_sign(
    xs: list[float], ys: list[float], delta: float | None, slope: float | None
) -> None:
    summary = summarize(xs, ys)
    assert (summary["count"], summary["first"], summary["latest"]) == (len(ys), ys[0], ys[-1])
    assert (summary["min"], summary["max"], summary["delta"]) == (min(ys), max(ys), delta)
    got = summary["slope"]
    assert got == (None if slope is None else pytest.approx(slope, rel=1e-9, abs=1e-300))
    assert got is None or not slope or (got > 0) == (slope > 0), "the sign, even where the value is tiny"
    json.dumps(summary, allow_nan=False)


@pytest.mark.parametrize(
    ("points", "delta", "slope"),
    [
        ([(0, 1e308), (1, 1e308)], 0.0, 0.0),
        ([(0, -1e308), (1, 1e308)], None, None),
        ([(0, LARGEST), (1, -LARGEST), (2, LARGEST)], 0.0, 0.0),
        ([(1, 1.0), (2**63 - 1, 2.0)], 1.0, 1 / (2**63 - 2)),
        ([(3_000_000_000 + s, float(s)) for s in range(100)], 99.0, 1.0),
        ([(2**62 + s, -float(s)) for s in range(100)], -99.0, -1.0),
        ([(9, 0.25)], 0.0, None),
    ],
)
async def test_a_runs_trend_at_the_extremes_reads_back_exactly_with_the_slopes_sign(
    ledger: Ledger, actor: Actor, points: list[tuple[int, float]], delta: float | None, slope: float | None
) -> None:
    run = await _run(ledger, actor)
    batch = [MetricPoint(metric="train.loss", step=step, value=value) for step, value in points]
    await ledger.ingest_metrics(actor, WS, "nightly", MetricBatch(run_id=run, attempt_id=f"{run}.a1", points=batch))
    text = await ledger.trend_json(WS, "nightly", "train.loss", run)
    trend = json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} in {text[:200]}"))
    assert (trend["steps"], trend["values"]) == ([s for s, _ in points], [v for _, v in points])
    summary = trend["summary"]
    assert (summary["min"], summary["max"], summary["delta"]) == (min(trend["values"]), max(trend["values"]), delta)
    assert summary["slope"] == (None if slope is None else pytest.approx(slope, rel=1e-9))
