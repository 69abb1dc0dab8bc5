"""Cascade campaigns as specs and as decisions: what a cascade must declare, that a search spec written before
cascades keeps its stored identity, and how the stages' outcomes end the campaign."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bashgym.daemon.campaigns.cascade import cascade_findings, outcome_of
from bashgym.daemon.campaigns.lifecycle import _recipe, _stage_budget
from bashgym.ledger.campaign_specs import CampaignSpec
from pydantic import ValidationError

from tests.support.factories import campaign_spec

# The fields a campaign spec had before cascades: the stored JSON of a search campaign holds exactly these.
SEARCH_FIELDS = {
    "campaign_id", "title", "objective", "primary_metric", "direction", "suite_id", "starting_model_version_id",
    "dataset_version_ids", "compute_target", "base_recipe", "budget", "stop_rules", "report_schedule",
    "training_window", "evaluation",
}  # fmt: skip


def stage(name: str, method: str, **recipe: Any) -> dict[str, Any]:
    return {"name": name, "recipe": {"method": method, "max_steps": 120, **recipe}, "dataset_version_id": "traces-v1"}


def cascade(**overrides: Any) -> dict[str, Any]:
    body = campaign_spec(**{"kind": "cascade", "stages": [stage("sft", "sft"), stage("more-sft", "sft")], **overrides})
    body.pop("base_recipe")
    return body


def test_a_search_spec_keeps_the_stored_identity_it_had_before_cascades() -> None:
    stored = json.loads(CampaignSpec.model_validate(campaign_spec()).stored_json())
    assert set(stored) == SEARCH_FIELDS
    explicit = CampaignSpec.model_validate({**campaign_spec(), "kind": "search"})
    assert explicit.stored_json() == CampaignSpec.model_validate(campaign_spec()).stored_json()


def test_a_cascade_stores_its_kind_and_stages() -> None:
    stored = json.loads(CampaignSpec.model_validate(cascade()).stored_json())
    assert stored["kind"] == "cascade" and [s["name"] for s in stored["stages"]] == ["sft", "more-sft"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({**cascade(), "stages": []}, "2 to 8 stages"),
        ({**cascade(), "stages": [stage("sft", "sft")]}, "2 to 8 stages"),
        ({**campaign_spec(), "stages": [stage("sft", "sft"), stage("dpo", "dpo")]}, '"kind": "cascade"'),
        ({**cascade(), "base_recipe": {"strategy": "sft"}}, "leave base_recipe out"),
        ({**cascade(), "stages": [stage("sft", "sft"), stage("sft", "dpo")]}, "appears more than once"),
        ({**cascade(), "stages": [stage("a", "sft"), {**stage("b", "sft"), "dataset_version_id": "x-v1"}]},
         "not among the campaign's dataset_version_ids"),
        ({**cascade(), "stages": [stage("a", "sft", base_model="/elsewhere/model"), stage("b", "sft")]},
         "may not set base_model"),
        ({**cascade(), "stages": [{**stage("a", "sft"), "recipe": {"max_steps": 2}}, stage("b", "sft")]},
         "names its method"),
        ({**cascade(), "evaluation": {"limit_tasks": 4}}, "remove limit_tasks from evaluation"),
    ],
)  # fmt: skip
def test_a_spec_that_mixes_or_misses_its_kind_is_refused_with_what_to_send(body: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as raised:
        CampaignSpec.model_validate(body)
    assert says in str(raised.value)


def test_validation_checks_every_stage_recipe_and_a_run_for_each_stage() -> None:
    spec = CampaignSpec.model_validate(
        cascade(stages=[stage("a", "sft", epochs=2), stage("b", "dpo")], budget={"runs": 1})
    ).model_dump(mode="json")
    recipe = _recipe(spec)
    assert [f["code"] for f in recipe] == ["recipe_invalid"] and recipe[0]["message"].startswith("stage a:")
    assert [f["code"] for f in _stage_budget(spec)] == ["budget_short"]


def iteration(number: int, decision: str | None, **fields: Any) -> dict[str, Any]:
    return {
        "number": number, "kind": "stage" if number else "baseline", "primary_variable": f"s{number}",
        "stage": "decided" if decision else "training", "decision": decision, "reason_code": fields.pop("code", ""),
        "run_id": f"run-{number}", "model_version_id": f"mv-run-{number}", "blockers": [], **fields,
    }  # fmt: skip


def test_a_blocked_stage_ends_the_cascade_with_its_blockers_and_a_shipped_final_completes_it() -> None:
    blocker = {"code": "no_improvement", "message": "No comparison shows an improvement.", "next_action": "x"}
    stopped = [iteration(0, "baseline"), iteration(1, "ship"), iteration(2, "blocked", blockers=[blocker]),
               iteration(3, None)]  # fmt: skip
    status, reason = outcome_of(stopped) or ("", "")
    assert status == "blocked" and reason.startswith("gate_blocked: stage 2 s2 (run run-2): no_improvement: No")
    assert outcome_of([iteration(0, "baseline"), iteration(1, "ship"), iteration(2, None)]) is None
    failed = outcome_of([iteration(0, "baseline"), iteration(1, "failed", code="run_failed"), iteration(2, None)])
    assert failed == ("failed", "stage 1 s1: run_failed")
    status, reason = outcome_of([iteration(0, "baseline"), iteration(1, "ship"), iteration(2, "ship")]) or ("", "")
    assert status == "completed" and "mv-run-2" in reason


def test_the_final_stage_must_beat_the_start_and_not_fall_below_the_stage_before() -> None:
    better = {"delta": 0.2, "ci_low": 0.1, "ci_high": 0.3}
    assert cascade_findings({"delta": 0.0, "ci_low": -0.1, "ci_high": 0.1}, better) == []
    codes = [f["code"] for f in cascade_findings({"delta": -0.2, "ci_low": -0.3, "ci_high": -0.1}, better)]
    assert codes == ["cascade_regressed_from_previous_stage"]
    flat = {"delta": 0.05, "ci_low": -0.02, "ci_high": 0.1}
    assert [f["code"] for f in cascade_findings(better, flat)] == ["cascade_no_gain_over_start"]
    assert [f["code"] for f in cascade_findings(better, None)] == ["cascade_no_gain_over_start"]
