"""Id prefixes: which full ids of the named projects start with what a user typed (ledger/ids.py)."""

from __future__ import annotations

import sqlite3

import pytest
from bashgym.client.errors import InvalidInput
from bashgym.client.specs import (
    Actor,
    ComparisonSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    ProjectSpec,
    RunRegistration,
)
from bashgym.ledger import ids
from bashgym.ledger.campaign_specs import CampaignSpec
from bashgym.ledger.store import Ledger

from tests.support.factories import suite, tracking_context

pytestmark = pytest.mark.anyio
WS = "default"
EDGE_IDS = ("edge-0e9", "edge-0f", "edge-0f0", "edge-0fff", "edge-0g", "edge-0F", "edge-9", "edge-9z", "edge-:a")


async def _run(ledger: Ledger, actor: Actor, run_id: str, *, project: str = "alpha", ws: str = WS) -> str:
    context = tracking_context(workspace_id=ws, project_id=project)
    spec = RunRegistration(run_id=run_id, method="sft", tracking_context=context)
    return str((await ledger.register_run(actor, ws, spec)).record["run_id"])


async def _one_of_each_kind(ledger: Ledger, actor: Actor) -> str:
    """A record of every kind in project alpha, each id starting with `shared-`; answers the RunCard's id."""
    context = tracking_context(
        project_id="alpha",
        experiment_id="shared-exp",
        model_version_id="shared-model",
        dataset_version_id="shared-data",
    )
    run = RunRegistration(run_id="shared-run", method="sft", tracking_context=context)
    await ledger.register_run(actor, WS, run)
    await ledger.register_eval_suite(actor, WS, "alpha", EvalSuiteSpec.model_validate(suite("shared-suite")))
    for n, value in enumerate((0.2, 0.4), start=1):
        result = EvalResultSpec(
            result_id=f"shared-result-{n}", suite_id="shared-suite", run_id="shared-run", metrics={"pass_at_1": value}
        )
        await ledger.record_eval_result(actor, WS, "alpha", result)
    comparison = ComparisonSpec(
        comparison_id="shared-cmp",
        baseline_result_id="shared-result-1",
        candidate_result_id="shared-result-2",
        primary_metric="pass_at_1",
    )
    await ledger.record_comparison(actor, WS, "alpha", comparison)
    campaign = CampaignSpec.model_validate(
        {
            "campaign_id": "shared-campaign", "title": "T", "objective": "O", "suite_id": "shared-suite",
            "starting_model_version_id": "shared-model", "dataset_version_ids": ["shared-data"],
        }
    )  # fmt: skip
    await ledger.create_campaign(actor, WS, "alpha", campaign)
    card = {"run_id": "shared-run", "claim_tier": "smoke", "decision": "hold"}
    return str((await ledger.record_runcard(actor, WS, "alpha", card)).record["card_id"])


async def test_a_prefix_answers_every_kind_of_record_that_starts_with_it_in_id_order(
    ledger: Ledger, actor: Actor
) -> None:
    card_id = await _one_of_each_kind(ledger, actor)
    found = await ledger.ids_with_prefix(WS, "shared-", projects=["alpha"])
    assert found["prefix"] == "shared-" and found["truncated"] is False
    assert [(m["id"], m["kind"]) for m in found["matches"]] == [
        ("shared-campaign", "campaign"),
        ("shared-cmp", "comparison"),
        ("shared-data", "dataset_version"),
        ("shared-exp", "experiment"),
        ("shared-model", "model_version"),
        ("shared-result-1", "eval_result"),
        ("shared-result-2", "eval_result"),
        ("shared-run", "run"),
        ("shared-suite", "eval_suite"),
    ]
    assert {m["project_id"] for m in found["matches"]} == {"alpha"}
    card = await ledger.ids_with_prefix(WS, card_id[:8], projects=["alpha"])
    assert card["matches"] == [{"id": card_id, "kind": "runcard", "project_id": "alpha"}]


async def test_a_kind_narrows_the_answer_to_that_kind(ledger: Ledger, actor: Actor) -> None:
    await _one_of_each_kind(ledger, actor)
    results = await ledger.ids_with_prefix(WS, "shared-", projects=["alpha"], kind="eval_result")
    assert [m["id"] for m in results["matches"]] == ["shared-result-1", "shared-result-2"]
    runs = await ledger.ids_with_prefix(WS, "shared-r", projects=["alpha"], kind="run")
    assert runs["matches"] == [{"id": "shared-run", "kind": "run", "project_id": "alpha"}]
    assert (await ledger.ids_with_prefix(WS, "shared-run", projects=["alpha"], kind="campaign"))["matches"] == []


async def test_an_unknown_kind_is_refused_naming_the_known_ones(ledger: Ledger) -> None:
    with pytest.raises(InvalidInput) as refused:
        await ledger.ids_with_prefix(WS, "shared-", projects=["alpha"], kind="runs")
    assert "'runs'" in refused.value.message
    assert "run, campaign, eval_result" in refused.value.hint


async def test_a_prefix_that_is_no_identifier_is_refused(ledger: Ledger) -> None:
    for prefix in ("", "run-%", "../etc"):
        with pytest.raises(InvalidInput):
            await ledger.ids_with_prefix(WS, prefix, projects=["alpha"])


async def test_the_range_ends_exactly_where_the_prefix_does(ledger: Ledger, actor: Actor) -> None:
    # The range is [prefix, prefix with its last character plus one): `f` ends below `g`, `9` below `:`.
    for run_id in EDGE_IDS:
        await _run(ledger, actor, run_id)

    async def matching(prefix: str) -> list[str]:
        return [m["id"] for m in (await ledger.ids_with_prefix(WS, prefix, projects=["alpha"]))["matches"]]

    assert await matching("edge-0f") == ["edge-0f", "edge-0f0", "edge-0fff"]  # the exact id first
    assert await matching("edge-0ff") == ["edge-0fff"]
    assert await matching("edge-0fff") == ["edge-0fff"]
    assert await matching("edge-0fffa") == []
    assert await matching("edge-0") == ["edge-0F", "edge-0e9", "edge-0f", "edge-0f0", "edge-0fff", "edge-0g"]
    assert await matching("edge-9") == ["edge-9", "edge-9z"]
    assert await matching("edge-:") == ["edge-:a"]


async def test_more_matches_than_the_limit_answer_the_first_ones_and_say_truncated(
    ledger: Ledger, actor: Actor
) -> None:
    for n in range(4):
        await _run(ledger, actor, f"many-{n}")
    cut = await ledger.ids_with_prefix(WS, "many-", projects=["alpha"], limit=3)
    assert [m["id"] for m in cut["matches"]] == ["many-0", "many-1", "many-2"] and cut["truncated"] is True
    whole = await ledger.ids_with_prefix(WS, "many-", projects=["alpha"], limit=4)
    assert len(whole["matches"]) == 4 and whole["truncated"] is False
    default = await ledger.ids_with_prefix(WS, "many-", projects=["alpha"])
    assert len(default["matches"]) == 4 and ids.MAX_MATCHES == 10


async def test_only_the_named_projects_of_the_workspace_are_searched(ledger: Ledger, actor: Actor) -> None:
    await _run(ledger, actor, "scoped-a1")
    for n in range(5):
        await _run(ledger, actor, f"scoped-b{n}", project="beta")
    await _run(ledger, actor, "scoped-w1", ws="elsewhere")

    alpha = await ledger.ids_with_prefix(WS, "scoped-", projects=["alpha"], limit=3)
    # Beta's five ids neither show nor count toward the limit: the answer is what alpha alone would give.
    assert alpha == {
        "prefix": "scoped-",
        "matches": [{"id": "scoped-a1", "kind": "run", "project_id": "alpha"}],
        "truncated": False,
    }
    both = await ledger.ids_with_prefix(WS, "scoped-", projects=["alpha", "beta", "alpha"], limit=3)
    assert [m["id"] for m in both["matches"]] == ["scoped-a1", "scoped-b0", "scoped-b1"] and both["truncated"]
    assert (await ledger.ids_with_prefix(WS, "scoped-", projects=[]))["matches"] == []
    # A project of the same name in another workspace is another project.
    assert (await ledger.ids_with_prefix(WS, "scoped-w", projects=["alpha", "beta"]))["matches"] == []
    elsewhere = await ledger.ids_with_prefix("elsewhere", "scoped-", projects=["alpha", "beta"])
    assert [m["id"] for m in elsewhere["matches"]] == ["scoped-w1"]


async def test_every_statement_is_an_index_seek_on_the_id_never_a_scan(ledger: Ledger, actor: Actor) -> None:
    await ledger.create_project(actor, WS, ProjectSpec(project_id="alpha", name="Alpha"))

    def statements(conn: sqlite3.Connection) -> list[str]:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            ids.ids_with_prefix(conn, WS, "run-01a2", projects=["alpha"])
        finally:
            conn.set_trace_callback(None)
        return seen

    def plans(conn: sqlite3.Connection, sql: list[str]) -> list[str]:
        return [" ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {s}")) for s in sql]

    executed = await ledger.read(statements)
    assert len(executed) == len(ids.ID_KINDS)
    explained = await ledger.read(lambda conn: plans(conn, executed))
    for plan, (table, column) in zip(explained, ids.ID_KINDS.values(), strict=True):
        assert plan.startswith(f"SEARCH {table} USING"), plan
        assert f"{column}>? AND {column}<?" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # rows come in id order from the index, so LIMIT stops early
