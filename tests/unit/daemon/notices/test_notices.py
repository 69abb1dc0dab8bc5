"""Notices: what each kind of event looks like to people, and where it goes."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bashgym.client.specs import Actor, BudgetEntrySpec, ComparisonSpec, EvalResultSpec, EvalSuiteSpec, ProjectSpec
from bashgym.daemon.campaigns.scheduler import ReportScheduler
from bashgym.daemon.notices.render import NoticeRenderer, notice_text
from bashgym.ledger.campaign_specs import CampaignSpec
from bashgym.ledger.store import Ledger

from tests.support.factories import suite

pytestmark = pytest.mark.anyio


async def notices(ledger: Ledger, tmp_path: Path) -> list[object]:
    page = await NoticeRenderer(ledger, tmp_path / "reports").page("default", after_cursor=0, limit=500)
    return list(page.notices)


async def test_a_scheduled_report_goes_to_its_schedules_channel_with_its_charts(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    await ledger.set_channel(actor, "default", "nightly", channel_id="111", guild_id="")
    spec = CampaignSpec.model_validate(
        {
            "campaign_id": "bash-q4", "title": "T", "objective": "O", "suite_id": "bash-tasks-v1",
            "starting_model_version_id": "m", "dataset_version_ids": ["d"],
            "report_schedule": {"cron": "0 9 * * *", "timezone": "UTC", "channel": "222"},
        }
    )  # fmt: skip
    await ledger.create_campaign(actor, "default", "nightly", spec)
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    await ledger.mark_schedule_fired(
        actor, "default", "nightly", "bash-q4.report", (now - timedelta(days=1)).isoformat()
    )
    async with ReportScheduler(ledger, tmp_path / "reports", clock=lambda: now):
        pass

    report = next(n for n in await notices(ledger, tmp_path) if n.event_type == "report.recorded")  # type: ignore[attr-defined]
    assert report.title == "Scheduled report: Campaign bash-q4" and report.channel_id == "222"
    assert sorted(f.name for f in report.files) == ["budget.png", "loss.png", "metric.png"]
    assert report.files[0].path.startswith("/v1/projects/nightly/reports/")
    assert "## Iterations" in report.description and str(tmp_path) not in report.description
    text = notice_text(report)
    assert text.startswith("• Scheduled report") and "chart: metric.png" in text


async def test_a_budget_warns_once_little_is_left_and_bookkeeping_renders_to_nothing(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    entries = [("limit", 5), ("reserve", 1), ("reserve", 3), ("settle", 1)]
    for n, (kind, runs) in enumerate(entries):
        spec = BudgetEntrySpec(entry_id=f"e{n}", scope="project", kind=kind, runs=runs)
        await ledger.add_budget_entry(actor, "default", "nightly", spec)
    shown = await notices(ledger, tmp_path)
    # A reservation that leaves little is information (a run holds its share); what is spent is the warning.
    assert [n.title for n in shown] == ["Budget reserved: project", "Budget spent: project"]  # type: ignore[attr-defined]
    reserved, warning = shown
    assert reserved.outcome == "info" and "1 runs left after it" in reserved.description  # type: ignore[attr-defined]
    assert warning.outcome == "warning" and warning.channel_id is None  # type: ignore[attr-defined]
    assert ("remaining", "0 runs, 0.00 GPU-hours") in [(f.name, f.value) for f in warning.fields]  # type: ignore[attr-defined]
    assert len(warning.nonce) == 25  # type: ignore[attr-defined]


async def test_the_console_waits_from_the_head_when_the_newest_events_are_another_workspaces(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    # Waiting from its own last cursor while the head is elsewhere, the console would poll without sleeping.
    from bashgym.daemon.notices.render import ConsoleNotifier

    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    await ledger.create_project(actor, "other", ProjectSpec(project_id="elsewhere", name="Elsewhere"))
    printed = io.StringIO()
    console = ConsoleNotifier(ledger, NoticeRenderer(ledger, tmp_path / "reports"), "default", out=printed)
    cursor = await console.drain(0)
    assert cursor == ledger.last_cursor, "the wait starts at the head, past the other workspace's events"
    assert (await ledger.get_consumer_cursor("console-notifier"))["cursor"] == cursor


@pytest.mark.parametrize(
    ("ran_alike", "shown"),
    [(False, [("ran on", "baseline cpu float32; candidate cuda bfloat16 (NVIDIA H200)")]), (True, []), (None, [])],
)
async def test_a_comparison_across_placements_says_where_each_side_ran(
    ledger: Ledger, actor: Actor, tmp_path: Path, ran_alike: bool | None, shown: list[tuple[str, str]]
) -> None:
    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    await ledger.register_eval_suite(actor, "default", "nightly", EvalSuiteSpec.model_validate(suite("s")))
    ids = [
        (await ledger.record_eval_result(actor, "default", "nightly", EvalResultSpec(suite_id="s"))).record["result_id"]
        for _ in range(2)
    ]
    ran_on = {"baseline": "cpu float32", "candidate": "cuda bfloat16 (NVIDIA H200)"}
    spec = ComparisonSpec(
        baseline_result_id=ids[0],
        candidate_result_id=ids[1],
        primary_metric="pass_at_1",
        delta=0.1,
        ci_low=0.05,
        ci_high=0.15,
        details={"paired_tasks": 88, "ran_on": ran_on, "ran_alike": ran_alike},
    )
    await ledger.record_comparison(actor, "default", "nightly", spec)
    (notice,) = [n for n in await notices(ledger, tmp_path) if n.title == "Comparison on s"]  # type: ignore[attr-defined]
    assert [(f.name, f.value) for f in notice.fields if f.name == "ran on"] == shown


async def test_a_gate_verdict_is_recorded_once_per_evidence_and_posted_green_or_with_its_blockers(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    from bashgym.client.specs import RunRegistration

    run = (await ledger.register_run(actor, "default", RunRegistration(method="sft"))).record
    ship = {
        "ship": True,
        "blockers": [],
        "warnings": [{"code": "limitations_empty", "message": "m", "next_action": "n"}],
    }
    blocked = {
        "ship": False,
        "blockers": [{"code": "no_evaluation", "message": "The run has no completed evaluation.", "next_action": "x"}],
        "warnings": [],
    }
    first = await ledger.record_gate(actor, "default", "unassigned", run["run_id"], blocked, "d1", "gate")
    again = await ledger.record_gate(actor, "default", "unassigned", run["run_id"], blocked, "d1", "decide")
    later = await ledger.record_gate(actor, "default", "unassigned", run["run_id"], ship, "d2", "demo")
    assert (first.replayed, again.replayed, later.replayed) == (False, True, False)
    assert again.record["cursor"] == first.record["cursor"]

    gates = [n for n in await notices(ledger, tmp_path) if n.event_type == "gate.evaluated"]  # type: ignore[attr-defined]
    assert [(g.outcome, g.title) for g in gates] == [  # type: ignore[attr-defined]
        ("failure", f"Gate: run {run['run_id']} is blocked"),
        ("success", f"Gate: run {run['run_id']} ships"),
    ]
    fields = {f.name: f.value for f in gates[0].fields}  # type: ignore[attr-defined]
    assert fields["no_evaluation"] == "The run has no completed evaluation. Next: x"
    assert {f.name for f in gates[1].fields} >= {"warning: limitations_empty", "asked by"}  # type: ignore[attr-defined]


def test_limitations_and_reasons_read_as_sentences_without_doubled_punctuation() -> None:
    from bashgym.client.render import sentences

    said = sentences(["A tiny model: a narrow claim.", "One seed", "  ", "Held out?"])
    assert said == "A tiny model: a narrow claim. One seed. Held out?"
    assert ".;" not in said and ".." not in said
