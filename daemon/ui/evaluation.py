"""Evaluations task by task: one result's families, tasks and samples, a comparison's flipped tasks, and the
evaluations and gate verdicts a compare page shows beside its curves.

A measured result's samples are read from the attempts file its evaluator wrote (the blob named by the result's
`attempts_sha256`): each sample's command, exit code, verifier verdict and sandbox transcript, redacted and cut to
MAX_TEXT_CHARS, at most MAX_SAMPLES of them. An imported (asserted) result has no samples here: its details are the
importer's words, and a digest in them names no file this workspace may read. Per-task rows of a protected suite stay
closed to a viewer without eval.protected, as in the API. Every value reaches the page through html.py's escaping: a
command or transcript is model output and is shown as text, never as markup.
"""

from __future__ import annotations

import asyncio
import json
from html import escape
from typing import Any

from bashgym.client.redaction import redact_text
from bashgym.daemon.artifacts import WITHHELD, held_attempts
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.evidence.gathering import gather_evidence
from bashgym.daemon.evidence.promotion import gate
from bashgym.daemon.ui.html import e, facts, href, link, page, table
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.evidence import pass_at_k

MAX_SAMPLES = 4000  # 88 tasks x 45 samples; a larger file is cut, and the page says so
MAX_ATTEMPTS_BYTES = 16 * 1024 * 1024
MAX_TEXT_CHARS = 2000
KS = (1, 2, 4, 8, 16)
SUMMARY = ("result_id", "suite_id", "run_id", "model_version_id", "status", "provenance", "metrics", "sample_count",
           "created_by", "created_at")  # fmt: skip


async def result_view(
    ledger: Ledger, blobs: BlobStore, ws: str, project: str, result_id: str, *, may_see_protected: bool
) -> dict[str, Any]:
    """One result task by task: its families, its tasks with their samples, its canaries and safety observations,
    and the comparisons it takes part in. The API answers it as JSON and the page renders it."""
    record = await ledger.eval_result(ws, project, result_id)
    details = record.get("details") or {}
    summary = {k: record.get(k) for k in SUMMARY}
    comparisons = [_comparison_row(c) for c in await ledger.comparisons_between(ws, project, [result_id])]
    if record["suite_id"] in await ledger.protected_suites(ws, project) and not may_see_protected:
        return {"result": summary, "withheld": WITHHELD, "families": [], "tasks": [], "samples_note": WITHHELD,
                "canaries": None, "safety": None, "comparisons": comparisons}  # fmt: skip
    samples, note = await asyncio.to_thread(_read_samples, blobs, record)
    tasks = _tasks(details.get("per_task") or {}, samples)
    digest, _ = held_attempts(blobs, record)
    return {
        "result": summary,
        "withheld": None,
        "families": _families(tasks),
        "tasks": tasks,
        "samples_note": note,
        "attempts_file": None
        if digest is None
        else {"sha256": digest, "download": f"/v1/projects/{project}/eval-results/{result_id}/attempts"},
        "canaries": details.get("canaries"),
        "safety": details.get("safety"),
        "comparisons": comparisons,
    }


async def comparison_view(
    ledger: Ledger, ws: str, project: str, comparison_id: str, *, may_see_protected: bool
) -> dict[str, Any]:
    """A comparison with its CI, per family the two sides' pass@1, and the tasks whose verdict changed."""
    found = await ledger.comparison(ws, project, comparison_id)
    baseline = await ledger.eval_result(ws, project, found["baseline_result_id"])
    candidate = await ledger.eval_result(ws, project, found["candidate_result_id"])
    view: dict[str, Any] = {"comparison": _comparison_row(found), "families": [], "flips": [], "withheld": None}
    if found["suite_id"] in await ledger.protected_suites(ws, project) and not may_see_protected:
        return {**view, "withheld": WITHHELD}
    base = (baseline.get("details") or {}).get("per_task") or {}
    cand = (candidate.get("details") or {}).get("per_task") or {}
    shared = sorted(set(base) & set(cand))
    flips = []
    for task_id in shared:
        before, after = _score(base[task_id]), _score(cand[task_id])
        if before is None or after is None or before == after:
            continue
        flips.append({"task": task_id, "family": cand[task_id].get("family"), "baseline pass@1": before,
                      "candidate pass@1": after, "change": f"{_verdict(before)} → {_verdict(after)}"})  # fmt: skip
    flips.sort(key=lambda f: (f["candidate pass@1"] - f["baseline pass@1"], f["task"]))  # regressions first
    families: dict[str, dict[str, Any]] = {}
    for task_id in shared:
        before, after = _score(base[task_id]), _score(cand[task_id])
        if before is None or after is None:
            continue
        row = families.setdefault(str(cand[task_id].get("family")), {"tasks": 0, "base": 0.0, "cand": 0.0})
        row["tasks"] += 1
        row["base"] += before
        row["cand"] += after
    view["families"] = [
        {"family": name, "tasks": f["tasks"], "baseline pass@1": f["base"] / f["tasks"],
         "candidate pass@1": f["cand"] / f["tasks"], "Δ": (f["cand"] - f["base"]) / f["tasks"]}
        for name, f in sorted(families.items())
    ]  # fmt: skip
    view["flips"] = flips
    return view


def result_page(project: str, view: dict[str, Any], who: str) -> str:
    result = view["result"]
    metrics = result.get("metrics") or {}
    body = facts(
        [("suite", result["suite_id"]), ("run", result.get("run_id")),
         ("model version", result.get("model_version_id")), ("status", result["status"]),
         ("provenance", result.get("provenance")), ("samples", result.get("sample_count")),
         *[(name, value) for name, value in sorted(metrics.items())], ("recorded by", result.get("created_by")),
         ("recorded at", result.get("created_at"))],
        caption="Result",
    )  # fmt: skip
    body += _comparisons_table(project, view["comparisons"], caption="Comparisons this result takes part in")
    if view["withheld"]:
        return page(f"Evaluation {result['result_id']}", body + f"<p>{e(view['withheld'])}</p>", who=who,
                    crumbs=_crumbs(project))  # fmt: skip
    ks = _ks(view["tasks"])
    body += table(view["families"], ["family", "tasks", "failed", *ks], caption="By family")
    rows = [{**t, "task": t["task_id"]} for t in view["tasks"]]
    body += table(
        rows,
        ["task", "family", "verdict", "samples", "passed", *ks],
        links={"task": lambda r: f"#task-{r['task_id']}"},
        caption="By task, failed first",
    )
    body += f"<h2>Samples</h2><p>{e(view['samples_note'])}</p>"
    if view.get("attempts_file"):
        url = href("p", project, "evaluations", result["result_id"], "attempts")
        body += (f'<p><a href="{e(url)}" download>Download the attempts file</a> (every sample whole, as the '
                 f"evaluator wrote it; sha256 <code>{e(view['attempts_file']['sha256'])}</code>)</p>")  # fmt: skip
    body += "".join(_task_samples(t) for t in view["tasks"])
    body += _observations(view["canaries"], view["safety"])
    return page(f"Evaluation {result['result_id']}", body, who=who, crumbs=_crumbs(project))


def comparison_page(project: str, view: dict[str, Any], who: str) -> str:
    found = view["comparison"]
    body = facts(
        [("suite", found["suite_id"]), ("primary metric", found["primary_metric"]), ("Δ", found["delta"]),
         ("95% CI", _ci(found)), ("paired tasks", found.get("paired_tasks")), ("provenance", found.get("provenance")),
         ("baseline", found["baseline_result_id"]), ("candidate", found["candidate_result_id"])],
        caption="Paired delta of the candidate over the baseline",
    )  # fmt: skip
    body += (
        f"<p>{link('Baseline result', href('p', project, 'evaluations', found['baseline_result_id']))} · "
        f"{link('Candidate result', href('p', project, 'evaluations', found['candidate_result_id']))}</p>"
    )
    if view["withheld"]:
        body += f"<p>{e(view['withheld'])}</p>"
    else:
        body += table(
            view["families"], ["family", "tasks", "baseline pass@1", "candidate pass@1", "Δ"], caption="By family"
        )
        body += table(
            view["flips"],
            ["task", "family", "change", "baseline pass@1", "candidate pass@1"],
            caption="Tasks that flipped, regressions first",
        )
    return page(f"Comparison {found['comparison_id']}", body, who=who, crumbs=_crumbs(project))


async def compare_section(ledger: Ledger, ws: str, project: str, run_ids: list[str]) -> str:
    """A compare page's evidence: each run's latest results and gate verdict, and the comparisons between them."""
    latest = await ledger.latest_results_of_runs(ws, project, run_ids)
    rows, owners = [], {}
    for run_id in run_ids:
        verdict = gate(await gather_evidence(ledger, ws, project, run_id))  # read only, as the run page reads it
        blockers = ", ".join(b["code"] for b in verdict["blockers"])
        shipped = "ships" if verdict["ship"] else f"does not ship: {blockers}"
        for result in latest[run_id] or [{}]:
            owners[result.get("result_id")] = run_id
            metrics = result.get("metrics") or {}
            rows.append({"run": run_id, "gate": shipped, "result": result.get("result_id"),
                         "suite": result.get("suite_id"), "provenance": result.get("provenance"),
                         "pass@1": metrics.get("pass@1"), "at": result.get("created_at")})  # fmt: skip
    results = table(
        rows,
        ["run", "gate", "result", "suite", "provenance", "pass@1", "at"],
        links={
            "run": lambda r: href("p", project, "runs", r["run"]),
            "result": lambda r: href("p", project, "evaluations", r["result"]) if r["result"] else "#",
        },
        caption="Latest evaluations and the gate's verdict, per run",
    )
    ids = [rid for rid in owners if rid]
    between = [
        {**_comparison_row(c), "baseline run": owners[c["baseline_result_id"]],
         "candidate run": owners[c["candidate_result_id"]]}
        for c in await ledger.comparisons_between(ws, project, ids)
        if c["baseline_result_id"] in owners and c["candidate_result_id"] in owners
    ]  # fmt: skip
    return (
        "<h2>Evaluations</h2>"
        + results
        + _comparisons_table(project, between, caption="Comparisons between these runs' results", runs=True)
    )


def _read_samples(blobs: BlobStore, record: dict[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """The result's samples by task, and a line saying where they come from and what was cut."""
    digest, why = held_attempts(blobs, record)
    if digest is None:
        return {}, why
    by_task: dict[str, list[dict[str, Any]]] = {}
    shown = 0
    with blobs.path_for(digest).open("rb") as handle:
        data = handle.read(MAX_ATTEMPTS_BYTES + 1)
    lines = data[:MAX_ATTEMPTS_BYTES].splitlines()
    cut = len(data) > MAX_ATTEMPTS_BYTES or len(lines) > MAX_SAMPLES
    for raw in lines[:MAX_SAMPLES]:
        try:
            attempt = json.loads(raw)
        except ValueError:
            cut = True  # a line cut at the byte limit
            continue
        if not isinstance(attempt, dict):
            continue
        by_task.setdefault(str(attempt.get("task_id")), []).append(_sample(attempt))
        shown += 1
    note = f"{shown} samples from the evaluator's attempts file (sha256 {digest[:12]}…), secrets redacted"
    note += f", each transcript cut at {MAX_TEXT_CHARS} characters"
    return by_task, note + (f"; the file holds more than the {shown} shown." if cut else ".")


def _sample(attempt: dict[str, Any]) -> dict[str, Any]:
    passed = bool(attempt.get("passed")) and attempt.get("verifier_status") == "ok"
    return {
        "sample": attempt.get("attempt_index"),
        "family": attempt.get("task_family"),
        "verdict": "pass" if passed else "fail",
        "command": _text(attempt.get("command")),
        "exit code": attempt.get("exit_code"),
        "verifier": attempt.get("verifier_status"),
        "timed out": attempt.get("timed_out"),
        "duration s": attempt.get("duration_s"),
        "stdout": _text(attempt.get("stdout")),
        "stderr": _text(attempt.get("stderr_tail")),
        "tamper reasons": [_text(r) for r in attempt.get("tamper_reasons") or []][:20],
        "unsafe actions": [str(a.get("kind")) for a in attempt.get("unsafe_actions") or [] if isinstance(a, dict)],
    }


def _text(value: object) -> str:
    text = redact_text(str(value or ""))
    return text if len(text) <= MAX_TEXT_CHARS else f"{text[:MAX_TEXT_CHARS]}… (cut: {len(text)} characters)"


def _tasks(per_task: dict[str, Any], samples: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for task_id in sorted(set(per_task) | set(samples)):
        found = per_task.get(task_id)
        recorded: dict[str, Any] = found if isinstance(found, dict) else {}
        own = samples.get(task_id, [])
        family = recorded.get("family") or (own[0]["family"] if own else None)
        row: dict[str, Any] = {"task_id": task_id, "family": family, "samples": len(own) or None,
                               "passed": sum(s["verdict"] == "pass" for s in own) if own else None}  # fmt: skip
        if own:
            for k in KS:
                if k <= len(own):
                    row[f"pass@{k}"] = pass_at_k(len(own), row["passed"], k)
        else:
            row["pass@1"] = _score(recorded)
        row["verdict"] = _verdict(row.get("pass@1"))
        row["sample_rows"] = own
        rows.append(row)
    order = {"fail": 0, "partial": 1, "pass": 2}
    rows.sort(key=lambda r: (order.get(r["verdict"], 3), r["task_id"]))
    return rows


def _families(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        grouped.setdefault(str(task["family"]), []).append(task)
    rows = []
    for family, members in sorted(grouped.items()):
        row: dict[str, Any] = {"family": family, "tasks": len(members),
                               "failed": sum(t["verdict"] == "fail" for t in members)}  # fmt: skip
        for key in _ks(members):
            values = [t[key] for t in members if isinstance(t.get(key), int | float)]
            row[key] = sum(values) / len(values) if len(values) == len(members) else None
        rows.append(row)
    return rows


def _ks(tasks: list[dict[str, Any]]) -> list[str]:
    return [f"pass@{k}" for k in KS if any(f"pass@{k}" in t for t in tasks)] or ["pass@1"]


def _score(row: Any) -> float | None:
    value = row.get("pass@1") if isinstance(row, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _verdict(score: float | None) -> str:
    if score is None:
        return "unscored"
    return "pass" if score >= 1.0 else "fail" if score <= 0.0 else "partial"


def _comparison_row(found: dict[str, Any]) -> dict[str, Any]:
    keys = ("comparison_id", "suite_id", "primary_metric", "delta", "ci_low", "ci_high", "provenance",
            "baseline_result_id", "candidate_result_id", "created_at")  # fmt: skip
    return {**{k: found.get(k) for k in keys}, "paired_tasks": (found.get("details") or {}).get("paired_tasks")}


def _comparisons_table(project: str, rows: list[dict[str, Any]], *, caption: str, runs: bool = False) -> str:
    shown = [{**r, "95% CI": _ci(r)} for r in rows]
    sides = ["baseline run", "candidate run"] if runs else ["baseline_result_id", "candidate_result_id"]
    return table(
        shown,
        ["comparison_id", "primary_metric", "delta", "95% CI", "provenance", *sides],
        links={"comparison_id": lambda r: href("p", project, "comparisons", r["comparison_id"])},
        caption=caption,
    )


def _ci(found: dict[str, Any]) -> str:
    low, high = found.get("ci_low"), found.get("ci_high")
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return "—"
    return f"[{low:.4g}, {high:.4g}]"


def _task_samples(task: dict[str, Any]) -> str:
    """A task's samples, folded: its summary line, then per sample its verdict, command, exit code and transcript."""
    if not task["sample_rows"]:
        return ""
    items = []
    for sample in task["sample_rows"]:
        transcript = (
            f"<details><summary>Transcript of sample {e(sample['sample'])}</summary>"
            f'<pre class="transcript">stdout:\n{escape(sample["stdout"])}\nstderr:\n{escape(sample["stderr"])}</pre>'
            "</details>"
        )
        findings = "; ".join(sample["tamper reasons"] + [f"unsafe: {kind}" for kind in sample["unsafe actions"]])
        items.append(
            f"<li><p>Sample {e(sample['sample'])}: <strong>{e(sample['verdict'])}</strong> · exit code "
            f"{e(sample['exit code'])} · verifier {e(sample['verifier'])} · timed out {e(sample['timed out'])} · "
            f"{e(sample['duration s'])} s{' · ' + escape(findings) if findings else ''}</p>"
            f'<pre class="command"><code>{escape(sample["command"])}</code></pre>{transcript}</li>'
        )
    summary = f"{e(task['task_id'])} · {e(task['family'])} · {e(task['verdict'])}"
    return (
        f'<details class="task" id="task-{escape(task["task_id"], quote=True)}"><summary>{summary}</summary>'
        f"<ol>{''.join(items)}</ol></details>"
    )


def _observations(canaries: Any, safety: Any) -> str:
    body = "<h2>Canaries and safety</h2>"
    if isinstance(canaries, dict):
        listed = canaries.get("categories")
        categories: dict[str, Any] = listed if isinstance(listed, dict) else {}
        body += facts([(k, canaries.get(k)) for k in ("task_id", "guard_rate", "isolation", "isolation_detail")
                       if k in canaries])  # fmt: skip
        rows = [{"canary": name, **v} for name, v in sorted(categories.items()) if isinstance(v, dict)]
        body += table(rows, ["canary", "guarded", "verifier_status", "passed", "reasons"], caption="Canaries")
    else:
        body += "<p>No canary observations were recorded with this result.</p>"
    if isinstance(safety, dict):
        body += facts(sorted(safety.items()), caption="Safety: how attempts were watched and what they did")
    else:
        body += "<p>No safety observations were recorded with this result.</p>"
    return body


def _crumbs(project: str) -> list[tuple[str, str]]:
    return [(project, href("p", project)), ("evaluations", href("p", project, "evaluations"))]
