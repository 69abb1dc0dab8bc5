"""A run's evidence read from the ledger, its gate verdicts recorded, and its kept model registered: the steps
the evidence routes and the cascade runner share, so a campaign asks the gate exactly as a person does, without
an HTTP call."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from bashgym.client.errors import NotFound
from bashgym.client.specs import Actor
from bashgym.client.validation import canonical_json, check_identifier, sha256_text
from bashgym.daemon.evidence.promotion import Evidence, downstream_of
from bashgym.daemon.evidence.sources import run_model_spec
from bashgym.daemon.evidence.training_data import judged_training_rows
from bashgym.ledger.store import Ledger


async def gather_evidence(ledger: Ledger, ws: str, project: str, run_id: str) -> Evidence:
    """Everything the gate reads about one run: its results, their comparisons and baselines, cards, lineage."""
    run = await ledger.get_run(ws, project, run_id)
    listing = await ledger.list_evaluations(ws, project)
    results = [r for r in listing["results"] if r.get("run_id") == run_id]
    comparisons = await ledger.comparisons_with_candidates(ws, project, [r["result_id"] for r in results])
    by_id = {r["result_id"]: r for r in listing["results"]}
    baselines = {
        c["baseline_result_id"]: by_id[c["baseline_result_id"]] for c in comparisons if c["baseline_result_id"] in by_id
    }
    suites = {s["suite_id"]: s for s in listing["suites"]}
    runcards = await ledger.runcards_of_run(ws, project, run_id)
    environment = await ledger.find_environment(ws, project, run.get("environment_id"))
    base_model_id, start_version = None, None
    if run.get("model_version_id"):
        start_version = await ledger.get_model_version(ws, project, run["model_version_id"])
        base_model_id = start_version["model_id"]
    environment_digest = environment["runtime_digest"] if environment else None
    baseline_models = {}  # which model each baseline evaluated: distillation asks for the teacher among them
    for result_id, baseline in baselines.items():
        if baseline.get("model_version_id"):
            with contextlib.suppress(NotFound):
                baseline_models[result_id] = await ledger.get_model_version(ws, project, baseline["model_version_id"])
    downstream = await _downstream(ledger, ws, project, run) if run.get("method") == "reward_model" else []
    training_data = await asyncio.to_thread(judged_training_rows, run)
    return Evidence(
        run,
        results,
        comparisons,
        baselines,
        suites,
        runcards,
        environment_digest,
        base_model_id,
        baseline_models,
        downstream,
        start_version=start_version,
        training_data=training_data,
    )


async def alias_holder(ledger: Ledger, ws: str, project: str, alias: str) -> dict[str, Any] | None:
    """The model version `alias` points at now (its record, with `alias`): what `promote decide` must beat."""
    holder = await ledger.alias_holder(ws, project, alias)
    if holder is None:
        return None
    return {**await ledger.get_model_version(ws, project, holder), "alias": alias}


async def _downstream(ledger: Ledger, ws: str, project: str, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The project's runs rewarded by this reward model, each with what its own evidence shows against its start
    (promotion.downstream_of): a reward model's downstream evidence."""
    rewarded = await ledger.runs_rewarded_by(ws, project, run["run_id"])
    return [downstream_of(await gather_evidence(ledger, ws, project, policy["run_id"])) for policy in rewarded]


def evidence_digest(evidence: Evidence, verdict: dict[str, Any]) -> str:
    """What the gate read, as ids and states: equal digests mean the same evidence and so the same verdict."""
    read = {
        "run": [evidence.run["run_id"], evidence.run["status"], evidence.run.get("is_simulation")],
        "results": sorted([r["result_id"], r["status"]] for r in evidence.results),
        "comparisons": sorted(c["comparison_id"] for c in evidence.comparisons),
        "runcards": sorted(card["card_id"] for card in evidence.runcards),
        "verdict": [verdict["ship"], sorted(f["code"] for f in [*verdict["blockers"], *verdict["warnings"]])],
    }
    return sha256_text(canonical_json(read))


async def record_gate(
    ledger: Ledger,
    actor: Actor,
    ws: str,
    project: str,
    evidence: Evidence,
    verdict: dict[str, Any],
    asked_by: str,
) -> dict[str, Any]:
    """The verdict as a `gate.evaluated` event (once per state of the evidence), naming who asked."""
    asked = check_identifier(asked_by[:64], field="asked_by")
    run_id = evidence.run["run_id"]
    written = await ledger.record_gate(actor, ws, project, run_id, verdict, evidence_digest(evidence, verdict), asked)
    return {**written.record, "replayed": written.replayed}


def run_model_version_id(run_id: str) -> str:
    """The id a run's kept model is registered under: the same run always gives the same version."""
    return f"mv-{run_id}"[:128]


async def register_run_model(ledger: Ledger, actor: Actor, ws: str, project: str, evidence: Evidence) -> str:
    """The run's kept model as a model version, with its lineage (parent: the version it trained from), file
    digests and kind (what its method made). Idempotent: registering the same run again replays."""
    spec = run_model_spec(
        evidence.run,
        version_id=run_model_version_id(evidence.run["run_id"]),
        model_id=evidence.base_model_id or "bashgym-model",
    )
    written = await ledger.register_model_version(actor, ws, project, spec)
    return str(written.record["model_version_id"])
