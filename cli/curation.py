"""Activity receipts: curated, privacy-safe Markdown records of what happened (runs, evaluations,
decisions, campaigns, datasets, models) for the team's knowledge base.

A receipt (schema `bashgym.activity.v1`) is front matter plus sections, rendered from ledger rows and
stripped on the way out: credential-shaped values are redacted wherever they appear, and so are the values
of keys that name a secret (`api_key`, `hf_token`: the ledger's own rule), never of keys that merely mention
one (`token_level_loss` is a setting, `tokens_per_second` a measure); raw logs, rows, transcripts and metric
series become `[retained in BashGym]`; local absolute paths and `file://` URIs, also inside prose, become
`[local artifact: <name>]`; strings and lists are capped.
Rendering is deterministic (no wall-clock time in a receipt), so re-curating the same state gives
the same bytes and writes nothing. Pure functions only: the CLI fetches and writes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from bashgym.client.redaction import redact_text
from bashgym.client.validation import is_secret_key

SCHEMA = "bashgym.activity.v1"
KINDS = ("training-session", "run", "evaluation", "decision", "campaign", "dataset", "model")
PLURAL = {kind: f"{kind}s" for kind in KINDS}
REDACTED = "[redacted]"
RETAINED = "[retained in BashGym]"
MAX_STRING = 500
MAX_LIST = 20
RAW_KEYS = frozenset(
    {
        "log", "logs", "lines", "stdout", "stderr", "rows", "messages", "transcript", "transcripts",
        "values", "steps", "points", "series", "per_task", "attempts", "samples_text", "completions",
    }
)  # fmt: skip
# An absolute local path (or file:// URI), not part of a URL or of a relative path.
LOCAL_PATH = re.compile(r"(?<![\w:/.~-])(?:file://)?(?:~/|/)(?:[\w.@+-]+/)*[\w.@+-]+/?")
# A value that is one path as a whole, spaces included.
WHOLE_PATH = re.compile(r"(?:file://)?(?:~/|/)[^\n]*")
ID_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


def _local_artifact(match: re.Match[str]) -> str:
    name = PurePosixPath(match.group(0).removeprefix("file://").rstrip("/")).name or "file"
    return f"[local artifact: {name}]"


def strip_text(text: str) -> str:
    text = redact_text(text)
    cleaned = _local_artifact(match) if (match := WHOLE_PATH.fullmatch(text)) else LOCAL_PATH.sub(_local_artifact, text)
    return cleaned if len(cleaned) <= MAX_STRING else cleaned[: MAX_STRING - 1] + "…"


def strip(value: Any, key: str = "") -> Any:
    """A value as it may leave BashGym for the knowledge base."""
    if key and is_secret_key(key):  # a key that names a secret (`api_key`, `hf_token`), not one that mentions one
        return REDACTED
    if key.lower() in RAW_KEYS:
        return RETAINED
    if isinstance(value, str):
        return strip_text(value)
    if isinstance(value, dict):
        return {str(k): strip(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [strip(v) for v in value[:MAX_LIST]]
        if len(value) > MAX_LIST:
            items.append(f"… {len(value) - MAX_LIST} more {RETAINED}")
        return items
    return value


@dataclass
class Receipt:
    kind: str
    workspace_id: str
    project_id: str
    entity_id: str
    title: str
    status: str = ""
    time: str = ""
    objective: str = ""
    summary: str = ""
    configuration: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    kpis: dict[str, Any] = field(default_factory=dict)
    artifacts: list[Any] = field(default_factory=list)
    decision: str = ""
    limitations: list[str] = field(default_factory=list)
    follow_ups: list[str] = field(default_factory=list)
    source_event_ids: list[str] = field(default_factory=list)

    def path(self, root: Path) -> Path:
        for part in (self.workspace_id, self.entity_id):
            if not ID_SAFE.match(part):
                raise ValueError(f"{part!r} cannot name a receipt file; ids are [A-Za-z0-9_.:-] only")
        return root / PLURAL[self.kind] / self.workspace_id / f"{self.entity_id}.md"


def receipt_from_dict(data: dict[str, Any]) -> Receipt:
    """A hand-written receipt (JSON with the receipt's fields); unknown fields are refused by name."""
    known = set(Receipt.__dataclass_fields__)
    unknown = sorted(set(data) - known - {"schema"})
    if unknown:
        raise ValueError(f"unknown receipt field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
    if data.get("kind") not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {data.get('kind')!r}")
    missing = [f for f in ("workspace_id", "project_id", "entity_id", "title") if not data.get(f)]
    if missing:
        raise ValueError(f"a receipt needs {', '.join(missing)}")
    return Receipt(**{k: v for k, v in data.items() if k != "schema"})


def render(receipt: Receipt) -> str:
    """The receipt as Markdown with front matter, every value stripped."""
    r = strip(receipt.__dict__)
    front = {
        "schema": SCHEMA,
        "kind": receipt.kind,
        "workspace_id": r["workspace_id"],
        "project_id": r["project_id"],
        "entity_id": r["entity_id"],
        "title": r["title"],
        "status": r["status"],
        "time": r["time"],
        "source_event_ids": sorted(set(receipt.source_event_ids)),
    }
    lines = ["---", *(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in front.items()), "---", ""]
    lines += [f"# {r['title']}", ""]
    for heading, body in (("Objective", r["objective"]), ("Summary", r["summary"])):
        if body:
            lines += [f"## {heading}", "", body, ""]
    for heading, mapping in (("Configuration", r["configuration"]), ("Lineage", r["lineage"]), ("KPIs", r["kpis"])):
        if mapping:
            lines += [f"## {heading}", ""]
            lines += [f"- **{k}**: {_inline(v)}" for k, v in sorted(mapping.items())]
            lines.append("")
    sections = (("Artifacts", r["artifacts"]), ("Limitations", r["limitations"]), ("Follow-ups", r["follow_ups"]))
    if r["decision"]:
        lines += ["## Decision", "", r["decision"], ""]
    for heading, items in sections:
        if items:
            lines += [f"## {heading}", "", *(f"- {_inline(item)}" for item in items), ""]
    return "\n".join(lines).rstrip() + "\n"


def _inline(value: Any) -> str:
    if isinstance(value, dict | list):
        return "`" + json.dumps(value, ensure_ascii=False, sort_keys=True) + "`"
    return str(value)


def previous_sources(path: Path) -> list[str]:
    """The source event ids an existing receipt already names (they accumulate across curations)."""
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle):
                if line.startswith("source_event_ids: "):
                    return [str(x) for x in json.loads(line.removeprefix("source_event_ids: "))]
                if number > 0 and line.strip() == "---":  # the end of the front matter
                    break
    except (OSError, ValueError):
        return []
    return []


def write_if_changed(path: Path, text: str) -> bool:
    """Write through a temporary file and a rename, only when the content differs; True when written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


# -- from ledger rows to receipts ---------------------------------------------------------------


def entity_of(event: dict[str, Any]) -> tuple[str, str] | None:
    """The (kind, entity id) a ledger event is about, for the kinds receipts cover; None for the rest."""
    kind, payload = event["event_type"], event.get("payload") or {}
    if kind.startswith("run.") and kind not in {"run.remote_log", "run.checkpoint"} and event.get("run_id"):
        return "run", str(event["run_id"])
    simple = {
        "eval_result.recorded": "evaluation",
        "decision.recorded": "decision",
        "dataset_version.registered": "dataset",
        "model_version.registered": "model",
    }
    if kind in simple:
        return simple[kind], str(payload["entity_id"])
    if kind.startswith("campaign."):
        campaign = payload.get("campaign_id") or (payload.get("entity_id") if kind == "campaign.created" else None)
        return ("campaign", str(campaign)) if campaign else None
    return None


def run_receipt(run: dict[str, Any]) -> Receipt:
    config = dict(run.get("config") or {})
    context = config.pop("tracking_context", None) or {}
    summary = run.get("metric_summary") or {}
    kpis = {
        metric: {k: s.get(k) for k in ("latest", "min", "max", "last_step")} for metric, s in sorted(summary.items())
    }
    limitations = []
    if run.get("is_simulation"):
        limitations.append("A simulated run: it proves wiring only, never quality.")
    if run.get("context_status") != "verified":
        limitations.append(f"Tracking context {run.get('context_status')}: not an official run.")
    if run.get("status") == "completed" and not run.get("evaluations"):
        limitations.append("Training metrics only: a loss curve is not a quality claim.")
    follow_ups = []
    if run.get("status") == "completed" and not run.get("evaluations"):
        follow_ups.append(
            f"Evaluate it on a held-out suite: bashgym eval run --project {run['project_id']} --run {run['run_id']}"
        )
    if run.get("status") == "failed":
        follow_ups.append(f"Read its log: bashgym training log {run['run_id']} --project {run['project_id']}")
    model = config.get("base_model") or context.get("model_id") or ""
    return Receipt(
        kind="run",
        workspace_id=run["workspace_id"],
        project_id=run["project_id"],
        entity_id=run["run_id"],
        title=f"Run {run['run_id']} ({run['method']})",
        status=run["status"],
        time=run.get("ended_at") or run.get("started_at") or run.get("created_at") or "",
        objective=context.get("objective", ""),
        summary=f"{run['method']} of {model} on {config.get('compute_target') or 'local'}: {run['status']}.",
        configuration={k: v for k, v in sorted(config.items()) if v not in (None, "", [], {})},
        lineage={
            "experiment_id": run.get("experiment_id"),
            "model_version_id": run.get("model_version_id"),
            "dataset_version_id": run.get("dataset_version_id"),
            "dataset_content_digest": context.get("dataset_content_digest"),
            "environment_id": run.get("environment_id"),
            "recipe_digest": run.get("recipe_digest"),
            "correlation_id": run.get("correlation_id"),
        },
        kpis=kpis,
        artifacts=[{"kind": a["kind"], "uri": a["uri"], "sha256": a["sha256"]} for a in run.get("artifacts") or []],
        limitations=limitations,
        follow_ups=follow_ups,
    )


def evaluation_receipt(ws: str, result: dict[str, Any]) -> Receipt:
    subject = result.get("run_id") or result.get("model_version_id") or "the suite's gold solutions"
    details = result.get("details") or {}
    limitations = ["A simulated result: not a quality claim."] if result.get("is_simulation") else []
    gate = details.get("holdout_gate") or {}
    if gate and not gate.get("passed", True):
        limitations.append(f"The holdout gate did not pass: {gate.get('reason', '')}")
    return Receipt(
        kind="evaluation",
        workspace_id=ws,
        project_id=result["project_id"],
        entity_id=result["result_id"],
        title=f"Evaluation of {subject} on {result['suite_id']}",
        status=result["status"],
        time=result.get("created_at", ""),
        summary=f"{result.get('sample_count', 0)} attempts on suite {result['suite_id']}.",
        lineage={
            "suite_id": result["suite_id"],
            "run_id": result.get("run_id"),
            "model_version_id": result.get("model_version_id"),
        },
        kpis=result.get("metrics") or {},
        limitations=limitations,
    )


def decision_receipt(ws: str, decision: dict[str, Any]) -> Receipt:
    return Receipt(
        kind="decision",
        workspace_id=ws,
        project_id=decision["project_id"],
        entity_id=decision["decision_id"],
        title=f"{decision['decision_type'].capitalize()} decision: {decision['outcome']}",
        status=decision["outcome"],
        time=decision.get("created_at", ""),
        summary=f"Decided by {decision['actor']}.",
        lineage={"run_id": decision.get("run_id"), "evidence_refs": decision.get("evidence_refs") or []},
        decision=decision["rationale"],
    )


def campaign_receipt(ws: str, project: str, campaign: dict[str, Any], iterations: list[dict[str, Any]]) -> Receipt:
    spec = campaign.get("spec") or {}
    decided = [i for i in iterations if i.get("kind") == "candidate" and i.get("stage") == "decided"]
    kept = [i for i in decided if i.get("decision") == "keep"]
    return Receipt(
        kind="campaign",
        workspace_id=ws,
        project_id=project,
        entity_id=campaign["campaign_id"],
        title=f"Campaign {campaign['campaign_id']}: {campaign['title']}",
        status=campaign["status"],
        time=campaign.get("updated_at", ""),
        objective=spec.get("objective", ""),
        summary=f"{len(decided)} candidates decided, {len(kept)} kept. {campaign.get('status_reason', '')}".strip(),
        configuration={
            "primary_metric": spec.get("primary_metric"),
            "direction": spec.get("direction"),
            "compute_target": spec.get("compute_target"),
            "stop_rules": spec.get("stop_rules"),
            "budget": spec.get("budget"),
        },
        lineage={
            "suite_id": spec.get("suite_id"),
            "starting_model_version_id": spec.get("starting_model_version_id"),
            "dataset_version_ids": spec.get("dataset_version_ids"),
            "incumbent_iteration_id": campaign.get("incumbent_iteration_id"),
        },
        kpis={
            i["iteration_id"]: f"{i.get('primary_variable') or 'baseline'}: {i.get('decision') or i.get('stage')} "
            f"({i.get('reason_code') or ''})"
            for i in iterations
        },
    )


def version_receipt(ws: str, kind: str, row: dict[str, Any]) -> Receipt:
    entity = row["dataset_version_id"] if kind == "dataset" else row["model_version_id"]
    name = row.get("dataset_id") if kind == "dataset" else row.get("model_id")
    lineage = {k: v for k, v in row.items() if k.endswith(("_id", "digest", "uri")) and k not in {"workspace_id"}}
    return Receipt(
        kind=kind,
        workspace_id=ws,
        project_id=row["project_id"],
        entity_id=entity,
        title=f"{kind.capitalize()} {name} version {entity}",
        status="registered",
        time=row.get("created_at", ""),
        lineage=lineage,
        kpis={k: v for k, v in row.items() if k in {"row_counts", "size_bytes"}},
    )
