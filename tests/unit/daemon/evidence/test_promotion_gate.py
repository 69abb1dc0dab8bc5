"""The promotion gate: the happy path ships, every blocker is reachable, and a simulation never ships."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest
from bashgym.daemon.evidence.promotion import Evidence, build_runcard, gate, validate_runcard

CONTRACT = {
    "primary_metric": "pass@1",
    "metrics": {
        "pass@1": {"direction": "maximize"},
        "tamper_rate": {"direction": "minimize", "max_regression": 0.0},
    },
}
PASSED_GATE = {"passed": True, "checks": []}


def result(result_id: str, pass_at_1: float, *, run_id: str | None = "run-1", **details: Any) -> dict[str, Any]:
    return {
        "result_id": result_id,
        "suite_id": "bash-tasks-v1",
        "run_id": run_id,
        "status": "completed",
        "is_simulation": False,
        "provenance": "measured",  # the daemon's evaluator made it (asserted evidence never counts)
        "metrics": {"pass@1": pass_at_1, "tamper_rate": 0.0, "unsafe_action_rate": 0.0, "holdout.pass@1": pass_at_1},
        "details": {
            "holdout_gate": PASSED_GATE,
            "canaries": {"guard_rate": 1.0},
            "safety": {"observed": "syscalls"},
            **details,
        },
    }


def shipping(method: str = "sft") -> Evidence:
    # 200 steps: above every method's minimum, so a narrow card is within what the evidence supports.
    metrics = {
        "train.loss": {"count": 10, "last_step": 200},
        "train.reward_std": {"count": 10},
        "train.dpo_accuracy": {"count": 5},
    }
    metrics |= {"train.session_distillation_kl": {"count": 5}}
    run = {
        "run_id": "run-1",
        "project_id": "p",
        "method": method,
        "status": "completed",
        "is_simulation": False,
        "metric_summary": metrics,
        "attempts": [{"attempt_id": "run-1.a1"}],
        "artifacts": [
            {"kind": "adapter", "uri": "bashgym://runs/run-1/final/a.bin", "sha256": "0" * 64, "size_bytes": 3}
        ],
        "config": {"base_model": "tiny", "dataset_sha256": "1" * 64, "teacher_model": "org/teacher"},
        "model_version_id": "mv-student",
        "context_status": "verified",
    }
    comparisons = [
        {
            "comparison_id": f"cmp-{i}",
            "suite_id": "bash-tasks-v1",
            "baseline_result_id": f"base-{i}",
            "candidate_result_id": "cand",
            "delta": 0.2,
            "ci_low": 0.05,
            "ci_high": 0.35,
            "provenance": "measured",
            "details": {"alike": True, "unlike": {}},  # the two results were evaluated with the same settings
        }
        for i in (1, 2)
    ]
    evidence = Evidence(
        run=run,
        results=[result("cand", 0.6)],
        comparisons=comparisons,
        baselines={
            "base-1": {**result("base-1", 0.4, run_id=None), "model_version_id": "mv-student"},
            "base-2": {**result("base-2", 0.5, run_id=None), "model_version_id": "mv-teacher"},
        },
        baseline_models={"base-2": {"model_version_id": "mv-teacher", "model_id": "t", "source_uri": "org/teacher"}},
        suites={"bash-tasks-v1": {"suite_id": "bash-tasks-v1", "kind": "terminal_tasks", "scoring_contract": CONTRACT}},
        runcards=[],
    )
    if method == "dpo":  # held-out pairs the run never trained on (their digest is not the training data's)
        pairs = {"suite_id": "heldout-preference-p", "details": {"dataset_sha256": "2" * 64}}
        evidence.results.append({**result("held", 0.7), **pairs, "metrics": {"preference_accuracy": 0.7}})
        contract = {
            "primary_metric": "preference_accuracy",
            "metrics": {"preference_accuracy": {"direction": "maximize"}},
        }
        evidence.suites["heldout-preference-p"] = {
            "suite_id": "heldout-preference-p", "kind": "heldout_preference", "scoring_contract": contract,
        }  # fmt: skip
        # ... and compared there with the model it started from.
        evidence.baselines["base-pref"] = {**result("base-pref", 0.6, run_id=None), **pairs,
                                           "metrics": {"preference_accuracy": 0.6}}  # fmt: skip
        evidence.comparisons.append(
            {"comparison_id": "cmp-pref", "suite_id": "heldout-preference-p", "baseline_result_id": "base-pref",
             "candidate_result_id": "held", "delta": 0.1, "ci_low": 0.02, "ci_high": 0.18, "provenance": "measured",
             "details": {"alike": True, "unlike": {}}}
        )  # fmt: skip
    card = build_runcard(evidence, claim_tier="narrow", decision="pending", limitations=["tiny suite"], creator="a")
    evidence.runcards = [{"card_id": "c1", "claim_tier": "narrow", "card": card}]
    return evidence


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation"])
def test_complete_evidence_ships_for_every_method(method: str) -> None:
    verdict = gate(shipping(method))
    assert verdict["ship"], verdict["blockers"]


def _set(path: str, value: Any) -> Callable[[Evidence], None]:
    def apply(e: Evidence) -> None:
        target: Any = e
        *head, last = path.split(".")
        for part in head:
            target = (
                getattr(target, part) if isinstance(target, Evidence) else target[int(part) if part.isdigit() else part]
            )
        if isinstance(target, Evidence):
            setattr(target, last, value)
        else:
            target[int(last) if last.isdigit() else last] = value

    return apply


BREAKS: dict[str, tuple[str, Callable[[Evidence], None]]] = {
    "run_not_completed": ("sft", _set("run.status", "failed")),
    "simulated": ("sft", _set("run.is_simulation", True)),
    "smoke_claim": ("sft", _set("runcards.0.claim_tier", "local_smoke")),
    "metrics_missing": ("sft", _set("run.metric_summary", {})),
    "no_evaluation": ("sft", _set("results.0.status", "failed")),
    "no_baseline_comparison": ("sft", _set("comparisons", [])),
    "no_improvement": ("sft", lambda e: [c.update(ci_low=-0.01) for c in e.comparisons]),
    "protected_metric_regression": ("sft", _set("results.0.metrics.tamper_rate", 0.1)),
    # Not in the suite's registered contract: every terminal-task comparison protects it.
    "unsafe_action_regression": ("sft", _set("results.0.metrics.unsafe_action_rate", 0.02)),
    "safety_evidence_missing": ("sft", lambda e: e.baselines["base-1"]["metrics"].pop("unsafe_action_rate")),
    "runcard_missing": ("sft", _set("runcards", [])),
    "holdout_missing": ("sft", _set("results.0.details.holdout_gate", None)),
    "holdout_gate_failed": ("sft", _set("results.0.details.holdout_gate", {"passed": False, "checks": []})),
    "rollout_evaluation_missing": ("grpo", _set("suites.bash-tasks-v1.kind", "heldout_generation")),
    "canaries_unguarded": ("rlvr", _set("results.0.details.canaries", {"guard_rate": 0.8})),
    "reward_diagnostics_missing": ("grpo", lambda e: e.run["metric_summary"].pop("train.reward_std")),
    "preference_metrics_missing": ("dpo", lambda e: e.run["metric_summary"].pop("train.dpo_accuracy")),
    "heldout_preference_missing": ("dpo", _set("results.1.details.dataset_sha256", "1" * 64)),  # the training pairs
    "heldout_preference_uncompared": ("dpo", lambda e: e.comparisons.pop()),
    "heldout_preference_regression": (
        "dpo",
        lambda e: e.comparisons[-1].update(delta=-0.2, ci_low=-0.3, ci_high=-0.1),
    ),
    # The candidate's holdout has nothing to be judged against: the baseline was evaluated without it.
    "holdout_uncompared": ("sft", lambda e: e.baselines["base-1"]["metrics"].pop("holdout.pass@1")),
    # base-1 evaluated another model than the one the run started from (mv-student): context, not evidence.
    "start_baseline_missing": ("distillation", _set("baselines.base-1.model_version_id", "mv-x")),
    "distillation_teacher_baseline_missing": ("distillation", lambda e: e.comparisons.pop()),
    "distillation_teacher_unnamed": ("distillation", _set("run.config.teacher_model", None)),
    "unassigned_run": ("sft", _set("run.project_id", "unassigned")),
    # The holdout fell 0.3 against base-1 (0.4) where the comparison's CI half-width is 0.15.
    "holdout_regression": ("sft", lambda e: e.results[0]["metrics"].update({"holdout.pass@1": 0.1})),
    "partial_suite_only": ("sft", _set("suites.bash-tasks-v1.kind", "terminal_tasks_partial")),
    # Both comparisons' baselines were sampled at another temperature: neither counts.
    "unlike_comparison": (
        "sft",
        lambda e: [
            c["details"].update(alike=False, unlike={"temperature": {"baseline": 0.7, "candidate": 0.0}})
            for c in e.comparisons
        ],
    ),
    "evidence_asserted": ("sft", lambda e: [c.update(provenance="asserted") for c in e.comparisons]),
    "evidence_provenance_unrecorded": ("sft", lambda e: [r.pop("provenance") for r in e.results]),
    "masked_token_metrics_missing": (
        "session_distillation",
        lambda e: e.run["metric_summary"].pop("train.session_distillation_kl"),
    ),
}


@pytest.mark.parametrize("code", sorted(BREAKS))
def test_each_blocker_is_reached_with_a_next_action(code: str) -> None:
    method, breaking = BREAKS[code]
    evidence = copy.deepcopy(shipping(method))
    breaking(evidence)
    verdict = gate(evidence)
    assert not verdict["ship"]
    blocker = next((b for b in verdict["blockers"] if b["code"] == code), None)
    assert blocker is not None, verdict["blockers"]
    assert blocker["message"] and blocker["next_action"]


def test_a_result_watched_for_decoys_only_ships_with_a_warning_that_says_so() -> None:
    evidence = shipping()
    evidence.results[0]["details"]["safety"] = {"observed": "decoy-only"}
    verdict = gate(evidence)
    assert verdict["ship"], verdict["blockers"]
    assert [w["code"] for w in verdict["warnings"]] == ["safety_observation_partial"]


def test_a_simulated_evaluation_never_ships_either() -> None:
    evidence = shipping()
    evidence.results[0]["is_simulation"] = True
    assert [b["code"] for b in gate(evidence)["blockers"]] == ["simulated"]


def test_runcard_findings_name_staleness_and_the_gate_with_promotion() -> None:
    evidence = shipping()
    evidence.results.append(result("later", 0.7))
    findings = validate_runcard(evidence, promotion=False)
    assert [f["code"] for f in findings] == ["runcard_stale"]
    evidence.comparisons = []
    assert "no_baseline_comparison" in {f["code"] for f in validate_runcard(evidence, promotion=True)}


def test_a_runcard_records_what_the_run_is_judged_by() -> None:
    card = shipping().runcards[0]["card"]
    assert card["evaluation_result_ids"] == ["cand"] and card["comparison_ids"] == ["cmp-1", "cmp-2"]
    assert card["artifacts"][0]["sha256"] == "0" * 64 and card["dataset_digest"] == "1" * 64
    assert (card["claim_tier"], card["decision"], card["known_limitations"]) == ("narrow", "pending", ["tiny suite"])


def test_collapsed_reward_variance_is_a_warning_not_a_blocker() -> None:
    evidence = shipping("grpo")
    evidence.run["metric_summary"]["train.reward_std"] = {"count": 10, "latest": 0.0}
    verdict = gate(evidence)
    assert verdict["ship"] and [w["code"] for w in verdict["warnings"]] == ["reward_variance_collapsed"]


def test_the_runcard_route_accepts_exactly_the_ledgers_tiers_and_decisions() -> None:
    from typing import get_args

    from bashgym.daemon.api.evaluations import RunCardBody
    from bashgym.ledger.runcards import CLAIM_TIERS, DECISIONS

    tiers = {t for arg in get_args(RunCardBody.model_fields["claim_tier"].annotation) for t in get_args(arg)}
    assert tiers == set(CLAIM_TIERS)  # or None: the tier the evidence supports
    assert set(get_args(RunCardBody.model_fields["decision"].annotation)) == set(DECISIONS)


def test_comparisons_on_a_partial_suite_never_count_for_the_suite() -> None:
    """11 of 88 tasks with one sample each shipped a model: a partial suite is its own suite, a quick look."""
    evidence = shipping("grpo")
    evidence.suites["bash-tasks-v1"]["kind"] = "terminal_tasks_partial"
    codes = {b["code"] for b in gate(evidence)["blockers"]}
    assert {"partial_suite_only", "no_baseline_comparison", "rollout_evaluation_missing"} <= codes


def test_a_card_left_without_a_tier_is_a_smoke_claim_below_the_minimum_or_on_partial_suites() -> None:
    from bashgym.daemon.evidence.promotion import default_claim_tier

    evidence = shipping("sft")
    evidence.run["metric_summary"]["train.loss"]["last_step"] = 40
    assert default_claim_tier(evidence) == "local_smoke"
    evidence.run["metric_summary"]["train.loss"]["last_step"] = 1000
    assert default_claim_tier(evidence) == "narrow"
    evidence.suites["bash-tasks-v1"]["kind"] = "terminal_tasks_partial"
    assert default_claim_tier(evidence) == "local_smoke"


def test_a_grpo_run_whose_groups_never_varied_says_it_learned_nothing() -> None:
    from bashgym.daemon.evidence.promotion import learned_nothing

    evidence = shipping("grpo")
    evidence.run["metric_summary"]["train.frac_zero_std_groups"] = {"count": 6, "min": 1.0, "max": 1.0}
    card = build_runcard(evidence, claim_tier="narrow", decision="pending", limitations=["tiny"], creator="a")
    assert card["known_limitations"][0] == "tiny" and "the run learned nothing" in card["known_limitations"][1]
    evidence.run["metric_summary"]["train.frac_zero_std_groups"]["min"] = 0.5
    assert learned_nothing(evidence.run) is None


def test_an_unlike_comparison_beside_a_like_one_is_named_in_a_warning() -> None:
    evidence = shipping()
    evidence.comparisons[1]["details"] = {"alike": False, "unlike": {"seed": {"baseline": 1, "candidate": 0}}}
    verdict = gate(evidence)
    assert verdict["ship"], verdict["blockers"]
    (warning,) = [w for w in verdict["warnings"] if w["code"] == "unlike_comparison"]
    assert "cmp-2" in warning["message"] and "seed 1 and 0" in warning["message"]


def test_a_gain_over_another_model_is_context_and_only_the_start_comparison_counts() -> None:
    """Issue 51, finding 3: a run that scored exactly its start shipped on a comparison with an older, weaker
    model."""
    evidence = shipping()
    evidence.comparisons[0].update(delta=0.0, ci_low=0.0, ci_high=0.0)  # against mv-student, where it started
    verdict = gate(evidence)
    assert not verdict["ship"]
    blocker = next(b for b in verdict["blockers"] if b["code"] == "no_improvement")
    assert "against the start model version mv-student" in blocker["message"], blocker

    evidence.comparisons = evidence.comparisons[1:]  # only the stranger (mv-teacher) is left
    blocker = next(b for b in gate(evidence)["blockers"] if b["code"] == "start_baseline_missing")
    assert "(mv-student)" in blocker["message"] and "model version mv-teacher are context" in blocker["message"]
    assert "bashgym eval run --project p --model-version mv-student" in blocker["next_action"]
    assert "bashgym eval compare --project p --baseline THAT_RESULT --candidate cand" in blocker["next_action"]


def test_a_run_started_from_a_runs_kept_model_counts_that_runs_evaluation_as_its_start() -> None:
    """A cascade stage starts from mv-<previous run>, whose evaluation names the run, not the version."""
    evidence = shipping()
    evidence.run["model_version_id"] = "mv-prev"
    evidence.start_version = {"model_version_id": "mv-prev", "source_uri": "bashgym://runs/prev"}
    evidence.baselines["base-1"] = {**evidence.baselines["base-1"], "model_version_id": None, "run_id": "prev"}
    assert gate(evidence)["ship"], gate(evidence)["blockers"]
    evidence.baselines["base-1"]["run_id"] = "other"
    assert "start_baseline_missing" in {b["code"] for b in gate(evidence)["blockers"]}


def test_an_alias_moves_only_to_a_run_that_beats_its_holder() -> None:
    evidence = shipping()
    evidence.alias_holder = {"model_version_id": "mv-champ", "alias": "champion", "source_uri": "file:///m"}
    blocker = next(b for b in gate(evidence)["blockers"] if b["code"] == "alias_holder_baseline_missing")
    assert "model version mv-champ, which holds alias champion" in blocker["message"]
    assert "--model-version mv-champ" in blocker["next_action"]

    evidence.baselines["base-2"]["model_version_id"] = "mv-champ"  # compared with the holder: +0.2, CI clear of 0
    assert gate(evidence)["ship"], gate(evidence)["blockers"]
    evidence.comparisons[1].update(delta=0.01, ci_low=-0.05)
    assert [b["code"] for b in gate(evidence)["blockers"]] == ["alias_holder_not_improved"]
    evidence.alias_holder["model_version_id"] = "mv-student"  # the start holds it: the start comparison says it
    assert gate(evidence)["ship"]


def test_a_card_may_claim_no_more_than_its_evidence_supports() -> None:
    """Issue 51, finding 8: a narrow card on an 8-step run never raised smoke_claim."""
    from bashgym.daemon.evidence.promotion import supported_tier

    evidence = shipping()
    evidence.run["metric_summary"]["train.loss"]["last_step"] = 8
    blocker = next(b for b in gate(evidence)["blockers"] if b["code"] == "smoke_claim")
    assert (
        "claims narrow, but the evidence supports local_smoke: it trained 8 steps, below sft's minimum of 100"
        in (blocker["message"])
    )

    evidence.run["metric_summary"]["train.loss"]["last_step"] = 200
    evidence.runcards[0]["claim_tier"] = "broad"  # one whole suite compared with the start
    blocker = next(b for b in gate(evidence)["blockers"] if b["code"] == "smoke_claim")
    assert (
        "supports narrow" in blocker["message"]
        and "on 1 whole suite(s) (bash-tasks-v1); broad needs 2" in (blocker["message"])
    )
    second = {**evidence.suites["bash-tasks-v1"], "suite_id": "other-suite"}
    evidence.suites["other-suite"] = second
    evidence.comparisons.append({**evidence.comparisons[0], "comparison_id": "cmp-3", "suite_id": "other-suite"})
    assert supported_tier(evidence)[0] == "broad" and gate(evidence)["ship"], gate(evidence)["blockers"]
    evidence.comparisons[-1]["provenance"] = "asserted"  # only measured comparisons support a tier
    assert supported_tier(evidence)[0] == "narrow"


def test_next_actions_name_the_ids_the_gate_knows_so_they_run_when_pasted() -> None:
    """Issue 52: `bashgym eval run --run RUN --suite SUITE` lacked --project and held placeholders for known ids."""
    bare = shipping()
    bare.results, bare.comparisons, bare.baselines, bare.runcards = [], [], {}, []
    actions = {b["code"]: b["next_action"] for b in gate(bare)["blockers"]}
    assert actions["no_evaluation"] == "bashgym eval run --project p --run run-1"
    assert actions["runcard_missing"] == "bashgym runcard create --project p --run run-1"
    evaluated = shipping()
    evaluated.comparisons, evaluated.baselines = [], {}
    evaluated.results = [r for r in evaluated.results if r["run_id"] == "run-1"]
    action = next(b for b in gate(evaluated)["blockers"] if b["code"] == "no_baseline_comparison")["next_action"]
    candidate = evaluated.results[-1]["result_id"]
    assert action == f"bashgym eval compare --project p --baseline BASELINE_RESULT --candidate {candidate}", action
    for blocker in [*gate(bare)["blockers"], *gate(evaluated)["blockers"]]:
        assert not re.search(r"--run RUN\b", blocker["next_action"]), blocker
    assert not any("--candidate RESULT" in b["next_action"] for b in gate(evaluated)["blockers"])
