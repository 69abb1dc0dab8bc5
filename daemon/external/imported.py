"""Imported runs: what another tracker (MLflow) recorded, brought in by `bashgym import mlflow` (docs/imports.md).

The CLI reads the tracker with the user's network and credentials and sends the runs here in bounded batches; the
daemon fetches nothing. Each MLflow run becomes one run (source_system `mlflow`, lane `imported`), found again by
its tracking URI, the project named and its MLflow run id, so importing twice adds nothing, and a run that grew
since gains only its new points. Its params, tags, times and artifact listing are a `run.imported` event, recorded
again only when they changed. An imported run is never evidence (promotion.py's `imported_run`).
"""

from __future__ import annotations

from typing import Any

from bashgym.client.imports import IMPORTED_LANE, IMPORTED_TARGET, MLFLOW, ImportedRun, MlflowImport, public_uri
from bashgym.client.redaction import redact, redact_url
from bashgym.client.specs import Actor, MetricBatch, RunRegistration, RunTransition
from bashgym.client.states import TERMINAL, is_allowed
from bashgym.client.tags import MAX_TAGS, is_tag
from bashgym.client.validation import RAW_DATA_KEYS, canonical_json, is_secret_key, sha256_text
from bashgym.ledger.store import Ledger

# RUNNING is `unknown`, not `running`: BashGym cannot watch a process it only read about, and `unknown` is the state
# of a run it cannot prove; a later import moves it on to how MLflow says it ended.
STATUS = {
    "FINISHED": "completed",
    "FAILED": "failed",
    "KILLED": "cancelled",
    "RUNNING": "unknown",
    "SCHEDULED": "unknown",
}
IMPORTED_EVENT = "run.imported"


def source_key(tracking_uri: str, project: str, mlflow_run_id: str) -> str:
    """The ledger's source_run_id of an MLflow run imported for `project`: the same run gives the same row."""
    place = sha256_text(canonical_json([tracking_uri, project]))[:16]
    return f"{place}-{mlflow_run_id}"


def stored_uri(tracking_uri: str) -> str:
    """The tracking URI as provenance: no userinfo, query, fragment or token-shaped path segment."""
    return redact_url(public_uri(tracking_uri))


async def record_import(
    ledger: Ledger, actor: Actor, ws: str, project: str, context: dict[str, Any] | None, batch: MlflowImport
) -> dict[str, Any]:
    """Record each run of the batch; answer what became of each (new, updated, unchanged) and the points added.

    `context`: the tracking context composed from the versions the import named, else None (`unassigned`)."""
    uri = stored_uri(batch.tracking_uri)
    runs = [await _record_run(ledger, actor, ws, project, context, batch, uri, item) for item in batch.runs]
    return {"tracking_uri": uri, "experiment_id": batch.experiment_id, "runs": runs}


async def _record_run(
    ledger: Ledger,
    actor: Actor,
    ws: str,
    project: str,
    context: dict[str, Any] | None,
    batch: MlflowImport,
    uri: str,
    item: ImportedRun,
) -> dict[str, Any]:
    # Several transactions: a batch cut short is completed by importing again, each write being idempotent.
    provenance = {
        "system": MLFLOW,
        "tracking_uri": uri,
        "experiment_id": batch.experiment_id,
        "run_id": item.source_run_id,
        "project": project,
    }
    registration = RunRegistration(
        source_system=MLFLOW,
        source_run_id=source_key(uri, project, item.source_run_id),
        method="custom",
        tracking_context=context,
        compute_target=IMPORTED_TARGET,
        config={"compute_target": IMPORTED_TARGET, "lane": IMPORTED_LANE, "surface": MLFLOW, "provenance": provenance},
        correlation_id=actor.correlation_id,
    )
    registered = await ledger.register_run(actor, ws, registration)
    recorded_in, run_id = registered.record["project_id"], registered.record["run_id"]
    changed = await _record_values(ledger, actor, ws, recorded_in, run_id, batch, item)
    run = await ledger.get_run(ws, recorded_in, run_id)
    inserted = 0
    if item.points:
        points = MetricBatch(run_id=run_id, attempt_id=run["attempts"][-1]["attempt_id"], points=item.points)
        inserted = int((await ledger.ingest_metrics(actor, ws, recorded_in, points)).record["inserted"])
    moved = await _follow_status(ledger, actor, ws, run, item.status)
    outcome = "new" if not registered.replayed else "updated" if changed or moved or inserted else "unchanged"
    return {
        "source_run_id": item.source_run_id,
        "run_id": run_id,
        "project_id": recorded_in,
        "outcome": outcome,
        "points_inserted": inserted,
    }


async def _record_values(
    ledger: Ledger, actor: Actor, ws: str, project: str, run_id: str, batch: MlflowImport, item: ImportedRun
) -> bool:
    """Record the run's params, tags, times and artifact listing unless they stand as last recorded."""
    values = redact(imported_values(batch, item))  # as the ledger stores it, so an unchanged run compares equal
    recorded = await ledger.run_event_payloads(ws, project, run_id, IMPORTED_EVENT)
    if recorded and recorded[-1] == values:
        return False
    run = await ledger.get_run(ws, project, run_id)
    await ledger.append_run_event(actor, ws, project, run_id, run["attempts"][-1]["attempt_id"], IMPORTED_EVENT, values)
    # Its tags are the run's tags like any run's (ledger/tags.py), those BashGym can hold as they are; the rest
    # stay in the run.imported record only.
    held = [(key, value) for key, value in values["tags"].items() if is_tag(key, value)][:MAX_TAGS]
    if held:
        await ledger.set_tags(actor, ws, project, "run", run_id, dict(held))
    return True


def imported_values(batch: MlflowImport, item: ImportedRun) -> dict[str, Any]:
    """The `run.imported` payload; a param or tag whose name reads as a secret or raw data is withheld, by name."""
    named = (("params", item.params), ("tags", item.tags))
    withheld = [f"{kind}.{key}" for kind, values in named for key in values if _refused(key)]
    return {
        "system": MLFLOW,
        "source_run_id": item.source_run_id,
        "experiment_name": batch.experiment_name,
        "name": item.name,
        "status": item.status,
        "start_time_ms": item.start_time_ms,
        "end_time_ms": item.end_time_ms,
        "params": {k: v for k, v in item.params.items() if not _refused(k)},
        "tags": {k: v for k, v in item.tags.items() if not _refused(k)},
        "truncated": item.truncated,
        "withheld": withheld,
        "metric_names": item.metric_names,
        "artifacts": [a.model_dump() for a in item.artifacts],
        "artifacts_complete": item.artifacts_complete,
    }


def _refused(key: str) -> bool:
    return is_secret_key(key) or key.lower() in RAW_DATA_KEYS


async def _follow_status(ledger: Ledger, actor: Actor, ws: str, run: dict[str, Any], mlflow_status: str) -> bool:
    """Move the run to the state MLflow reports (through `running` from `queued`); False where it stands there."""
    target, current = STATUS[mlflow_status], str(run["status"])
    if current == target or current in TERMINAL:
        return False  # a run MLflow reopened after it ended stays as first imported: the ledger's ends are final
    reason = f"imported from MLflow, where it is {mlflow_status}"
    project, run_id = run["project_id"], run["run_id"]
    if not is_allowed(current, target):
        await ledger.transition_run(actor, ws, project, run_id, RunTransition(status="running", reason=reason))
    await ledger.transition_run(actor, ws, project, run_id, RunTransition(status=target, reason=reason))
    return True
