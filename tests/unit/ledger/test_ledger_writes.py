"""Ledger writes: replay versus conflict for every kind, the unassigned rule, payload checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from bashgym.client.errors import Conflict, IdentityConflict, InvalidInput, NotFound, PayloadTooLarge
from bashgym.client.specs import (
    Actor,
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BudgetEntrySpec,
    ComparisonSpec,
    DatasetVersionSpec,
    DecisionSpec,
    EnvironmentSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    ExperimentSpec,
    MetricBatch,
    MetricPoint,
    ModelVersionSpec,
    ProjectSpec,
    ReportSpec,
    RunRegistration,
)
from bashgym.ledger.store import Ledger

from tests.support.factories import digest, suite, tracking_context

pytestmark = pytest.mark.anyio
WS = "default"


async def _project_with_run(ledger: Ledger, actor: Actor) -> tuple[str, str, str]:
    result = await ledger.register_run(actor, WS, RunRegistration(method="sft", tracking_context=tracking_context()))
    run = result.record
    return run["project_id"], run["run_id"], f"{run['run_id']}.a1"


async def _result(ledger: Ledger, actor: Actor, project: str, run_id: str, suite_id: str, value: float) -> str:
    written = await ledger.record_eval_result(
        actor, WS, project, EvalResultSpec(suite_id=suite_id, run_id=run_id, metrics={"pass_at_1": value})
    )
    return str(written.record["result_id"])


# Each case: (a first spec, the same spec again, a spec with the same key and another identity).
WriteCase = tuple[Callable[[Ledger, Actor, str, Any], Awaitable[Any]], dict[str, Any], dict[str, Any], type[Any]]


async def _cases(ledger: Ledger, actor: Actor, project: str, run_id: str) -> dict[str, WriteCase]:
    await ledger.register_eval_suite(actor, WS, project, EvalSuiteSpec.model_validate(suite()))
    await ledger.register_eval_suite(actor, WS, project, EvalSuiteSpec.model_validate(suite("other")))
    base = await _result(ledger, actor, project, run_id, "bash-heldout", 0.1)
    cand = await _result(ledger, actor, project, run_id, "bash-heldout", 0.5)
    return {
        "experiment": (
            lambda lg, a, p, s: lg.create_experiment(a, WS, p, s),
            {"experiment_id": "e2", "name": "E2"},
            {"experiment_id": "e2", "name": "Other"},
            ExperimentSpec,
        ),
        "model_version": (
            lambda lg, a, p, s: lg.register_model_version(a, WS, p, s),
            {"model_version_id": "m2", "model_id": "tiny", "source_uri": "hf://x/y", "source_revision": "abc"},
            {"model_version_id": "m2", "model_id": "tiny", "source_uri": "hf://x/y", "source_revision": "def"},
            ModelVersionSpec,
        ),
        "dataset_version": (
            lambda lg, a, p, s: lg.register_dataset_version(a, WS, p, s),
            {"dataset_version_id": "d2", "dataset_id": "d", "source_uri": "s3://d", "content_digest": digest("a")},
            {"dataset_version_id": "d2", "dataset_id": "d", "source_uri": "s3://d", "content_digest": digest("b")},
            DatasetVersionSpec,
        ),
        "environment": (
            lambda lg, a, p, s: lg.register_environment(a, WS, p, s),
            {"environment_id": "env2", "compute_target": "local", "runtime_digest": digest("r1")},
            {"environment_id": "env2", "compute_target": "local", "runtime_digest": digest("r2")},
            EnvironmentSpec,
        ),
        "artifact": (
            lambda lg, a, p, s: lg.register_artifact(a, WS, p, s),
            {
                "artifact_id": "a1",
                "run_id": run_id,
                "kind": "adapter",
                "uri": "u",
                "sha256": digest("f"),
                "size_bytes": 10,
            },
            {
                "artifact_id": "a1",
                "run_id": run_id,
                "kind": "adapter",
                "uri": "u",
                "sha256": digest("g"),
                "size_bytes": 10,
            },
            ArtifactSpec,
        ),
        "eval_suite": (
            lambda lg, a, p, s: lg.register_eval_suite(a, WS, p, s),
            suite("s3"),
            suite("s3", code_digest=digest("changed")),
            EvalSuiteSpec,
        ),
        "eval_result": (
            lambda lg, a, p, s: lg.record_eval_result(a, WS, p, s),
            {"result_id": "r1", "suite_id": "bash-heldout", "metrics": {"pass_at_1": 0.2}},
            {"result_id": "r1", "suite_id": "bash-heldout", "metrics": {"pass_at_1": 0.3}},
            EvalResultSpec,
        ),
        "comparison": (
            lambda lg, a, p, s: lg.record_comparison(a, WS, p, s),
            {
                "comparison_id": "c1",
                "baseline_result_id": base,
                "candidate_result_id": cand,
                "primary_metric": "pass_at_1",
                "delta": 0.4,
            },
            {
                "comparison_id": "c1",
                "baseline_result_id": base,
                "candidate_result_id": cand,
                "primary_metric": "pass_at_1",
                "delta": 0.5,
            },
            ComparisonSpec,
        ),
        "decision": (
            lambda lg, a, p, s: lg.record_decision(a, WS, p, s),
            {"decision_id": "dec1", "decision_type": "promotion", "outcome": "hold", "rationale": "no CI"},
            {"decision_id": "dec1", "decision_type": "promotion", "outcome": "promote", "rationale": "no CI"},
            DecisionSpec,
        ),
        "budget_entry": (
            lambda lg, a, p, s: lg.add_budget_entry(a, WS, p, s),
            {"entry_id": "b1", "kind": "limit", "gpu_hours": 10},
            {"entry_id": "b1", "kind": "limit", "gpu_hours": 20},
            BudgetEntrySpec,
        ),
        "report": (
            lambda lg, a, p, s: lg.record_report(a, WS, p, s),
            {"report_id": "rep1", "kind": "campaign", "title": "Week 1"},
            {"report_id": "rep1", "kind": "campaign", "title": "Week 2"},
            ReportSpec,
        ),
        "project": (
            lambda lg, a, p, s: lg.create_project(a, WS, s),
            {"project_id": "p2", "name": "Two"},
            {"project_id": "p2", "name": "Deux"},
            ProjectSpec,
        ),
    }


async def test_every_write_kind_replays_identical_records_and_refuses_changed_ones(
    ledger: Ledger, actor: Actor
) -> None:
    project, run_id, _ = await _project_with_run(ledger, actor)
    for name, (write, first, changed, model) in (await _cases(ledger, actor, project, run_id)).items():
        created = await write(ledger, actor, project, model.model_validate(first))
        cursor = ledger.last_cursor
        replay = await write(ledger, actor, project, model.model_validate(first))
        assert created.replayed is False, name
        assert replay.replayed is True, name
        assert ledger.last_cursor == cursor, f"{name}: a replay appended an event"
        with pytest.raises(IdentityConflict) as conflict:
            await write(ledger, actor, project, model.model_validate(changed))
        assert conflict.value.fields, name
        assert ledger.last_cursor == cursor, f"{name}: a conflict appended an event"


async def test_conflict_names_the_fields_that_differ(ledger: Ledger, actor: Actor) -> None:
    await ledger.create_project(actor, WS, ProjectSpec(project_id="p", name="A", description="x"))
    with pytest.raises(IdentityConflict) as conflict:
        await ledger.create_project(actor, WS, ProjectSpec(project_id="p", name="B", description="y"))
    assert conflict.value.fields == ["description", "name"]
    assert conflict.value.code == "ledger_identity_conflict"


async def test_metric_batches_replay_and_refuse_a_changed_value(ledger: Ledger, actor: Actor) -> None:
    project, run_id, attempt = await _project_with_run(ledger, actor)
    points = [MetricPoint(metric="train.loss", step=s, value=1.0 / (s + 1)) for s in range(100)]
    batch = MetricBatch(run_id=run_id, attempt_id=attempt, points=points)
    first = await ledger.ingest_metrics(actor, WS, project, batch)
    assert first.record["inserted"] == 100
    cursor = ledger.last_cursor
    again = await ledger.ingest_metrics(actor, WS, project, batch)
    assert again.replayed is True
    assert again.record["inserted"] == 0
    assert ledger.last_cursor == cursor
    changed = MetricBatch(run_id=run_id, attempt_id=attempt, points=[MetricPoint(metric="train.loss", step=5, value=9)])
    with pytest.raises(Conflict, match="step 5"):
        await ledger.ingest_metrics(actor, WS, project, changed)
    trend = await ledger.trend(WS, project, "train.loss", run_id)
    assert trend["summary"]["count"] == 100


async def test_a_point_keeps_the_time_it_was_logged_at_and_a_replay_does_not_move_it(
    ledger: Ledger, actor: Actor
) -> None:
    project, run_id, attempt = await _project_with_run(ledger, actor)
    timed = [MetricPoint(metric="train.loss", step=s, value=1.0, time=1_700_000_000.0 + s) for s in range(3)]
    untimed = [MetricPoint(metric="train.loss", step=3, value=1.0)]
    await ledger.ingest_metrics(actor, WS, project, MetricBatch(run_id=run_id, attempt_id=attempt, points=timed))
    await ledger.ingest_metrics(actor, WS, project, MetricBatch(run_id=run_id, attempt_id=attempt, points=untimed))
    late = [MetricPoint(metric="train.loss", step=0, value=1.0, time=1_800_000_000.0)]  # the same point, resent
    again = await ledger.ingest_metrics(actor, WS, project, MetricBatch(run_id=run_id, attempt_id=attempt, points=late))
    assert again.record["inserted"] == 0
    found = await ledger.metric_series(WS, project, run_id, "train.loss")
    assert found["steps"] == [0, 1, 2, 3]
    assert found["times"] == [1_700_000_000.0, 1_700_000_001.0, 1_700_000_002.0, None]  # never made up


async def test_a_run_without_a_complete_context_is_filed_under_unassigned(ledger: Ledger, actor: Actor) -> None:
    partial = tracking_context()
    del partial["dataset_content_digest"]
    result = await ledger.register_run(actor, WS, RunRegistration(method="sft", tracking_context=partial))
    run = result.record
    assert (run["project_id"], run["experiment_id"], run["context_status"]) == (
        "unassigned",
        "unassigned",
        "unassigned",
    )
    assert run["model_version_id"] is None and run["dataset_version_id"] is None and run["environment_id"] is None
    assert "dataset_content_digest" in run["missing_context_fields"]
    with pytest.raises(NotFound):
        await ledger.get_project(WS, "nightly")  # never created from a guess


async def test_a_complete_context_registers_its_lineage_and_a_verified_run(ledger: Ledger, actor: Actor) -> None:
    result = await ledger.register_run(actor, WS, RunRegistration(method="sft", tracking_context=tracking_context()))
    run = await ledger.get_run(WS, "nightly", result.record["run_id"])
    assert run["context_status"] == "verified"
    assert run["model_version_id"] == "tiny-v1"
    assert [a["status"] for a in run["attempts"]] == ["queued"]
    context = await ledger.project_context(WS, "nightly")
    assert context["inventory"]["model_versions"] == 1
    assert context["inventory"]["runs"] == 1


async def test_a_context_refers_to_an_existing_project_by_its_name(ledger: Ledger, actor: Actor) -> None:
    # A project created with a description; contexts (a campaign's runs, say) that leave it out refer to it.
    spec = ProjectSpec(project_id="nightly", name="Nightly SFT", description="Terminal-agent SFT")
    await ledger.create_project(actor, WS, spec)
    result = await ledger.register_run(actor, WS, RunRegistration(method="sft", tracking_context=tracking_context()))
    assert result.record["context_status"] == "verified"
    assert (await ledger.get_project(WS, "nightly"))["description"] == "Terminal-agent SFT"
    other = tracking_context(project_display_name="Nightly DPO")
    with pytest.raises(IdentityConflict, match="different name"):
        await ledger.register_run(actor, WS, RunRegistration(method="sft", tracking_context=other))


async def test_source_identity_replays_a_registration_retry(ledger: Ledger, actor: Actor) -> None:
    spec = RunRegistration(
        method="sft", tracking_context=tracking_context(), source_system="mlflow", source_run_id="abc123"
    )
    first = await ledger.register_run(actor, WS, spec)
    second = await ledger.register_run(actor, WS, spec)
    assert second.replayed is True
    assert second.record["run_id"] == first.record["run_id"]


@pytest.mark.parametrize(
    "payload, offending",
    [
        ({"hf_token": "hf_abc"}, "$.hf_token"),
        ({"nested": {"password": "x"}}, "$.nested.password"),
        ({"list": [{"api_key": "k"}]}, "$.list[0].api_key"),
        ({"Authorization": "Bearer x"}, "$.Authorization"),
        ({"db_password": "x"}, "$.db_password"),
        ({"credentials": {}}, "$.credentials"),
        ({"private_key": "-----BEGIN"}, "$.private_key"),
        ({"dataset_rows": [1, 2]}, "$.dataset_rows"),
        ({"examples": []}, "$.examples"),
    ],
)
async def test_secret_shaped_and_raw_data_keys_are_refused_with_their_path(
    ledger: Ledger, actor: Actor, payload: dict[str, Any], offending: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await ledger.register_run(actor, WS, RunRegistration(method="sft", config=payload))
    assert offending in refused.value.message
    assert ledger.last_cursor == 0


async def test_ordinary_keys_that_mention_tokens_are_accepted(ledger: Ledger, actor: Actor) -> None:
    config = {"max_tokens": 512, "tokens_per_second": 1.0, "tokenizer": "bpe"}
    result = await ledger.register_run(actor, WS, RunRegistration(method="sft", config=config))
    assert result.record["config"] == config


async def test_payloads_over_128_kib_are_refused(ledger: Ledger, actor: Actor) -> None:
    with pytest.raises(PayloadTooLarge):
        await ledger.register_run(actor, WS, RunRegistration(method="sft", config={"notes": "x" * 140_000}))


async def test_an_alias_moves_with_history_and_an_event(ledger: Ledger, actor: Actor) -> None:
    project, _, _ = await _project_with_run(ledger, actor)
    await ledger.register_model_version(
        actor,
        WS,
        project,
        ModelVersionSpec(model_version_id="tiny-v2", model_id="tiny", source_uri="bashgym://models/tiny"),
    )
    first = await ledger.move_alias(actor, WS, project, AliasMove(alias="champion", model_version_id="tiny-v1"))
    second = await ledger.move_alias(actor, WS, project, AliasMove(alias="champion", model_version_id="tiny-v2"))
    same = await ledger.move_alias(actor, WS, project, AliasMove(alias="champion", model_version_id="tiny-v2"))
    assert (first.replayed, second.replayed, same.replayed) == (False, False, True)
    page = await ledger.events_page(WS, project, after_cursor=0, limit=100, types=["alias.moved"])
    assert [e.payload["previous_version_id"] for e in page.events] == [None, "tiny-v1"]


async def test_annotations_are_events(ledger: Ledger, actor: Actor) -> None:
    project, run_id, _ = await _project_with_run(ledger, actor)
    written = await ledger.add_annotation(actor, WS, project, AnnotationSpec(text="loss spiked at 40", run_id=run_id))
    page = await ledger.events_page(WS, project, after_cursor=written.cursor - 1, limit=10)
    assert page.events[0].event_type == "annotation.added"
    assert page.events[0].actor == "alice"
    assert page.events[0].correlation_id == "cor-test"
