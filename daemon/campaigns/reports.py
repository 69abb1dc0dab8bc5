"""Campaign reports: Markdown, PNG charts, a JSON snapshot and a manifest with each file's sha256.

Reports name ledger ids, never local paths, and pass through the redactor. "Model-quality findings"
appear only once a candidate's training run completed and was compared; before that the report
says it holds engineering evidence only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from bashgym.client.errors import NotFound
from bashgym.client.redaction import redact
from bashgym.client.specs import REPORT_MEDIA_TYPES, Actor, ReportSpec, report_file_problem
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import new_id

FORMATS = frozenset({"md", "json", "png"})


async def campaign_report(
    ledger: Ledger, reports_dir: Path, actor: Actor, ws: str, project: str, campaign_id: str, *, formats: set[str]
) -> dict[str, Any]:
    """Gather the campaign's evidence from the ledger, render the requested formats, record the report."""
    snapshot = await _snapshot(ledger, ws, project, campaign_id)
    report_id = new_id("rep")
    out = reports_dir / report_id
    files = await asyncio.to_thread(_render, snapshot, out, formats)
    manifest = {
        "report_id": report_id,
        "campaign_id": campaign_id,
        "generated_at": snapshot["generated_at"],
        "files": files,
    }
    await asyncio.to_thread((out / "manifest.json").write_text, json.dumps(manifest, indent=2))
    spec = ReportSpec(report_id=report_id, kind="campaign", title=f"Campaign {campaign_id}", manifest=manifest)
    await ledger.record_report(actor, ws, project, spec)
    return manifest


async def report_file(
    ledger: Ledger, reports_dir: Path, ws: str, project: str, report_id: str, name: str
) -> tuple[bytes, str]:
    """A file of a report of this project (its manifest, or a file the manifest lists) and its media type; NotFound
    for a name the manifest does not list, a kind the daemon does not serve, or a report whose files it never held."""
    report = await ledger.get_report(ws, project, report_id)
    if name != "manifest.json" and name not in listed_files(report["manifest"]):
        raise NotFound(f"Report {report_id} has no file {name!r}.", hint="Its manifest lists the files.")
    problem = report_file_problem(name)  # a manifest recorded before manifests were checked
    if problem:
        raise NotFound(f"Report {report_id} lists a file the daemon does not serve: {problem}.")
    try:
        data = await asyncio.to_thread((reports_dir / report_id / name).read_bytes)
    except FileNotFoundError:
        raise NotFound(
            f"The daemon holds no file {name!r} of report {report_id}.",
            hint="The daemon holds the files of the reports it made (bashgym campaign report); a report "
            "recorded through POST .../reports holds its manifest only.",
        ) from None
    return data, REPORT_MEDIA_TYPES[name.rpartition(".")[2]]


def listed_files(manifest: dict[str, Any]) -> list[str]:
    """The file names a manifest lists, in its order, read leniently: rows recorded before manifests were checked."""
    files = manifest.get("files")
    entries = files if isinstance(files, list) else []
    return [str(entry["name"]) for entry in entries if isinstance(entry, dict) and "name" in entry]


def iteration_evidence(
    result: dict[str, Any] | None, comparison: dict[str, Any] | None, primary_metric: str
) -> dict[str, Any]:
    """What an iteration's evaluation showed: its primary metric (and on the families the suite holds out), its
    sample count, and the paired delta against the incumbent it was compared with, with that delta's 95% CI."""
    metrics = (result or {}).get("metrics", {})
    return {
        "metric": metrics.get(primary_metric),
        # The families the suite holds out, scored apart (terminal-task suites).
        "holdout_metric": metrics.get(f"holdout.{primary_metric}"),
        "samples": (result or {}).get("sample_count"),
        "delta": (comparison or {}).get("delta"),
        "ci": [(comparison or {}).get("ci_low"), (comparison or {}).get("ci_high")] if comparison else None,
    }


async def _snapshot(ledger: Ledger, ws: str, project: str, campaign_id: str) -> dict[str, Any]:
    campaign = await ledger.get_campaign(ws, project, campaign_id)
    spec = campaign["spec"]
    iterations = await ledger.list_iterations(ws, project, campaign_id)
    listing = await ledger.list_evaluations(ws, project)
    results = {r["result_id"]: r for r in listing["results"]}
    comparisons = {c["comparison_id"]: c for c in listing["comparisons"]}
    rows, curves, anomalies = [], {}, []
    for it in iterations:
        result = results.get(it["result_id"] or "")
        comparison = comparisons.get(it["comparison_id"] or "")
        rows.append(
            {
                "iteration": it["number"],
                "kind": it["kind"],
                "change": it["recipe_change"],
                "rationale": it["rationale"],
                "stage": it["stage"],
                **iteration_evidence(result, comparison, spec["primary_metric"]),
                "decision": it["decision"],
                "reason_code": it["reason_code"],
                "run_id": it["run_id"],
            }
        )
        if it["run_id"]:
            try:
                trend = await ledger.trend(ws, project, "train.loss", it["run_id"])
                curves[f"#{it['number']}"] = {"steps": trend["steps"], "values": trend["values"]}
                for payload in await ledger.run_event_payloads(ws, project, it["run_id"], "run.anomaly"):
                    anomalies.append({"iteration": it["number"], **payload})
            except NotFound:
                pass
    stages = [stage_row(it, results, comparisons) for it in iterations if it["kind"] == "stage"]
    budget = await ledger.budget_summary(ws, project, f"campaign-{campaign_id}"[:128])
    entries = await ledger.budget_entries(ws, project, f"campaign-{campaign_id}"[:128])
    quality = any(r["kind"] in {"candidate", "stage"} and r["run_id"] and r["delta"] is not None for r in rows)
    incumbent = next(
        (r for r in rows if f"{campaign_id}.i{r['iteration']}" == campaign["incumbent_iteration_id"]), None
    )
    snapshot = {
        "campaign_id": campaign_id,
        "title": campaign["title"],
        "objective": spec["objective"],
        "status": campaign["status"],
        "primary_metric": spec["primary_metric"],
        "direction": spec["direction"],
        "suite_id": spec["suite_id"],
        "kind": spec.get("kind", "search"),
        "iterations": rows,
        "stages": stages,
        "incumbent": incumbent,
        "budget": budget,
        "budget_entries": entries,
        "anomalies": anomalies,
        "loss_curves": curves,
        "evidence": "model_quality" if quality else "engineering_only",
        "next_action": next_action(campaign["status"], rows, project=project, campaign_id=campaign_id),
        "generated_at": datetime.now().astimezone().isoformat(),
    }
    return dict(redact(snapshot))


def stage_row(
    it: dict[str, Any], results: dict[str, dict[str, Any]], comparisons: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """One cascade stage as the report shows it: what trained, its result, its comparisons, card and verdict."""

    def compared(comparison_id: str | None) -> dict[str, Any] | None:
        found = comparisons.get(comparison_id or "")
        return None if found is None else {k: found.get(k) for k in ("comparison_id", "delta", "ci_low", "ci_high")}

    result = results.get(it["result_id"] or "")
    return {
        "number": it["number"],
        "name": it["primary_variable"],
        "method": (it["recipe_change"] or {}).get("method") or (it["recipe_change"] or {}).get("strategy"),
        "stage": it["stage"],
        "run_id": it["run_id"],
        "model_version_id": it.get("model_version_id"),
        "result_id": it["result_id"],
        "metrics": (result or {}).get("metrics", {}),
        "comparison": compared(it["comparison_id"]),
        "start_comparison": compared(it.get("start_comparison_id")),
        "card_id": it.get("card_id"),
        "gate": {"shipped": True, "blockers": []}
        if it["decision"] == "ship"
        else {"shipped": False, "blockers": it.get("blockers") or []}
        if it["decision"] == "blocked"
        else None,
        "decision": it["decision"],
        "reason_code": it["reason_code"],
    }


def next_action(status: str, rows: list[dict[str, Any]], *, project: str, campaign_id: str) -> dict[str, str]:
    """What the campaign waits for, with a command that runs when pasted: its project and id filled in, and only
    what is the user's to choose (the hypothesis a candidate tests) left as a placeholder in capitals."""
    which = f"{campaign_id} --project {project}"
    if status == "draft":
        return {"code": "validate", "detail": f"Validate the campaign: bashgym campaign validate {which}"}
    if status == "ready":
        return {"code": "start", "detail": f"Start it: bashgym campaign start {which}"}
    if status == "blocked":
        return {
            "code": "none",
            "detail": "The cascade stopped at a stage the promotion gate blocked; its blockers say what to change. "
            "Create a new cascade once they are addressed.",
        }
    if status in {"completed", "exhausted", "failed", "cancelled"}:
        return {"code": "none", "detail": f"The campaign is {status}."}
    if any(r["kind"] == "stage" for r in rows):
        return {"code": "run_next_stage", "detail": "The cascade's stages run in order; the next one is running."}
    if status == "awaiting_authority":
        return {
            "code": "authority_required",
            "detail": "A holder of the needed capability must act (see the reason): a budget amendment "
            "(budget.amend) resumes a campaign that ran out of budget; a missing capability is lent by resuming.",
        }
    if not any(r["stage"] == "queued" for r in rows):
        return {
            "code": "propose_candidate",
            "detail": f"Queue a hypothesis: bashgym campaign propose {which} --recipe-change RECIPE_CHANGE "
            "(JSON: primary_variable, value, rationale)",
        }
    return {"code": "run_queued_candidate", "detail": "The next queued candidate runs in order."}


def _render(snapshot: dict[str, Any], out: Path, formats: set[str]) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if "json" in formats:
        path = out / "snapshot.json"
        path.write_text(json.dumps(snapshot, indent=2, sort_keys=True))
        written.append(path)
    if "png" in formats:
        written += _charts(snapshot, out)
    if "md" in formats:
        path = out / "report.md"
        path.write_text(_markdown(snapshot, [p.name for p in written if p.suffix == ".png"]))
        written.append(path)
    return [
        {"name": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "size_bytes": p.stat().st_size}
        for p in written
    ]


def _markdown(s: dict[str, Any], charts: list[str]) -> str:
    lines = [
        f"# {s['title']} ({s['campaign_id']})",
        "",
        f"**Objective.** {s['objective']}",
        f"**Status.** {s['status']} · primary metric `{s['primary_metric']}` ({s['direction']}) on `{s['suite_id']}`",
        "",
    ]
    if s["evidence"] == "engineering_only":
        lines += [
            "> Engineering evidence only: no candidate has finished training and comparison yet.",
            "",
        ]
    else:
        lines += ["## Model-quality findings", ""]
        kept = [r for r in s["iterations"] if r["decision"] == "keep"]
        lines += [
            f"- {len(kept)} candidate(s) kept on evidence; incumbent: {(s['incumbent'] or {}).get('iteration')}",
            "",
        ]
    lines += [
        "## Iterations",
        "",
        "| # | kind | change | metric | delta | 95% CI | decision |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in s["iterations"]:
        change = ", ".join(f"{k}={v}" for k, v in (r["change"] or {}).items()) or "—"
        ci = f"[{r['ci'][0]:.3g}, {r['ci'][1]:.3g}]" if r["ci"] and None not in r["ci"] else "—"
        decision = f"{r['decision']} ({r['reason_code']})" if r["decision"] else r["stage"]
        metric = "—" if r["metric"] is None else f"{r['metric']:.4g}"
        delta = "—" if r["delta"] is None else f"{r['delta']:+.4g}"
        lines.append(f"| {r['iteration']} | {r['kind']} | {change} | {metric} | {delta} | {ci} | {decision} |")
    if not s["iterations"]:
        lines.append("| — | | no iterations yet | | | | |")
    if s.get("stages"):
        lines += ["", "## Cascade stages", "", *_stage_lines(s["stages"], s["primary_metric"])]
    budget = s["budget"]
    lines += ["", "## Budget", ""]
    if budget.get("has_limit"):
        remaining = budget["remaining"]
        lines.append(
            f"Limit {budget['limit']['runs']} runs / {budget['limit']['gpu_hours']:.2f} GPU-hours; settled "
            f"{budget['settled']['runs']} runs / {budget['settled']['gpu_hours']:.2f} GPU-hours; remaining "
            f"{remaining['runs']} runs / {remaining['gpu_hours']:.2f} GPU-hours."
        )
    else:
        lines.append("No budget limit is open yet (it opens when the campaign starts).")
    lines += ["", "## Anomalies", ""]
    lines += [f"- iteration {a['iteration']}: {a.get('kind')} — {a.get('detail')}" for a in s["anomalies"]] or ["None."]
    lines += ["", "## Next action", "", f"`{s['next_action']['code']}`: {s['next_action']['detail']}", ""]
    lines += [f"![{name}]({name})" for name in charts]
    return "\n".join(lines) + "\n"


def _stage_lines(stages: list[dict[str, Any]], metric: str) -> list[str]:
    """Each stage: name, method, run, result, comparison delta and CI, RunCard, gate verdict and its blockers."""

    def delta(comparison: dict[str, Any] | None) -> str:
        if comparison is None or comparison["delta"] is None:
            return "—"
        low, high = comparison["ci_low"], comparison["ci_high"]
        ci = f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else ""
        return f"{comparison['delta']:+.4g}{ci}"

    lines = [
        f"| stage | method | run | {metric} | Δ vs previous [95% CI] | Δ vs start [95% CI] | RunCard | gate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    blocked = []
    for st in stages:
        value = st["metrics"].get(metric)
        gate = st["gate"]
        verdict = "—" if gate is None else "ships" if gate["shipped"] else "blocked"
        if st["decision"] == "failed":
            verdict = f"failed ({st['reason_code']})"
        lines.append(
            f"| {st['number']}. {st['name']} | {st['method']} | {st['run_id'] or '—'} | "
            f"{'—' if value is None else f'{value:.4g}'} | {delta(st['comparison'])} | {delta(st['start_comparison'])} "
            f"| {(st['card_id'] or '—')[:16]} | {verdict} |"
        )
        if gate is not None and gate["blockers"]:
            blocked.append(st)
    for st in blocked:
        lines += ["", f"Blockers of stage {st['number']} ({st['name']}):", ""]
        lines += [f"- `{b['code']}`: {b['message']} Next: {b['next_action']}" for b in st["gate"]["blockers"]]
    return lines


def _charts(s: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    paths = [_save(_metric_chart(plt, s), out / "metric.png")]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, curve in s["loss_curves"].items():
        ax.plot(curve["steps"], curve["values"], label=label)
    ax.set(title="training loss of the iterations", xlabel="step", ylabel="train.loss")
    if not s["loss_curves"]:
        ax.text(0.5, 0.5, "no training runs yet", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(loc="best")
    paths.append(_save(fig, out / "loss.png"))
    paths.append(_save(_budget_chart(plt, s), out / "budget.png"))
    return paths


MARKERS = {"baseline": ("s", "grey"), "keep": ("^", "tab:green"), "discard": ("x", "tab:red")}


def _metric_chart(plt: Any, s: dict[str, Any]) -> Any:
    """The primary metric per iteration (integer iterations), each candidate's 95% CI of its gain over the
    incumbent as whiskers, the baseline as a band (its binomial 95% interval), keep and discard markers, and the
    held-out families as their own series."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 3.5))
    rows = [r for r in s["iterations"] if r["metric"] is not None]
    base = next((r for r in rows if r["kind"] == "baseline"), None)
    if base is not None:
        low, high = _binomial_band(base["metric"], base.get("samples"))
        ax.axhline(base["metric"], linestyle="--", color="grey", linewidth=1)
        if high > low:
            ax.axhspan(low, high, color="grey", alpha=0.15, label="baseline 95% interval")
    if rows:
        ax.plot([r["iteration"] for r in rows], [r["metric"] for r in rows], color="tab:blue", alpha=0.5)
    for decision, (marker, colour) in MARKERS.items():
        chosen = [r for r in rows if (r["decision"] or r["kind"]) == decision]
        if chosen:
            ax.scatter([r["iteration"] for r in chosen], [r["metric"] for r in chosen], marker=marker, color=colour,
                       zorder=3, label=decision)  # fmt: skip
    whiskers = [r for r in rows if r["ci"] and None not in r["ci"] and r["delta"] is not None]
    if whiskers:
        ax.errorbar(
            [r["iteration"] for r in whiskers],
            [r["metric"] for r in whiskers],
            yerr=[[r["delta"] - r["ci"][0] for r in whiskers], [r["ci"][1] - r["delta"] for r in whiskers]],
            fmt="none", ecolor="tab:blue", capsize=4, label="95% CI of the gain",
        )  # fmt: skip
    held = [r for r in rows if r.get("holdout_metric") is not None]
    if held:
        ax.plot([r["iteration"] for r in held], [r["holdout_metric"] for r in held], linestyle=":", marker=".",
                color="tab:purple", label="held-out families")  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=f"{s['primary_metric']} per iteration", xlabel="iteration", ylabel=s["primary_metric"])
    if rows:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no evaluated iterations yet", ha="center", va="center", transform=ax.transAxes)
    return fig


def _binomial_band(rate: float, samples: int | None) -> tuple[float, float]:
    """A 95% normal-approximation interval of a pass rate over `samples` attempts (none without a count)."""
    if not samples or not 0.0 <= rate <= 1.0:
        return rate, rate
    half = 1.96 * math.sqrt(rate * (1 - rate) / samples)
    return max(0.0, rate - half), min(1.0, rate + half)


def _budget_chart(plt: Any, s: dict[str, Any]) -> Any:
    """Runs settled against the campaign's limit, over time."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 3.5))
    times, spent, limits = [], [], []
    used, limit = 0, None
    for entry in s["budget_entries"]:
        if entry["kind"] == "settle":
            used += entry["runs"]
        elif entry["kind"] == "limit":
            limit = entry["runs"]
        elif entry["kind"] == "amend" and limit is not None:
            limit += entry["runs"]
        times.append(datetime.fromisoformat(str(entry["created_at"]).replace("Z", "+00:00")))
        spent.append(used)
        limits.append(limit)
    if times:
        ax.step(times, spent, where="post", label="runs settled")
        if any(v is not None for v in limits):
            ax.step(times, [v if v is not None else float("nan") for v in limits], where="post", linestyle="--",
                    color="tab:red", label="limit")  # fmt: skip
        ax.legend(loc="best", fontsize="small")
        fig.autofmt_xdate()
    else:
        ax.text(0.5, 0.5, "no budget entries yet", ha="center", va="center", transform=ax.transAxes)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title="runs settled against the campaign budget", xlabel="time", ylabel="runs")
    return fig


def _save(fig: Any, path: Path) -> Path:
    from matplotlib import pyplot as plt

    try:
        fig.tight_layout()
        fig.savefig(path, dpi=100, metadata={"Software": None})
    except (ValueError, OverflowError):
        # Matplotlib cannot lay out an axis near the largest double (metric points of +-1e308, which the
        # API accepts): the chart says so rather than the whole report failing.
        title = fig.axes[0].get_title() if fig.axes else ""
        fig.clear()
        fig.text(0.5, 0.5, f"{title}\n\nvalues too large to chart", ha="center", va="center")
        fig.savefig(path, dpi=100, metadata={"Software": None})
    finally:
        plt.close(fig)
    return path
