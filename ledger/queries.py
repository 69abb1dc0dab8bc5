"""Read queries; every one names its workspace and project, so another project's rows look missing."""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bashgym.client.environment import environment_differences, environment_line
from bashgym.client.errors import InvalidInput, NotFound, RuleRejected
from bashgym.client.specs import Event
from bashgym.ledger.rows import not_found, require_project, to_record
from bashgym.ledger.runs import get_run_row
from bashgym.ledger.tags import tag_filter, tagged, with_tags

ACTIVE_STATUSES = ("preparing", "running", "paused", "unknown")
MAX_PAGE = 1000


def list_projects(conn: sqlite3.Connection, ws: str) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM projects WHERE workspace_id = ? ORDER BY project_id", (ws,)).fetchall()
    return [to_record(row) for row in rows]


def get_project(conn: sqlite3.Connection, ws: str, project: str) -> dict[str, Any]:
    require_project(conn, ws, project)
    row = conn.execute("SELECT * FROM projects WHERE workspace_id = ? AND project_id = ?", (ws, project)).fetchone()
    record = to_record(row)
    record["counts"] = _inventory(conn, ws, project)
    return record


def list_experiments(conn: sqlite3.Connection, ws: str, project: str) -> list[dict[str, Any]]:
    require_project(conn, ws, project)
    rows = conn.execute(
        "SELECT * FROM experiments WHERE workspace_id = ? AND project_id = ? ORDER BY created_at", (ws, project)
    ).fetchall()
    return [to_record(row) for row in rows]


_INVENTORY_TABLES = (
    "experiments",
    "model_versions",
    "dataset_versions",
    "environments",
    "runs",
    "eval_suites",
    "eval_results",
    "comparisons",
    "artifacts",
    "decisions",
    "reports",
)


def _inventory(conn: sqlite3.Connection, ws: str, project: str, *, skip: tuple[str, ...] = ()) -> dict[str, int]:
    return {
        table: int(
            conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE workspace_id = ? AND project_id = ?", (ws, project)
            ).fetchone()[0]
        )
        for table in _INVENTORY_TABLES
        if table not in skip
    }


def _ids(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...], limit: int = 20) -> dict[str, Any]:
    rows = conn.execute(f"{sql} LIMIT {limit + 1}", args).fetchall()
    return {"ids": [row[0] for row in rows[:limit]], "truncated": len(rows) > limit}


def project_context(conn: sqlite3.Connection, ws: str, project: str, *, stale_before: str) -> dict[str, Any]:
    """Health signals, inventory, lineage and recent activity of one project."""
    require_project(conn, ws, project)
    key = (ws, project)
    scope = "workspace_id = ? AND project_id = ?"
    status_counts = dict(
        conn.execute(f"SELECT status, COUNT(*) FROM runs WHERE {scope} GROUP BY status", key).fetchall()
    )
    signals = {
        "stale_active_runs": _ids(
            conn,
            f"SELECT run_id FROM runs WHERE {scope} AND status IN "
            f"({', '.join('?' * len(ACTIVE_STATUSES))}) AND updated_at < ? "
            "ORDER BY updated_at",
            (*key, *ACTIVE_STATUSES, stale_before),
        ),
        "incomplete_lineage": _ids(
            conn,
            # INDEXED BY: without statistics the planner walks every run by created_at instead.
            f"SELECT run_id FROM runs INDEXED BY runs_incomplete WHERE {scope} AND (context_status != 'verified' "
            "OR model_version_id IS NULL OR dataset_version_id IS NULL) "
            "ORDER BY created_at DESC",
            key,
        ),
        "completed_without_evaluation": _ids(
            conn,
            f"SELECT run_id FROM runs r WHERE {scope} AND "
            "status = 'completed' AND NOT EXISTS (SELECT 1 FROM eval_results e "
            "WHERE e.workspace_id = r.workspace_id AND e.project_id = "
            "r.project_id AND e.run_id = r.run_id) ORDER BY created_at DESC",
            key,
        ),
        "terminal_without_artifact": _ids(
            conn,
            f"SELECT run_id FROM runs r WHERE {scope} AND status = 'completed' "
            "AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.workspace_id = "
            "r.workspace_id AND a.project_id = r.project_id AND a.run_id = "
            "r.run_id) ORDER BY created_at DESC",
            key,
        ),
        "failed_runs": _ids(
            conn, f"SELECT run_id FROM runs WHERE {scope} AND status = 'failed' ORDER BY created_at DESC", key
        ),
    }
    recent = {
        "runs": [
            {**run, "key_metric": _key_metric(conn, key, run["run_id"])}
            for run in _recent(
                conn, "runs", scope, key, "run_id, experiment_id, method, status, context_status, created_at"
            )
        ],
        "evaluations": _recent(conn, "eval_results", scope, key, "result_id, suite_id, run_id, status, created_at"),
        "decisions": _recent(conn, "decisions", scope, key, "decision_id, decision_type, outcome, run_id, created_at"),
        "events": [
            e.model_dump()
            for e in _event_rows(conn, f"SELECT * FROM events WHERE {scope} ORDER BY cursor DESC LIMIT 10", key)
        ],
    }
    return {
        "project": to_record(conn.execute(f"SELECT * FROM projects WHERE {scope}", key).fetchone()),
        "signals": signals,
        # Runs are counted once, by status; a second COUNT(*) over 100,000 runs costs ~10 ms.
        "inventory": {
            **_inventory(conn, ws, project, skip=("runs",)),
            "runs": sum(status_counts.values()),
            "runs_by_status": status_counts,
        },
        "lineage": {
            "model_versions": _recent(
                conn,
                "model_versions",
                scope,
                key,
                "model_version_id, model_id, kind, source_revision, config_digest, parent_version_id",
            ),
            "dataset_versions": _recent(
                conn, "dataset_versions", scope, key, "dataset_version_id, dataset_id, content_digest"
            ),
            "environments": _recent(conn, "environments", scope, key, "environment_id, compute_target, runtime_digest"),
            "aliases": [
                dict(row)
                for row in conn.execute(
                    f"SELECT alias, model_version_id, updated_at FROM model_aliases WHERE {scope}", key
                )
            ],
        },
        "recent": recent,
        "evidence": {
            "evaluation_result_ids": [r["result_id"] for r in recent["evaluations"]],
            "comparison_ids": _ids(
                conn, f"SELECT comparison_id FROM comparisons WHERE {scope} ORDER BY created_at DESC", key
            )["ids"],
            "artifact_ids": _ids(
                conn, f"SELECT artifact_id FROM artifacts WHERE {scope} ORDER BY created_at DESC", key
            )["ids"],
            "decision_ids": [d["decision_id"] for d in recent["decisions"]],
        },
    }


KEY_EVALUATION_METRICS = ("pass@1", "mean_success")


def _key_metric(conn: sqlite3.Connection, key: tuple[str, str], run_id: str) -> dict[str, Any] | None:
    """The figure a person asks of a run first: its latest evaluation's pass@1 (or the suite's first metric), else
    its latest training loss; None before either exists."""
    evaluated = conn.execute(
        "SELECT suite_id, metrics_json FROM eval_results WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
        "AND status = 'completed' ORDER BY created_at DESC LIMIT 1",
        (*key, run_id),
    ).fetchone()
    if evaluated is not None:
        metrics = {k: v for k, v in json.loads(evaluated["metrics_json"]).items() if isinstance(v, int | float)}
        name = next((m for m in KEY_EVALUATION_METRICS if m in metrics), min(metrics, default=None))
        if name is not None:
            return {"name": name, "value": metrics[name], "suite_id": evaluated["suite_id"]}
    loss = conn.execute(
        "SELECT p.value, p.step FROM metric_series s JOIN metric_points p ON p.series_id = s.series_id "
        "WHERE s.workspace_id = ? AND s.project_id = ? AND s.run_id = ? AND s.metric = 'train.loss' "
        "ORDER BY p.step DESC LIMIT 1",
        (*key, run_id),
    ).fetchone()
    return None if loss is None else {"name": "train.loss", "value": loss["value"], "step": loss["step"]}


def _recent(
    conn: sqlite3.Connection, table: str, scope: str, key: tuple[Any, ...], columns: str, limit: int = 10
) -> list[dict[str, Any]]:
    rows = conn.execute(
        f"SELECT {columns} FROM {table} WHERE {scope} ORDER BY created_at DESC LIMIT {limit}"
        if "created_at" in columns or table in ("runs", "eval_results", "decisions")
        else f"SELECT {columns} FROM {table} WHERE {scope} LIMIT {limit}",
        key,
    ).fetchall()
    return [dict(row) for row in rows]


def list_runs(
    conn: sqlite3.Connection,
    ws: str,
    project: str,
    *,
    status: str | None = None,
    method: str | None = None,
    experiment: str | None = None,
    limit: int = 50,
    before: str | None = None,
    tags: list[tuple[str, str | None]] | None = None,
) -> list[dict[str, Any]]:
    """The project's runs, newest first; `tags` (key, value or None for any value) must all be carried."""
    require_project(conn, ws, project)
    clauses, args = ["workspace_id = ?", "project_id = ?"], [ws, project]
    for column, value in (("status", status), ("method", method), ("experiment_id", experiment)):
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    if before is not None:
        clauses.append("created_at < ?")
        args.append(before)
    tagged, tag_args = tag_filter("run", tags or [])
    limit = _page_size(limit)
    rows = conn.execute(
        f"SELECT * FROM runs WHERE {' AND '.join(clauses + tagged)} ORDER BY created_at DESC LIMIT ?",
        (*args, *tag_args, limit),
    ).fetchall()
    return with_tags(conn, ws, project, "run", [to_record(row) for row in rows])


def list_model_versions(
    conn: sqlite3.Connection,
    ws: str,
    project: str,
    *,
    tags: list[tuple[str, str | None]] | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """The project's model versions, newest first, with their tags; `tags` must all be carried."""
    require_project(conn, ws, project)
    rows = tagged(conn, ws, project, "model_version", tags, order="created_at DESC", limit=_page_size(limit))
    return with_tags(conn, ws, project, "model_version", [to_record(row) for row in rows])


def runs_rewarded_by(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> list[dict[str, Any]]:
    """The project's runs whose rewards came from the model `run_id` kept: GRPO runs naming, as their reward model,
    a model version registered from that run (its source `bashgym://runs/<run_id>`)."""
    require_project(conn, ws, project)
    rows = conn.execute(
        "SELECT r.* FROM runs AS r JOIN model_versions AS m ON m.workspace_id = r.workspace_id "
        "AND m.project_id = r.project_id "
        "AND m.model_version_id = json_extract(r.config_json, '$.grpo_reward_model_version_id') "
        "WHERE r.workspace_id = ? AND r.project_id = ? AND m.source_uri = ? ORDER BY r.created_at",
        (ws, project, f"bashgym://runs/{run_id}"),
    ).fetchall()
    return [to_record(row) for row in rows]


def _page_size(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit is {limit}; it must be between 1 and {MAX_PAGE}.")
    return limit


def protected_suites(conn: sqlite3.Connection, ws: str, project: str) -> set[str]:
    rows = conn.execute(
        "SELECT suite_id FROM eval_suites WHERE workspace_id = ? AND project_id = ? AND is_protected = 1", (ws, project)
    )
    return {row[0] for row in rows}


def get_report(conn: sqlite3.Connection, ws: str, project: str, report_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM reports WHERE workspace_id = ? AND project_id = ? AND report_id = ?", (ws, project, report_id)
    ).fetchone()
    if row is None:
        raise NotFound(f"No report {report_id!r} in project {project!r}.")
    return to_record(row)


def get_model_version(conn: sqlite3.Connection, ws: str, project: str, version: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM model_versions WHERE workspace_id = ? AND project_id = ? AND model_version_id = ?",
        (ws, project, version),
    ).fetchone()
    if row is None:
        raise NotFound(
            f"No model version {version!r} in project {project!r}.",
            hint=f"See the project's models with bashgym ledger context --project {project}.",
        )
    return to_record(row)


def alias_holder(conn: sqlite3.Connection, ws: str, project: str, alias: str) -> str | None:
    """The model version an alias points at now, if it is set."""
    row = conn.execute(
        "SELECT model_version_id FROM model_aliases WHERE workspace_id = ? AND project_id = ? AND alias = ?",
        (ws, project, alias),
    ).fetchone()
    return str(row["model_version_id"]) if row is not None else None


def find_environment(conn: sqlite3.Connection, ws: str, project: str, environment: str | None) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT * FROM environments WHERE workspace_id = ? AND project_id = ? AND environment_id = ?",
        (ws, project, environment),
    ).fetchone()
    return to_record(row) if row else None


def get_dataset_version(conn: sqlite3.Connection, ws: str, project: str, version: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM dataset_versions WHERE workspace_id = ? AND project_id = ? AND dataset_version_id = ?",
        (ws, project, version),
    ).fetchone()
    if row is None:
        raise NotFound(
            f"No dataset version {version!r} in project {project!r}.",
            hint=f"See the project's datasets with bashgym ledger context --project {project}; register one with "
            "bashgym dataset register.",
        )
    return to_record(row)


def run_head(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> dict[str, Any]:
    """The run's record and its attempts, without its evaluations, artifacts and summaries: what a route that only
    writes to the run needs (a tracked run's metric batch every second reads no more)."""
    run = to_record(get_run_row(conn, ws, project, run_id))
    run["attempts"] = [
        to_record(r)
        for r in conn.execute(
            "SELECT * FROM attempts WHERE workspace_id = ? AND project_id = ? AND run_id = ? ORDER BY attempt_number",
            (ws, project, run_id),
        )
    ]
    return run


def get_run(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> dict[str, Any]:
    run = run_head(conn, ws, project, run_id)
    key = (ws, project, run_id)
    scope = "workspace_id = ? AND project_id = ? AND run_id = ?"
    run["evaluations"] = [
        to_record(r) for r in conn.execute(f"SELECT * FROM eval_results WHERE {scope} ORDER BY created_at", key)
    ]
    run["artifacts"] = [
        to_record(r) for r in conn.execute(f"SELECT * FROM artifacts WHERE {scope} ORDER BY created_at", key)
    ]
    # A scaled-out run's shape (world size, machines, group); a run without one ran as one process.
    topology = conn.execute(
        f"SELECT payload_json FROM events WHERE {scope} AND event_type = 'run.topology' ORDER BY cursor DESC LIMIT 1",
        key,
    ).fetchone()
    run["topology"] = json.loads(topology[0]) if topology else None
    run["environment"] = run_environment(conn, ws, project, run_id)
    # What its supervisor flagged as it trained (a non-finite loss, a step that trained nothing), oldest first.
    run["anomalies"] = [
        json.loads(row[0])
        for row in conn.execute(
            f"SELECT payload_json FROM events WHERE {scope} AND event_type = 'run.anomaly' ORDER BY cursor", key
        )
    ]
    run["metric_summary"] = {
        row["metric"]: {"count": row["n"], "min": row["lo"], "max": row["hi"], "last_step": row["last_step"]}
        for row in conn.execute(
            f"SELECT metric, COUNT(*) AS n, MIN(value) AS lo, MAX(value) AS hi, MAX(step) AS last_step "
            f"FROM metric_values WHERE {scope} GROUP BY metric",
            key,
        )
    }
    for metric, summary in run["metric_summary"].items():
        last = conn.execute(
            f"SELECT value FROM metric_values WHERE {scope} AND metric = ? ORDER BY attempt_id DESC, step DESC LIMIT 1",
            (*key, metric),
        ).fetchone()
        summary["latest"] = last[0] if last else None
    return run


def trend_json(conn: sqlite3.Connection, ws: str, project: str, metric: str, run_id: str | None) -> str:
    """A metric's points (one run) or each run's latest value (whole project), with a summary, as JSON text.

    One run's points are aggregated and rendered to JSON inside SQLite: a Python loop over 100,000
    points costs ~0.5 s here, the SQL a fraction of that. The regression runs on centred, scaled REALs
    (see _fit_sums), so no point the API accepts (any finite double, any step up to 2**63-1) overflows it.
    """
    require_project(conn, ws, project)
    if run_id is None:
        return json.dumps(_trend_across_runs(conn, ws, project, metric), allow_nan=False)
    get_run_row(conn, ws, project, run_id)
    key = (ws, project, run_id, metric)
    where = "workspace_id = ? AND project_id = ? AND run_id = ? AND metric = ?"
    first = conn.execute(
        f"SELECT step, value FROM metric_values WHERE {where} ORDER BY attempt_id, step LIMIT 1", key
    ).fetchone()
    latest = conn.execute(
        f"SELECT value FROM metric_values WHERE {where} ORDER BY attempt_id DESC, step DESC LIMIT 1", key
    ).fetchone()
    if first is None or latest is None:
        head = json.dumps({"metric": metric, "run_id": run_id, "summary": summarize([], [])})
        return f'{head[:-1]},"steps":[],"values":[]}}'
    count, lo, hi, sxu, sxx, y_half, steps, values = _fit_sums(conn, where, key, first[0])
    slope = _slope(sxu, sxx, y_half) if count > 1 else None
    summary = _summary(count, first[1], latest[0], lo, hi, slope)
    if max(-lo, hi) > SQLITE_JSON_REAL_MAX:  # rare: Python writes every double so that it reads back exactly
        rows = conn.execute(
            f"SELECT step, value FROM metric_values WHERE {where} ORDER BY attempt_id, step", key
        ).fetchall()
        steps, values = json.dumps([row[0] for row in rows]), json.dumps([row[1] for row in rows], allow_nan=False)
    head = json.dumps({"metric": metric, "run_id": run_id, "summary": summary}, allow_nan=False)
    return f'{head[:-1]},"steps":{steps},"values":{values}}}'


# SQLite writes a REAL into JSON with 15 significant digits: a value past this one comes out as a number
# past the largest double (1.79769313486232e+308), which clients read back as infinity.
SQLITE_JSON_REAL_MAX = 1.7976931348623e308


def _fit_sums(
    conn: sqlite3.Connection, where: str, key: tuple[str, ...], first_step: int
) -> tuple[int, float, float, float, float, float, str, str]:
    """count, min, max, the regression's sums, the values' half-range and the points as JSON arrays.

    Plain sums overflow at the extremes the API accepts: SUM(step) past 2**63 is an SQLite error, two
    values of 1e308 sum to infinity, and steps near 3e9 square past 2**53 and cancel to a slope of the
    wrong sign. So each step becomes its distance from the first step (integer arithmetic, exact for any
    two 63-bit steps) less the mean distance, and each value its distance from the middle of the values'
    range over their half-range, within [-1, 1]: no product or sum of these overflows, and
    slope = sum(dx * u) / sum(dx * dx) * half-range.
    """
    count, lo, hi, mean_dx = conn.execute(
        f"SELECT COUNT(*), MIN(value), MAX(value), AVG(CAST(step - ? AS REAL)) FROM metric_values WHERE {where}",
        (first_step, *key),
    ).fetchone()
    centre, y_half = _centre_and_half(lo, hi)
    sxu, sxx, steps, values = conn.execute(
        "SELECT TOTAL(dx * u), TOTAL(dx * dx), json_group_array(step), json_group_array(value) FROM "
        "(SELECT step, value, CAST(step - ? AS REAL) - ? AS dx, (value - ?) / ? AS u "
        f"FROM metric_values WHERE {where} ORDER BY attempt_id, step)",
        (first_step, mean_dx, centre, y_half or 1.0, *key),
    ).fetchone()
    return count, lo, hi, sxu, sxx, y_half, steps, values


def _centre_and_half(lo: float, hi: float) -> tuple[float, float]:
    """The middle of [lo, hi] and half its width, halved first: (hi - lo) overflows for -1e308 and 1e308."""
    return lo / 2 + hi / 2, hi / 2 - lo / 2


def _slope(sxu: float, sxx: float, y_half: float, x_half: float = 1.0) -> float | None:
    """The least-squares slope from sums over scaled values, or None where it lies past the largest double."""
    if not sxx or not y_half:
        return 0.0  # every x alike, or every y alike: nothing rises or falls
    ratio = sxu / sxx
    slope = ratio * y_half / x_half
    if not math.isfinite(slope):
        slope = ratio / x_half * y_half
    return slope if math.isfinite(slope) else None


def _summary(
    count: int, first: float, latest: float, lo: float, hi: float, slope: float | None
) -> dict[str, float | int | None]:
    delta = latest - first  # -1e308 to 1e308 is past the largest double: null, as JSON has no infinity
    return {
        "count": count,
        "first": first,
        "latest": latest,
        "min": lo,
        "max": hi,
        "delta": delta if math.isfinite(delta) else None,
        "slope": slope,
    }


def _trend_across_runs(conn: sqlite3.Connection, ws: str, project: str, metric: str) -> dict[str, Any]:
    runs = conn.execute(
        "SELECT run_id FROM runs WHERE workspace_id = ? AND project_id = ? ORDER BY created_at LIMIT 1000",
        (ws, project),
    ).fetchall()
    run_ids, values = [], []
    for (rid,) in runs:
        last = conn.execute(
            "SELECT value FROM metric_values WHERE workspace_id = ? AND project_id = ? AND "
            "run_id = ? AND metric = ? ORDER BY attempt_id DESC, step DESC LIMIT 1",
            (ws, project, rid, metric),
        ).fetchone()
        if last is not None:
            run_ids.append(rid)
            values.append(last[0])
    return {
        "metric": metric,
        "run_id": None,
        "run_ids": run_ids,
        "values": values,
        "summary": summarize([float(i) for i in range(len(values))], values),
    }


def summarize(xs: list[float], ys: list[float]) -> dict[str, float | int | None]:
    """count, first, latest, min, max, delta and least-squares slope of ys over xs.

    Any finite xs and ys: both are centred and scaled into [-1, 1] first (as in _fit_sums), and a delta or
    slope past the largest double is None.
    """
    if not ys:
        return {"count": 0, "first": None, "latest": None, "min": None, "max": None, "delta": None, "slope": None}
    n, lo, hi = len(ys), min(ys), max(ys)
    slope = None
    if n > 1:
        x_centre, x_half = _centre_and_half(min(xs), max(xs))
        scaled_xs = [(x - x_centre) / (x_half or 1.0) for x in xs]
        mean_x = sum(scaled_xs) / n
        y_centre, y_half = _centre_and_half(lo, hi)
        us = [(y - y_centre) / (y_half or 1.0) for y in ys]
        sxu = sum((x - mean_x) * u for x, u in zip(scaled_xs, us, strict=True))
        sxx = sum((x - mean_x) ** 2 for x in scaled_xs)
        slope = _slope(sxu, sxx, y_half, x_half or 1.0)
    return _summary(n, ys[0], ys[-1], lo, hi, slope)


def list_evaluations(
    conn: sqlite3.Connection, ws: str, project: str, *, suite: str | None = None, limit: int = 100
) -> dict[str, Any]:
    require_project(conn, ws, project)
    suites = [
        to_record(r)
        for r in conn.execute(
            "SELECT * FROM eval_suites WHERE workspace_id = ? AND project_id = ? ORDER BY suite_id", (ws, project)
        )
    ]
    args: tuple[Any, ...] = (ws, project) if suite is None else (ws, project, suite)
    where = "" if suite is None else " AND suite_id = ?"
    results = [
        to_record(r)
        for r in conn.execute(
            f"SELECT * FROM eval_results WHERE workspace_id = ? AND project_id = ?{where} "
            f"ORDER BY created_at DESC LIMIT {_page_size(limit)}",
            args,
        )
    ]
    comparisons = [
        to_record(r)
        for r in conn.execute(
            "SELECT * FROM comparisons WHERE workspace_id = ? AND project_id = ? ORDER BY created_at DESC LIMIT 100",
            (ws, project),
        )
    ]
    return {"suites": suites, "results": results, "comparisons": comparisons}


def compare_runs(
    conn: sqlite3.Connection, ws: str, project: str, run_ids: list[str], suite_id: str | None = None
) -> dict[str, Any]:
    """Compare completed results of 2..20 runs on one exact suite; list the runs that cannot be compared."""
    if not 2 <= len(run_ids) <= 20 or len(set(run_ids)) != len(run_ids):
        raise InvalidInput(f"compare takes 2 to 20 distinct runs; got {len(run_ids)}.")
    require_project(conn, ws, project)
    latest: dict[str, dict[str, dict[str, Any]]] = {}
    for rid in run_ids:
        get_run_row(conn, ws, project, rid)
        rows = conn.execute(
            "SELECT * FROM eval_results WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
            "AND status = 'completed' ORDER BY created_at",
            (ws, project, rid),
        ).fetchall()
        latest[rid] = {row["suite_id"]: to_record(row) for row in rows}
    suite_id = suite_id or _common_suite(latest, run_ids)
    if suite_id is None:
        raise RuleRejected(
            "These runs share no evaluation suite with completed results; results compare only "
            "on the exact same suite id.",
            hint="Evaluate the runs on one suite (bashgym eval run --suite S --run R), then compare.",
            details={"suites_by_run": {rid: sorted(latest[rid]) for rid in run_ids}},
        )
    suite = conn.execute(
        "SELECT * FROM eval_suites WHERE workspace_id = ? AND project_id = ? AND suite_id = ?", (ws, project, suite_id)
    ).fetchone()
    if suite is None:
        raise not_found("evaluation suite", suite_id, project, f"bashgym ledger evaluations --project {project}")
    contract = json.loads(suite["scoring_contract_json"])
    comparable = [rid for rid in run_ids if suite_id in latest[rid]]
    if len(comparable) < 2:
        raise RuleRejected(
            f"Fewer than two of these runs have a completed result on suite {suite_id!r}.",
            hint="Evaluate the missing runs on that suite first.",
        )
    return {
        "suite_id": suite_id,
        "primary_metric": contract["primary_metric"],
        "environments": compare_environments(conn, ws, project, comparable),
        "rows": _compare_rows(latest, comparable, suite_id, contract),
        "not_comparable": [
            {"run_id": rid, "reason": f"no completed result on suite {suite_id}; has {sorted(latest[rid]) or 'none'}"}
            for rid in run_ids
            if rid not in comparable
        ],
    }


def run_environment(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> dict[str, Any] | None:
    """The environment the run's own process last measured (a resumed run measures again), with the daemon's digest
    and who measured it; None when nothing reported one."""
    row = conn.execute(
        "SELECT payload_json, actor FROM events WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
        "AND event_type = 'run.environment' ORDER BY cursor DESC LIMIT 1",
        (ws, project, run_id),
    ).fetchone()
    if row is None:
        return None
    recorded = json.loads(row[0])
    return {**recorded, "recorded_by": row[1], "summary": environment_line(recorded["environment"])}


def compare_environments(conn: sqlite3.Connection, ws: str, project: str, run_ids: list[str]) -> dict[str, Any]:
    """Whether the runs trained in the same environment, by their measured digests; each run's differing facts
    against the first run's, and one line saying so."""
    recorded = {rid: run_environment(conn, ws, project, rid) for rid in run_ids}
    first = recorded[run_ids[0]]
    differences = {
        rid: found for rid in run_ids[1:] if (found := environment_differences(_facts(recorded[rid]), _facts(first)))
    }
    listed = "; ".join(f"{rid} vs {run_ids[0]}: {', '.join(found)}" for rid, found in differences.items())
    note = f"environments differ: {listed}" if differences else "environments alike: the same measured digest"
    if not differences and first is None:
        note = "environments not recorded: none of these runs reported one"
    return {
        "same": not differences and first is not None,
        "digests": {rid: (env or {}).get("digest") for rid, env in recorded.items()},
        "differences": differences,
        "note": note,
    }


def _facts(recorded: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if recorded is None else dict(recorded["environment"])


def _common_suite(latest: dict[str, dict[str, dict[str, Any]]], run_ids: list[str]) -> str | None:
    counts: dict[str, int] = {}
    for rid in run_ids:
        for suite in latest[rid]:
            counts[suite] = counts.get(suite, 0) + 1
    shared = [(n, suite) for suite, n in counts.items() if n >= 2 and suite in latest[run_ids[0]]]
    return max(shared)[1] if shared else None


def _compare_rows(
    latest: dict[str, dict[str, dict[str, Any]]], run_ids: list[str], suite_id: str, contract: dict[str, Any]
) -> list[dict[str, Any]]:
    first = latest[run_ids[0]][suite_id]["metrics"]
    rows = []
    for rid in run_ids:
        result = latest[rid][suite_id]
        metrics = {}
        for name, spec in contract["metrics"].items():
            value = result["metrics"].get(name)
            delta = None if value is None or name not in first else value - first[name]
            better = None if delta is None else (delta > 0 if spec["direction"] == "maximize" else delta < 0)
            metrics[name] = {"value": value, "delta": delta, "direction": spec["direction"], "better": better}
        rows.append({"run_id": rid, "result_id": result["result_id"], "metrics": metrics})
    return rows


def _event_rows(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[Event]:
    events = []
    for row in conn.execute(sql, args):
        record = dict(row)
        record["payload"] = json.loads(record.pop("payload_json"))
        events.append(Event.model_validate(record))
    return events


# SQLite renders each event to JSON itself: building 100 pydantic events per page costs ~2 ms here.
_EVENT_JSON = (
    "json_object('cursor', cursor, 'event_id', event_id, 'event_type', event_type, 'workspace_id', workspace_id, "
    "'project_id', project_id, 'experiment_id', experiment_id, 'run_id', run_id, 'attempt_id', attempt_id, "
    "'actor', actor, 'credential_kind', credential_kind, 'capability', capability, 'correlation_id', "
    "correlation_id, 'payload', json(payload_json), 'created_at', created_at, 'prev_hash', prev_hash, "
    "'hash', hash)"
)


@dataclass(frozen=True)
class RawPage:
    """An event page already rendered to JSON, with what callers need to decide on it."""

    text: str
    count: int
    next_cursor: int


def events_page_json(
    conn: sqlite3.Connection,
    ws: str,
    project: str | None,
    *,
    after_cursor: int,
    limit: int,
    types: list[str] | None = None,
) -> RawPage:
    """Events after a cursor, oldest first, for one project (or the workspace when project is None)."""
    if after_cursor < 0:
        raise InvalidInput("after_cursor must be 0 or more.")
    limit = _page_size(limit)
    clauses, args = ["cursor > ?", "workspace_id = ?"], [after_cursor, ws]
    if project is not None:
        require_project(conn, ws, project)
        clauses.append("project_id = ?")
        args.append(project)
    if types:
        clauses.append(f"event_type IN ({', '.join('?' * len(types))})")
        args.extend(types)
    rows = conn.execute(
        f"SELECT cursor, {_EVENT_JSON} FROM events WHERE {' AND '.join(clauses)} ORDER BY cursor LIMIT ?",
        (*args, limit + 1),
    ).fetchall()
    page = rows[:limit]
    next_cursor = page[-1][0] if page else after_cursor
    has_more = "true" if len(rows) > limit else "false"
    events = ",".join(row[1] for row in page)
    text = f'{{"after_cursor":{after_cursor},"next_cursor":{next_cursor},"has_more":{has_more},"events":[{events}]}}'
    return RawPage(text=text, count=len(page), next_cursor=next_cursor)


def last_cursor(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT MAX(cursor) FROM events").fetchone()
    return int(row[0] or 0)


def get_consumer_cursor(conn: sqlite3.Connection, name: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT name, cursor, updated_at, owner FROM consumer_cursors WHERE name = ?", (name,)
    ).fetchone()
    return dict(row) if row else {"name": name, "cursor": 0, "updated_at": None, "owner": ""}


def notice_event(conn: sqlite3.Connection, ws: str, cursor: int, event_id: str) -> dict[str, Any]:
    """The event a notice was rendered from, checked against the event id its consumer reported."""
    row = conn.execute(
        "SELECT cursor, event_id, event_type, project_id FROM events WHERE cursor = ? AND workspace_id = ?",
        (cursor, ws),
    ).fetchone()
    if row is None or row["event_id"] != event_id:
        raise NotFound(
            f"No event {event_id!r} at cursor {cursor} in workspace {ws!r}.",
            hint="Report only notices received from GET /v1/notices, with their cursor and event_id.",
        )
    return dict(row)


def notice_failures(conn: sqlite3.Connection, ws: str, *, since: str, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """How many `notice.failed` events workspace `ws` has since `since` (UTC), and the latest `limit` of them."""
    # No index covers event_type: this scans the log, which a doctor's occasional call can afford.
    where = "event_type = 'notice.failed' AND workspace_id = ? AND created_at >= ?"
    count = conn.execute(f"SELECT COUNT(*) FROM events WHERE {where}", (ws, since)).fetchone()[0]
    rows = conn.execute(
        f"SELECT project_id, created_at, payload_json FROM events WHERE {where} ORDER BY cursor DESC LIMIT ?",
        (ws, since, limit),
    ).fetchall()
    latest = [
        {**json.loads(row["payload_json"]), "project_id": row["project_id"], "created_at": row["created_at"]}
        for row in rows
    ]
    return int(count), latest


def active_runs(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every run a daemon may still own (queued, preparing, running, paused, unknown), with its latest attempt,
    oldest first: a restart must also start the runs that were still waiting for a slot, in their order."""
    owned = ("queued", *ACTIVE_STATUSES)
    rows = conn.execute(
        "SELECT r.workspace_id, r.project_id, r.run_id, r.status, r.method, r.recipe_digest, r.source_system, "
        "json_extract(r.config_json, '$.dataset_sha256') AS dataset_sha256, "
        "json_extract(r.config_json, '$.external_job_id') AS external_job_id, "
        "(SELECT a.attempt_id FROM attempts a WHERE a.workspace_id = r.workspace_id AND a.project_id = r.project_id "
        "AND a.run_id = r.run_id ORDER BY a.attempt_number DESC LIMIT 1) AS attempt_id "
        f"FROM runs r WHERE r.status IN ({', '.join('?' * len(owned))}) ORDER BY r.created_at, r.run_id",
        owned,
    ).fetchall()
    return [dict(row) for row in rows]


_HOLDS_FROM = ("run.started", "run.resumed")
_HOLDS_UNTIL = ("run.paused", "run.unknown", "run.completed", "run.failed", "run.cancelled")


def run_hours(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> float:
    """The hours a run held its compute: from each start or resume to the next pause, loss or end. Time spent
    queued, loading before the first step, or paused is not counted."""
    kinds = (*_HOLDS_FROM, *_HOLDS_UNTIL)
    rows = conn.execute(
        "SELECT event_type, created_at FROM events WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
        f"AND event_type IN ({', '.join('?' * len(kinds))}) ORDER BY cursor",
        (ws, project, run_id, *kinds),
    ).fetchall()
    seconds, since = 0.0, None
    for kind, created_at in rows:
        at = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        if kind in _HOLDS_FROM:
            since = since or at
        elif since is not None:
            seconds += max((at - since).total_seconds(), 0.0)
            since = None
    return seconds / 3600


def settled_gpu_hours(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> float | None:
    """The GPU-hours a run's own settlement (`<run>.settle`) charged its project; None before it settles."""
    row = conn.execute(
        "SELECT gpu_hours FROM budget_entries WHERE workspace_id = ? AND project_id = ? AND entry_id = ?",
        (ws, project, f"{run_id}.settle"),
    ).fetchone()
    return None if row is None else float(row[0])


def run_event_payloads(conn: sqlite3.Connection, ws: str, project: str, run_id: str, event_type: str) -> list[Any]:
    rows = conn.execute(
        "SELECT payload_json FROM events WHERE workspace_id = ? AND project_id = ? AND run_id = ? AND event_type = ? "
        "ORDER BY cursor",
        (ws, project, run_id, event_type),
    ).fetchall()
    return [json.loads(row[0]) for row in rows]


def budget_summary(conn: sqlite3.Connection, ws: str, project: str, scope: str = "project") -> dict[str, Any]:
    """Limits, amendments, outstanding reservations, settled use and what remains (None: no limit set)."""
    require_project(conn, ws, project)
    totals = {kind: (0.0, 0) for kind in ("limit", "amend", "reserve", "release", "settle")}
    for kind, hours, runs in conn.execute(
        "SELECT kind, COALESCE(SUM(gpu_hours), 0), COALESCE(SUM(runs), 0) FROM budget_entries "
        "WHERE workspace_id = ? AND project_id = ? AND scope = ? GROUP BY kind",
        (ws, project, scope),
    ):
        totals[kind] = (float(hours), int(runs))
    has_limit = (
        conn.execute(
            "SELECT 1 FROM budget_entries WHERE workspace_id = ? AND project_id = ? AND scope = ? AND kind = 'limit'",
            (ws, project, scope),
        ).fetchone()
        is not None
    )
    reserved = (totals["reserve"][0] - totals["release"][0], totals["reserve"][1] - totals["release"][1])
    summary: dict[str, Any] = {
        "scope": scope,
        "has_limit": has_limit,
        "limit": {"gpu_hours": totals["limit"][0], "runs": totals["limit"][1]},
        "amended": {"gpu_hours": totals["amend"][0], "runs": totals["amend"][1]},
        "reserved": {"gpu_hours": reserved[0], "runs": reserved[1]},
        "settled": {"gpu_hours": totals["settle"][0], "runs": totals["settle"][1]},
    }
    if has_limit:
        summary["remaining"] = {
            unit: summary["limit"][unit]
            + summary["amended"][unit]
            - summary["reserved"][unit]
            - summary["settled"][unit]
            for unit in ("gpu_hours", "runs")
        }
    else:
        summary["remaining"] = None
    return summary


_ENTITY_TABLES = {
    "eval_result": ("eval_results", "result_id"),
    "comparison": ("comparisons", "comparison_id"),
    "decision": ("decisions", "decision_id"),
    "runcard": ("runcards", "card_id"),
    "report": ("reports", "report_id"),
    "model_version": ("model_versions", "model_version_id"),
    "dataset_version": ("dataset_versions", "dataset_version_id"),
}
ENTITY_KINDS = tuple(_ENTITY_TABLES)


def entity(conn: sqlite3.Connection, ws: str, project: str, kind: str, entity_id: str) -> dict[str, Any] | None:
    """One evidence row by its kind and id (None when absent), as the API shows it."""
    table, column = _ENTITY_TABLES[kind]
    row = conn.execute(
        f"SELECT * FROM {table} WHERE workspace_id = ? AND project_id = ? AND {column} = ?", (ws, project, entity_id)
    ).fetchone()
    return to_record(row) if row else None


def campaign_schedule_channel(conn: sqlite3.Connection, ws: str, project: str, campaign_id: str) -> str:
    row = conn.execute(
        "SELECT channel FROM schedules WHERE workspace_id = ? AND project_id = ? AND campaign_id = ? "
        "AND kind = 'report'",
        (ws, project, campaign_id),
    ).fetchone()
    return str(row[0]) if row else ""
