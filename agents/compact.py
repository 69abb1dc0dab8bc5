"""Compact answers: an agent's context holds every answer it reads, so a tool answers the ids and the fields an
agent acts on (status, context status, key metrics, verdicts, blockers, next actions) and names what it left out
(`detail_omitted`); `detail: true` answers the daemon's whole object. A run after its evaluation was 24 KB, two
evaluation results 27 KB: per-task scores, artifacts with digests and hash-chained events are for a person or a
second look, not for deciding the next call."""

from __future__ import annotations

from typing import Any

# Fields of every record that say how it is stored, not what it is.
STORAGE = frozenset({"workspace_id", "identity_digest", "source_system", "source_run_id", "correlation_id"})
NEWEST = 5  # events of a project
NEWEST_RESULTS = 3  # evaluations of a run (a retriever's result is ~1 KB compact)


def run(record: dict[str, Any]) -> dict[str, Any]:
    """A run: its scalars, its latest attempt, its evaluations' metrics and its metric summary."""
    out = {k: v for k, v in record.items() if k not in STORAGE and not isinstance(v, dict | list)}
    out["anomalies"] = record.get("anomalies") or []
    out["metric_summary"] = record.get("metric_summary") or {}
    attempts = record.get("attempts") or []
    out["attempt_count"] = len(attempts)
    out["attempts"] = [_scalars(a) for a in attempts[-1:]]
    evaluations = record.get("evaluations") or []
    out["evaluation_count"] = len(evaluations)
    out["evaluations"] = [result(r) for r in evaluations[-NEWEST_RESULTS:]]
    environment = record.get("environment")
    out["environment"] = environment and {k: environment.get(k) for k in ("digest", "measured_by", "summary")}
    out["artifact_count"] = len(record.get("artifacts") or [])
    out["artifacts"] = None
    out.update(labels(record))
    out["detail_omitted"] = omitted(record, out)
    return out


def result(record: dict[str, Any]) -> dict[str, Any]:
    """An evaluation result: its ids, status and metrics (rounded), without its per-task details."""
    out = {k: v for k, v in record.items() if k not in STORAGE and k != "details"}
    out["metrics"] = {k: _rounded(v) for k, v in (record.get("metrics") or {}).items()}
    return out


def comparison(record: dict[str, Any]) -> dict[str, Any]:
    details = record.get("details") or {}
    out = {k: v for k, v in record.items() if k not in STORAGE and k != "details"}
    out["details"] = {k: details[k] for k in ("clusters", "paired_tasks", "method", "excludes_zero") if k in details}
    return out


def evaluations(listing: dict[str, Any]) -> dict[str, Any]:
    return {
        "suites": [{k: v for k, v in s.items() if k not in STORAGE} for s in listing.get("suites") or []],
        "results": [result(r) for r in listing.get("results") or []],
        "comparisons": [comparison(c) for c in listing.get("comparisons") or []],
        "detail_omitted": ["results[].details", "comparisons[].details"],
    }


def context(record: dict[str, Any]) -> dict[str, Any]:
    """A project's context with its newest events as one line each (kind, run, actor, when)."""
    recent = dict(record.get("recent") or {})
    events = recent.get("events") or []
    keep = ("cursor", "event_type", "run_id", "actor", "created_at")
    recent["events"] = [{k: e.get(k) for k in keep} for e in events[:NEWEST]]
    return {**record, "recent": recent, "detail_omitted": ["recent.events (payloads, and all but the newest)"]}


def plan(answer: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in answer.items() if k != "effective_config"}
    out["effective_config"] = None
    out["detail_omitted"] = ["effective_config"]
    return out


def rows(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A listing's rows as their scalars (a run row's config and lists are on the run itself), and tags if any."""
    return [
        {**_scalars(r), **({"key_metric": r["key_metric"]} if "key_metric" in r else {}), **labels(r)} for r in listing
    ]


def labels(record: dict[str, Any]) -> dict[str, Any]:
    """A record's tags (key=value, one string) and its note's text, each only when it has one."""
    tags, note = record.get("tags") or {}, record.get("note")
    out: dict[str, Any] = {"tags": " ".join(f"{k}={v}" for k, v in sorted(tags.items()))} if tags else {}
    return {**out, **({"note": note["text"]} if note else {})}


def omitted(whole: dict[str, Any], compact: dict[str, Any]) -> list[str]:
    return sorted(k for k in whole if k not in STORAGE and (k not in compact or compact[k] is None))


def _scalars(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in STORAGE and not isinstance(v, dict | list)}


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value
