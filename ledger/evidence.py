"""Writes of artifacts, evaluation suites and results, comparisons, decisions, aliases, budgets, reports."""

from __future__ import annotations

import json
from typing import Any, Literal

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.likeness import likeness
from bashgym.client.redaction import redact_text
from bashgym.client.specs import (
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BudgetEntrySpec,
    ComparisonSpec,
    DecisionSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    ReportSpec,
)
from bashgym.client.validation import canonical_json, check_payload, identity_digest
from bashgym.ledger.queries import budget_summary, run_hours
from bashgym.ledger.rows import check_id_unused, not_found, require_project, to_record
from bashgym.ledger.runs import get_run_row
from bashgym.ledger.tx import Tx

# Where a result or comparison came from (migration 16): measured by the daemon itself, or asserted by a caller (an
# import). Only the daemon's code names it, never a request; anything not said to be measured is asserted.
Provenance = Literal["measured", "asserted"]


def content_id(prefix: str, identity: dict[str, Any]) -> str:
    """An id derived from content, so resending the same record replays instead of duplicating."""
    return f"{prefix}-{identity_digest(identity)[:24]}"


def _registered(
    tx: Tx, event_type: str, ws: str, project: str, entity: str, entity_id: str, run_id: str | None = None, **extra: Any
) -> None:
    tx.append_event(
        event_type,
        workspace_id=ws,
        project_id=project,
        run_id=run_id,
        payload={"entity": entity, "entity_id": entity_id, **extra},
    )


def register_artifact(tx: Tx, ws: str, project: str, spec: ArtifactSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    if spec.run_id:
        get_run_row(tx.conn, ws, project, spec.run_id)
    identity = spec.model_dump(exclude={"artifact_id"})
    artifact_id = spec.artifact_id or content_id("art", identity)
    row, replayed = tx.put(
        "artifacts",
        key={"workspace_id": ws, "project_id": project, "artifact_id": artifact_id},
        identity=identity,
        columns={**identity, "created_by": tx.actor.actor_id, "created_at": tx.now},
        label=f"Artifact {artifact_id!r}",
    )
    if not replayed:
        _registered(
            tx,
            "artifact.registered",
            ws,
            project,
            "artifact",
            artifact_id,
            spec.run_id,
            kind=spec.kind,
            sha256=spec.sha256,
            size_bytes=spec.size_bytes,
        )
    return to_record(row), replayed


def register_eval_suite(tx: Tx, ws: str, project: str, spec: EvalSuiteSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    contract = spec.scoring_contract
    if contract.primary_metric not in contract.metrics:
        raise InvalidInput(
            f"primary_metric {contract.primary_metric!r} is not among the contract's metrics.",
            hint=f"Declare its direction under scoring_contract.metrics.{contract.primary_metric}.",
        )
    identity = spec.model_dump(mode="json")
    row, replayed = tx.put(
        "eval_suites",
        key={"workspace_id": ws, "project_id": project, "suite_id": spec.suite_id},
        identity=identity,
        columns={
            "kind": spec.kind,
            "dataset_version_id": spec.dataset_version_id,
            "scoring_contract_json": canonical_json(identity["scoring_contract"]),
            "code_digest": spec.code_digest,
            "is_protected": int(spec.is_protected),
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Evaluation suite {spec.suite_id!r}",
    )
    if not replayed:
        _registered(tx, "eval_suite.registered", ws, project, "eval_suite", spec.suite_id)
    return to_record(row), replayed


def record_eval_result(
    tx: Tx, ws: str, project: str, spec: EvalResultSpec, *, provenance: Provenance = "asserted"
) -> tuple[dict[str, Any], bool]:
    """A result, with its provenance part of its identity: the same figures imported are a record of their own,
    and never replay or overwrite a measured one."""
    require_project(tx.conn, ws, project)
    if tx.fetch_one("eval_suites", {"workspace_id": ws, "project_id": project, "suite_id": spec.suite_id}) is None:
        raise not_found("evaluation suite", spec.suite_id, project, f"bashgym ledger evaluations --project {project}")
    if spec.run_id:
        get_run_row(tx.conn, ws, project, spec.run_id)
    check_payload(spec.details, field="details")
    identity = {**spec.model_dump(exclude={"result_id"}), "provenance": provenance}
    result_id = spec.result_id or content_id("res", identity)
    row, replayed = tx.put(
        "eval_results",
        key={"workspace_id": ws, "project_id": project, "result_id": result_id},
        identity=identity,
        columns={
            "suite_id": spec.suite_id,
            "run_id": spec.run_id,
            "attempt_id": spec.attempt_id,
            "model_version_id": spec.model_version_id,
            "status": spec.status,
            "metrics_json": canonical_json(spec.metrics),
            "sample_count": spec.sample_count,
            "is_simulation": int(spec.is_simulation),
            "details_json": canonical_json(spec.details),
            "provenance": provenance,
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Evaluation result {result_id!r}",
    )
    if not replayed:
        _registered(
            tx,
            "eval_result.recorded",
            ws,
            project,
            "eval_result",
            result_id,
            spec.run_id,
            suite_id=spec.suite_id,
            status=spec.status,
            provenance=provenance,
        )
    return to_record(row), replayed


def record_comparison(
    tx: Tx, ws: str, project: str, spec: ComparisonSpec, *, provenance: Provenance = "asserted"
) -> tuple[dict[str, Any], bool]:
    """A comparison is measured only when the daemon computed it (`provenance`) of two measured results: one
    standing on an imported figure is asserted, whoever computed it."""
    require_project(tx.conn, ws, project)
    results = [_result(tx, ws, project, rid) for rid in (spec.baseline_result_id, spec.candidate_result_id)]
    if any(r["provenance"] != "measured" for r in results):
        provenance = "asserted"
    if results[0]["suite_id"] != results[1]["suite_id"]:
        raise InvalidInput(
            f"Result {spec.baseline_result_id} is on suite {results[0]['suite_id']!r} and "
            f"{spec.candidate_result_id} on {results[1]['suite_id']!r}; results compare only on the exact same suite.",
            hint="Evaluate both models on one suite, then compare those results.",
        )
    check_payload(spec.details, field="details")
    # Whether the two were made alike is the ledger's to say, from their settings, whatever a caller claimed.
    made = likeness(*({"details": json.loads(r["details_json"] or "{}")} for r in results))
    spec = spec.model_copy(update={"details": {**spec.details, **made}})
    identity = {**spec.model_dump(exclude={"comparison_id"}), "provenance": provenance}
    comparison_id = spec.comparison_id or content_id("cmp", identity)
    row, replayed = tx.put(
        "comparisons",
        key={"workspace_id": ws, "project_id": project, "comparison_id": comparison_id},
        identity=identity,
        columns={
            "suite_id": results[0]["suite_id"],
            "baseline_result_id": spec.baseline_result_id,
            "candidate_result_id": spec.candidate_result_id,
            "primary_metric": spec.primary_metric,
            "delta": spec.delta,
            "ci_low": spec.ci_low,
            "ci_high": spec.ci_high,
            "details_json": canonical_json(spec.details),
            "provenance": provenance,
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Comparison {comparison_id!r}",
    )
    if not replayed:
        _registered(tx, "comparison.recorded", ws, project, "comparison", comparison_id, provenance=provenance)
    return to_record(row), replayed


def _result(tx: Tx, ws: str, project: str, result_id: str) -> dict[str, Any]:
    row = tx.fetch_one("eval_results", {"workspace_id": ws, "project_id": project, "result_id": result_id})
    if row is None:
        raise not_found("evaluation result", result_id, project, f"bashgym ledger evaluations --project {project}")
    return row


def record_decision(tx: Tx, ws: str, project: str, spec: DecisionSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    if spec.run_id:
        get_run_row(tx.conn, ws, project, spec.run_id)
    identity = {**spec.model_dump(exclude={"decision_id"}), "actor": tx.actor.actor_id}
    decision_id = spec.decision_id or content_id("dec", identity)
    row, replayed = tx.put(
        "decisions",
        key={"workspace_id": ws, "project_id": project, "decision_id": decision_id},
        identity=identity,
        columns={
            "decision_type": spec.decision_type,
            "outcome": spec.outcome,
            "rationale": spec.rationale,
            "run_id": spec.run_id,
            "evidence_refs_json": canonical_json(spec.evidence_refs),
            "actor": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Decision {decision_id!r}",
    )
    if not replayed:
        _registered(
            tx,
            "decision.recorded",
            ws,
            project,
            "decision",
            decision_id,
            spec.run_id,
            decision_type=spec.decision_type,
            outcome=spec.outcome,
        )
    return to_record(row), replayed


def move_alias(tx: Tx, ws: str, project: str, spec: AliasMove) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    key = {"workspace_id": ws, "project_id": project, "model_version_id": spec.model_version_id}
    if tx.fetch_one("model_versions", key) is None:
        raise not_found("model version", spec.model_version_id, project, f"bashgym ledger context --project {project}")
    current = tx.fetch_one("model_aliases", {"workspace_id": ws, "project_id": project, "alias": spec.alias})
    if current is not None and current["model_version_id"] == spec.model_version_id:
        return current, True
    previous = current["model_version_id"] if current else None
    tx.conn.execute(
        "INSERT INTO model_aliases (workspace_id, project_id, alias, model_version_id, updated_by, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, project_id, alias) DO UPDATE SET "
        "model_version_id = excluded.model_version_id, updated_by = excluded.updated_by, "
        "updated_at = excluded.updated_at",
        (ws, project, spec.alias, spec.model_version_id, tx.actor.actor_id, tx.now),
    )
    tx.conn.execute(
        "INSERT INTO model_alias_history (workspace_id, project_id, alias, model_version_id, previous_version_id, "
        "decision_id, moved_by, moved_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (ws, project, spec.alias, spec.model_version_id, previous, spec.decision_id, tx.actor.actor_id, tx.now),
    )
    tx.append_event(
        "alias.moved",
        workspace_id=ws,
        project_id=project,
        payload={"alias": spec.alias, "model_version_id": spec.model_version_id, "previous_version_id": previous},
    )
    stored = tx.fetch_one("model_aliases", {"workspace_id": ws, "project_id": project, "alias": spec.alias})
    assert stored is not None
    return stored, False


def add_budget_entry(tx: Tx, ws: str, project: str, spec: BudgetEntrySpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    identity = spec.model_dump()
    row, replayed = tx.put(
        "budget_entries",
        key={"workspace_id": ws, "project_id": project, "entry_id": spec.entry_id},
        identity=identity,
        columns={
            "scope": spec.scope,
            "kind": spec.kind,
            "gpu_hours": spec.gpu_hours,
            "runs": spec.runs,
            "reason": spec.reason,
            "run_id": spec.run_id,
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Budget entry {spec.entry_id!r}",
    )
    if not replayed:
        # What the scope holds right after this entry, so readers of the event see the facts of its time.
        after = budget_summary(tx.conn, ws, project, spec.scope)
        _registered(
            tx,
            "budget.entry",
            ws,
            project,
            "budget_entry",
            spec.entry_id,
            spec.run_id,
            kind=spec.kind,
            scope=spec.scope,
            remaining=after["remaining"],
            granted={unit: after["limit"][unit] + after["amended"][unit] for unit in ("gpu_hours", "runs")},
        )
    return to_record(row), replayed


def settle_reservation(
    tx: Tx, ws: str, project: str, run_id: str, status: str, gpus: int, *, gpu_hours: float | None = None
) -> None:
    """Release a run's launch reservation (`<run>.reserve`) and settle the hours it held its compute times its
    GPUs (or `gpu_hours`, as its scheduler measured them), in the transaction that records its end: no end is left
    unsettled. Nothing without a reservation, nothing twice."""
    key = {"workspace_id": ws, "project_id": project}
    if tx.fetch_one("budget_entries", {**key, "entry_id": f"{run_id}.reserve"}) is None:
        return
    if tx.fetch_one("budget_entries", {**key, "entry_id": f"{run_id}.settle"}) is not None:
        return
    hours = run_hours(tx.conn, ws, project, run_id) * gpus if gpu_hours is None else gpu_hours
    for kind, amount in (("release", 0.0), ("settle", hours)):
        spec = BudgetEntrySpec(
            entry_id=f"{run_id}.{kind}", kind=kind, runs=1, gpu_hours=amount, run_id=run_id, reason=f"run {status}"
        )
        add_budget_entry(tx, ws, project, spec)


def record_report(tx: Tx, ws: str, project: str, spec: ReportSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    check_payload(spec.manifest, field="manifest")
    check_id_unused(tx.conn, "reports", "report_id", spec.report_id, ws, project, label="Report")
    row, replayed = tx.put(
        "reports",
        key={"workspace_id": ws, "project_id": project, "report_id": spec.report_id},
        identity=spec.model_dump(),
        columns={
            "kind": spec.kind,
            "title": spec.title,
            "manifest_json": canonical_json(spec.manifest),
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Report {spec.report_id!r}",
    )
    if not replayed:
        _registered(tx, "report.recorded", ws, project, "report", spec.report_id)
    return to_record(row), replayed


def add_annotation(tx: Tx, ws: str, project: str, spec: AnnotationSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    if spec.run_id:
        get_run_row(tx.conn, ws, project, spec.run_id)
    if (
        spec.experiment_id
        and tx.fetch_one(
            "experiments", {"workspace_id": ws, "project_id": project, "experiment_id": spec.experiment_id}
        )
        is None
    ):
        raise NotFound(
            f"No experiment {spec.experiment_id!r} in project {project!r}.",
            hint=f"See existing ones with bashgym experiment list --project {project}.",
        )
    cursor = tx.append_event(
        "annotation.added",
        workspace_id=ws,
        project_id=project,
        experiment_id=spec.experiment_id,
        run_id=spec.run_id,
        payload={"text": spec.text},
    )
    text = redact_text(spec.text)
    return {"cursor": cursor, "text": text, "run_id": spec.run_id, "experiment_id": spec.experiment_id}, False


def record_gate(
    tx: Tx, ws: str, project: str, run_id: str, verdict: dict[str, Any], evidence_digest: str, asked_by: str
) -> tuple[dict[str, Any], bool]:
    """A `gate.evaluated` event for the run, unless its latest one already judged this very evidence (replayed)."""
    get_run_row(tx.conn, ws, project, run_id)
    last = tx.conn.execute(
        "SELECT cursor, payload_json FROM events WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
        "AND event_type = 'gate.evaluated' ORDER BY cursor DESC LIMIT 1",
        (ws, project, run_id),
    ).fetchone()
    if last is not None and json.loads(last[1])["evidence_digest"] == evidence_digest:
        return {"cursor": int(last[0]), "evidence_digest": evidence_digest}, True

    def findings(kind: str) -> list[dict[str, str]]:
        return [{k: str(f[k]) for k in ("code", "message", "next_action")} for f in verdict.get(kind, [])]

    payload = {
        "ship": bool(verdict["ship"]),
        "blockers": findings("blockers"),
        "warnings": findings("warnings"),
        "evidence_digest": evidence_digest,
        "asked_by": asked_by,
    }
    cursor = tx.append_event("gate.evaluated", workspace_id=ws, project_id=project, run_id=run_id, payload=payload)
    return {"cursor": cursor, "evidence_digest": evidence_digest}, False
