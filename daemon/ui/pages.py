"""The web view's pages, each built from the ledger through the same reads the API uses, for one viewer.

Every builder takes the ledger, the workspace and what the route checked the viewer may read, and answers a whole
HTML document. Nothing here decides authority: routes.py does, before a builder runs.
"""

from __future__ import annotations

import json
from typing import Any

from bashgym.client.states import TERMINAL
from bashgym.client.tags import EntityKind
from bashgym.daemon.campaigns.reports import iteration_evidence, listed_files
from bashgym.daemon.evidence.gathering import gather_evidence
from bashgym.daemon.evidence.promotion import gate
from bashgym.daemon.evidence.sources import RUNS
from bashgym.daemon.ui.compare_views import ALIGN_CONTROL, params_view, run_starts
from bashgym.daemon.ui.evaluation import compare_section
from bashgym.daemon.ui.html import chart, e, facts, href, link, page, table
from bashgym.daemon.ui.runs_table import runs_section
from bashgym.daemon.ui.values import method_settings, readable, timing
from bashgym.ledger.campaigns import TERMINAL as CAMPAIGN_ENDS
from bashgym.ledger.store import Ledger

STATUSES = ("queued", "preparing", "running", "paused", "unknown", "completed", "failed", "cancelled")
HIDDEN_CAMPAIGN_KEYS = {"spec", "workspace_id", "project_id"}
PROVENANCE_NOTE = (
    "Provenance: measured (by the daemon's evaluator) counts toward a ship; asserted (imported) and unrecorded (made "
    "before provenance was kept) never do."
)
EVALUATIONS_CAPTION = f"Evaluations. {PROVENANCE_NOTE}"


async def projects(ledger: Ledger, ws: str, readable: list[dict[str, Any]], who: str, stale_after_s: float) -> str:
    rows = []
    for project in readable:
        context = await ledger.project_context(ws, project["project_id"], stale_after_s=stale_after_s)
        signals = context["signals"]
        rows.append(
            {
                "project": project["project_id"],
                "name": project.get("name"),
                "runs": context["inventory"]["runs"],
                "active": sum(n for s, n in context["inventory"]["runs_by_status"].items() if s not in TERMINAL),
                "failed": _count(signals["failed_runs"]),
                "stale": _count(signals["stale_active_runs"]),
                "unevaluated": _count(signals["completed_without_evaluation"]),
            }
        )
    body = table(
        rows,
        ["project", "name", "runs", "active", "failed", "stale", "unevaluated"],
        links={"project": lambda r: href("p", r["project"])},
        caption="Projects you may read, with their health signals",
    )
    return page("Projects", body, who=who)


async def project(ledger: Ledger, ws: str, name: str, query: dict[str, str], who: str, stale_after_s: float) -> str:
    context = await ledger.project_context(ws, name, stale_after_s=stale_after_s)
    signals = {key: _listed(found) for key, found in context["signals"].items()}
    runs = await runs_section(ledger, ws, name, query, ("p", name))
    inventory = context["inventory"]
    body = (
        facts(
            [
                ("runs", inventory["runs"]),
                ("by status", inventory["runs_by_status"]),
                *[(k.replace("_", " "), v) for k, v in signals.items()],
            ],
            caption="Health",
        )
        + table(
            context["lineage"]["aliases"], ["alias", "model_version_id", "updated_at"], caption="Aliases (champion)"
        )
        + table(
            context["recent"]["decisions"],
            ["decision_id", "decision_type", "outcome", "run_id", "created_at"],
            caption="Last decisions",
        )
        + table(
            [c for c in await ledger.list_campaigns(ws, name) if c["status"] not in CAMPAIGN_ENDS],
            ["campaign_id", "title", "status", "created_at"],
            links={"campaign_id": lambda c: href("p", name, "campaigns", c["campaign_id"])},
            caption="Open campaigns",
        )
        + f"<p>{link('Evaluations and comparisons', href('p', name, 'evaluations'))} · "
        + f"{link('Campaigns', href('p', name, 'campaigns'))} · {link('Event log', href('p', name, 'events'))}</p>"
        + "<h2>Runs</h2>"
        + runs
    )
    return page(f"Project {name}", body, who=who, crumbs=[(name, href("p", name))], charts=True)


async def run(ledger: Ledger, ws: str, name: str, run_id: str, who: str, *, every_setting: bool = False) -> str:
    record = await ledger.get_run(ws, name, run_id)
    metrics = await ledger.run_metrics(ws, name, run_id)
    live = record["status"] not in TERMINAL
    # Training's series first; the machine's (system.*: CPU, memory, GPUs, throughput) in a section of their own.
    system = [m for m in metrics if m["metric"].startswith("system.")]
    training = [m for m in metrics if not m["metric"].startswith("system.")]
    charts = "".join(chart(name, [run_id], m["metric"], live=live) for m in training)
    system_charts = "".join(chart(name, [run_id], m["metric"], live=live) for m in system)
    lifecycle = [
        {"cursor": ev["cursor"], "event": ev["event_type"], "at": ev["created_at"], "actor": ev["actor"],
         "detail": _payload(ev["payload"])}
        for ev in await ledger.run_events(ws, name, run_id)
    ]  # fmt: skip
    config = record.get("config") or {}
    evidence = await gather_evidence(ledger, ws, name, run_id)
    verdict = gate(evidence)  # read only: the API's gate route is where a verdict is recorded
    cards = [
        {"card_id": c["card_id"], "created_at": c["created_at"], "decision": c["card"].get("decision"),
         "evaluations": readable(c["card"].get("evaluation_result_ids")),
         "limitations": readable(c["card"].get("known_limitations"))}
        for c in evidence.runcards
    ]  # fmt: skip
    findings = [{**f, "severity": "blocker"} for f in verdict["blockers"]] + [
        {**f, "severity": "warning"} for f in verdict["warnings"]
    ]
    body = (
        facts(
            [
                ("status", record["status"]),
                ("method", record.get("method")),
                ("lane", config.get("compute_target")),
                ("experiment", record.get("experiment_id")),
                ("model version", record.get("model_version_id")),
                ("dataset version", record.get("dataset_version_id")),
                ("environment", record.get("environment_id")),
                ("context", record.get("context_status")),
                ("source", f"{record.get('source_system')} {record.get('source_run_id') or ''}".strip()),
                ("correlation id", record.get("correlation_id")),
                ("launched by", record.get("launched_by")),
                ("created", record.get("created_at")),
                *timing(record, ledger.now()),
            ],
            caption="Run",
        )
        + await _labels(ledger, ws, name, "run", run_id)
        + ("<h2>Metrics</h2>" + charts if training else "<p>No metrics yet.</p>")
        + ("<h2>System</h2>" + system_charts if system else "")
        + table(metrics, ["metric", "points", "first_step", "last_step"], caption="Series")
        + table(
            record.get("attempts") or [],
            ["attempt_id", "status", "status_reason", "started_at", "ended_at"],
            caption="Attempts",
        )
        + _artifacts(name, record)
        + table(
            [{**r, "metrics": readable(r.get("metrics"))} for r in record.get("evaluations") or []],
            ["result_id", "suite_id", "status", "provenance", "metrics"],
            links={"result_id": lambda r: href("p", name, "evaluations", r["result_id"])},
            caption=EVALUATIONS_CAPTION,
            raw=frozenset({"metrics"}),
        )
        + f"<h2>Gate: {'ships' if verdict['ship'] else 'does not ship'}</h2>"
        + table(findings, ["severity", "code", "message", "next_action"], caption="What the gate found")
        + table(
            cards,
            ["card_id", "created_at", "decision", "evaluations", "limitations"],
            caption="RunCards",
            raw=frozenset({"evaluations", "limitations"}),
        )
        + table(
            lifecycle,
            ["cursor", "event", "at", "actor", "detail"],
            caption="Lifecycle events, newest first (latest 200)",
        )
        + _settings(name, run_id, config, record.get("method"), every=every_setting)
    )
    crumbs = [(name, href("p", name)), (run_id, href("p", name, "runs", run_id))]
    return page(f"Run {run_id}", body, who=who, crumbs=crumbs, charts=True)


async def compare(
    ledger: Ledger, ws: str, name: str, run_ids: list[str], who: str, query: dict[str, str] | None = None
) -> str:
    records = [await ledger.get_run(ws, name, run_id) for run_id in run_ids]
    names = sorted({m["metric"] for r in run_ids for m in await ledger.run_metrics(ws, name, r)})
    starts = run_starts(records)
    charts = ALIGN_CONTROL + "".join(chart(name, run_ids, metric, starts=starts) for metric in names)
    configs = [r.get("config") or {} for r in records]
    keys = sorted({k for c in configs for k in c if k != "tracking_context"})
    rows, differs = [], set()
    for key in keys:
        values = [configs[i].get(key) for i in range(len(records))]
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1:
            differs.add(key)
        rows.append({"key": key, **{r["run_id"]: v for r, v in zip(records, values, strict=True)}})
    rows.sort(key=lambda row: row["key"] not in differs)  # the differences first
    marked = {r["run_id"]: differs for r in records} | {"key": differs}
    settings = table(rows, ["key", *run_ids], caption="Settings (differences first, marked)", marked=marked)
    status = table(
        [{"run_id": r["run_id"], "status": r["status"], "method": r.get("method")} for r in records],
        ["run_id", "status", "method"],
        links={"run_id": lambda r: href("p", name, "runs", r["run_id"])},
    )
    evaluated = await compare_section(ledger, ws, name, run_ids)  # results, comparisons with CIs, gate verdicts
    scatter = await params_view(ledger, ws, name, records, names, query or {})  # scatter, parallel coordinates
    body = (
        status
        + ("<h2>Curves</h2>" + charts if names else "<p>No metrics to overlay.</p>")
        + scatter
        + evaluated
        + settings
    )
    return page(f"Compare {len(run_ids)} runs", body, who=who, crumbs=[(name, href("p", name))], charts=True)


async def evaluations(ledger: Ledger, ws: str, name: str, who: str) -> str:
    listing = await ledger.list_evaluations(ws, name)
    results = table(
        listing["results"],
        ["result_id", "suite_id", "run_id", "status", "provenance", "metrics", "created_at"],
        links={
            "run_id": lambda r: href("p", name, "runs", r["run_id"]) if r.get("run_id") else href("p", name),
            "result_id": lambda r: href("p", name, "evaluations", r["result_id"]),
        },
        caption=f"Results. {PROVENANCE_NOTE}",
    )
    comparisons = table(
        listing["comparisons"],
        ["comparison_id", "suite_id", "primary_metric", "delta", "ci_low", "ci_high", "provenance",
         "baseline_result_id", "candidate_result_id"],
        links={"comparison_id": lambda c: href("p", name, "comparisons", c["comparison_id"])},
        caption="Comparisons: paired delta of the candidate over the baseline, with its 95% CI",
    )  # fmt: skip
    return page(f"Evaluations of {name}", results + comparisons, who=who, crumbs=[(name, href("p", name))])


async def campaigns(ledger: Ledger, ws: str, name: str, who: str) -> str:
    listed = await ledger.list_campaigns(ws, name)
    body = table(
        listed,
        ["campaign_id", "title", "status", "status_reason", "created_by", "created_at"],
        links={"campaign_id": lambda c: href("p", name, "campaigns", c["campaign_id"])},
        caption="Campaigns",
    )
    return page(f"Campaigns of {name}", body, who=who, crumbs=[(name, href("p", name))])


async def campaign(
    ledger: Ledger, ws: str, name: str, campaign_id: str, who: str, query: dict[str, str] | None = None
) -> str:
    record = await ledger.get_campaign(ws, name, campaign_id)
    iterations = await ledger.list_iterations(ws, name, campaign_id)
    metric = str((record.get("spec") or {}).get("primary_metric") or "primary metric")
    iterations = await _with_evidence(ledger, ws, name, iterations, metric)
    budget = await ledger.budget_entries(ws, name, f"campaign-{campaign_id}")
    run_link = {"run_id": lambda r: href("p", name, "runs", r["run_id"]) if r.get("run_id") else href("p", name)}
    body = (
        facts(
            [(k, v) for k, v in record.items() if k not in {"spec", "workspace_id", "project_id"}], caption="Campaign"
        )
        + await _labels(ledger, ws, name, "campaign", campaign_id)
        + table(
            iterations,
            [
                "number",
                "kind",
                "stage",
                "primary_variable",
                "run_id",
                metric,
                "Δ vs incumbent",
                "95% CI",
                "comparison_id",
                "decision",
                "reason_code",
                "rationale",
            ],
            links=run_link,
            caption="Iterations and their decisions",
        )
        + table(budget, ["kind", "gpu_hours", "runs", "created_at"], caption="Budget entries")
        + _reports(name, await ledger.campaign_reports(ws, name, campaign_id), campaign_id)
        + "<h2>Runs</h2>"
        + await runs_section(ledger, ws, name, query or {}, ("p", name, "campaigns", campaign_id), campaign=campaign_id)
    )
    crumbs = [(name, href("p", name)), ("campaigns", href("p", name, "campaigns"))]
    return page(f"Campaign {campaign_id}", body, who=who, crumbs=crumbs, charts=True)


async def _with_evidence(
    ledger: Ledger, ws: str, name: str, iterations: list[dict[str, Any]], metric: str
) -> list[dict[str, Any]]:
    """Each iteration with its result's primary metric, and the delta against the incumbent it was compared with and
    that delta's CI (as the campaign's report reads them)."""
    listing = await ledger.list_evaluations(ws, name)
    results = {r["result_id"]: r for r in listing["results"]}
    comparisons = {c["comparison_id"]: c for c in listing["comparisons"]}
    rows = []
    for it in iterations:
        shown = iteration_evidence(
            results.get(it["result_id"] or ""), comparisons.get(it["comparison_id"] or ""), metric
        )
        ci = shown["ci"]
        rows.append(
            {**it, metric: shown["metric"], "Δ vs incumbent": _signed(shown["delta"]),
             "95% CI": f"[{_signed(ci[0])}, {_signed(ci[1])}]" if ci and None not in ci else None}
        )  # fmt: skip
    return rows


def _signed(value: float | None) -> str | None:
    return None if value is None else f"{value:+.4g}"


async def experiment(ledger: Ledger, ws: str, name: str, experiment_id: str, query: dict[str, str], who: str) -> str:
    """An experiment's runs: the project's runs table, scoped to the experiment."""
    path = ("p", name, "experiments", experiment_id)
    body = await runs_section(ledger, ws, name, query, path, experiment=experiment_id)
    return page(f"Experiment {experiment_id}", body, who=who, crumbs=[(name, href("p", name))], charts=True)


async def model_version(ledger: Ledger, ws: str, name: str, version: str, who: str) -> str:
    """A model version: where it came from, its files, and its tags and note."""
    record = await ledger.get_model_version(ws, name, version)
    files = record.get("files") or []
    body = (
        facts(
            [(k, v) for k, v in record.items() if k not in {"files", "workspace_id", "project_id"}],
            caption="Model version",
        )
        + await _labels(ledger, ws, name, "model_version", version)
        + table(files, ["path", "sha256", "size_bytes"], caption="Files")
    )
    crumbs = [(name, href("p", name)), (version, href("p", name, "model-versions", version))]
    return page(f"Model version {version}", body, who=who, crumbs=crumbs)


async def _labels(ledger: Ledger, ws: str, name: str, kind: EntityKind, entity_id: str) -> str:
    """The entity's tags and note (ledger.tags), read only: bashgym run|model|campaign tag and note write them."""
    found = await ledger.labels_of(ws, name, kind, entity_id)
    note = found["note"]
    tags = " ".join(f"{k}={v}" for k, v in sorted(found["tags"].items()))
    pairs: list[tuple[str, object]] = [("tags", tags), ("note", note["text"] if note else None)]
    if note:
        pairs.append(("note by", f"{note['set_by']} at {note['set_at']}"))
    return '<section class="labels">' + facts(pairs, caption="Tags and note") + "</section>"


def _reports(name: str, reports: list[dict[str, Any]], campaign_id: str) -> str:
    """The newest report's charts drawn in the page, and every listed report's files as links."""
    if not reports:
        return (
            "<h2>Reports</h2><p>No report of this campaign yet: "
            f"<code>bashgym campaign report --project {e(name)} {e(campaign_id)}</code> makes one.</p>"
        )
    newest = reports[0]
    charts = [f for f in listed_files(newest["manifest"]) if f.endswith(".png")]
    figures = "".join(
        f'<figure class="report"><img src="{href("p", name, "reports", newest["report_id"], f)}" '
        f'alt="{e(f)} of report {e(newest["report_id"])}" loading="lazy"><figcaption>{e(f)}</figcaption></figure>'
        for f in charts
    )
    rows = [{**r, "files": " · ".join(listed_files(r["manifest"])) or "manifest only"} for r in reports]
    files = {"report_id": lambda r: href("p", name, "reports", r["report_id"], "manifest.json")}
    listing = table(
        rows, ["report_id", "created_at", "created_by", "files"], links=files, caption="Reports, newest first"
    )
    return (
        f"<h2>Reports</h2><p>The charts of {e(newest['report_id'])} ({e(newest['created_at'])}).</p>{figures}{listing}"
    )


async def events(ledger: Ledger, ws: str, name: str, after: int, who: str) -> str:
    listed = await ledger.events_page(ws, name, after_cursor=after, limit=100, types=None)
    rows = [
        {"cursor": ev.cursor, "event": ev.event_type, "run": ev.run_id, "actor": ev.actor, "at": ev.created_at,
         "detail": _payload(ev.payload)}
        for ev in listed.events
    ]  # fmt: skip
    runs = {"run": lambda r: href("p", name, "runs", r["run"]) if r.get("run") else href("p", name, "events")}
    body = table(rows, ["cursor", "event", "run", "actor", "at", "detail"], links=runs, caption="Events, oldest first")
    if rows:
        body += f"<p>{link('Later events', href('p', name, 'events', after=rows[-1]['cursor']))}</p>"
    return page(f"Events of {name}", body, who=who, crumbs=[(name, href("p", name))])


def _artifacts(name: str, record: dict[str, Any]) -> str:
    """The run's artifacts, each one it holds the bytes of linked to its download (checked against its sha256)."""
    prefix = f"{RUNS}{record['run_id']}/"
    rows = []
    for artifact in record.get("artifacts") or []:
        path = str(artifact["uri"]).removeprefix(prefix) if str(artifact["uri"]).startswith(prefix) else None
        url = href("p", name, "runs", record["run_id"], "artifacts", *path.split("/")) if path else None
        rows.append({**artifact, "download": f'<a href="{e(url)}" download>{e(path)}</a>' if url else ""})
    columns = ["kind", "uri", "sha256", "size_bytes", "download"]
    return table(rows, columns, caption="Artifacts", raw=frozenset({"download"}))


def _settings(name: str, run_id: str, config: dict[str, Any], method: str | None, *, every: bool) -> str:
    """The run's settings its method reads, with a link to all of them (or back)."""
    rows = method_settings(config, method, every=every)
    if every:
        switch = link(f"Only the settings {method} reads", href("p", name, "runs", run_id) + "#settings")
        caption = "Settings, all of them"
    else:
        switch = link("All settings", href("p", name, "runs", run_id, settings="all") + "#settings")
        caption = f"Settings {method or 'the method'} reads"
    listed = table(rows, ["key", "value"], caption=caption, raw=frozenset({"value"}))
    return f'<div id="settings">{listed}<p>{switch}</p></div>'


def _listed(found: dict[str, Any]) -> str:
    """A signal's runs: the first five ids, and a mark when there are more."""
    ids = list(found["ids"])
    return ", ".join(ids[:5]) + (" …" if len(ids) > 5 or found["truncated"] else "") if ids else "none"


def _count(found: dict[str, Any]) -> str:
    return f"{len(found['ids'])}{'+' if found['truncated'] else ''}"


def _payload(payload: dict[str, Any]) -> str:
    shown = {k: v for k, v in payload.items() if k not in {"entity"}}
    return json.dumps(shown, sort_keys=True, default=str)[:300]
