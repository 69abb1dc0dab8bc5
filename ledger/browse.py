"""What the web view reads that the API has no one query for: a cursor-paged runs table with filters, and a metric
series thinned to what a chart of a given width can show.

The runs page walks `runs_by_created` (workspace, project, created_at) from a cursor (created_at, run_id), newest
first, so a page costs the same at the start of 100,000 runs as at their end. A series is cut into buckets over the
visible step range and each bucket answers its first, last, lowest and highest point (M4): the shape of the curve,
its spikes included, in at most 4 points a bucket; a range narrow enough comes back whole.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.ledger.rows import require_project

RUN_COLUMNS = (
    "run_id", "experiment_id", "method", "status", "context_status", "model_version_id", "dataset_version_id",
    "launched_by", "created_at", "updated_at", "started_at", "ended_at", "source_system",
)  # fmt: skip
MAX_PAGE = 200
MAX_BUCKETS = 4000


def runs_page(
    conn: sqlite3.Connection,
    ws: str,
    project: str,
    *,
    filters: dict[str, str | None],
    after: tuple[str, str] | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """One page of a project's runs, newest first, and the cursor of the next page (None at the end).

    filters: status, method, lane (the compute target's lane, `ssh` for `ssh:gpu1`), model_version, dataset_version,
    since and until (ISO times, on created_at)."""
    require_project(conn, ws, project)
    clauses, args = ["workspace_id = ?", "project_id = ?"], [ws, project]
    for column, key in (("status", "status"), ("method", "method"), ("model_version_id", "model_version")):
        if filters.get(key):
            clauses.append(f"{column} = ?")
            args.append(str(filters[key]))
    if filters.get("dataset_version"):
        clauses.append("dataset_version_id = ?")
        args.append(str(filters["dataset_version"]))
    if filters.get("lane"):
        clauses.append("(json_extract(config_json, '$.compute_target') = ? OR "
                       "json_extract(config_json, '$.compute_target') LIKE ? || ':%')")  # fmt: skip
        args.extend([str(filters["lane"]), str(filters["lane"])])
    if filters.get("since"):
        clauses.append("created_at >= ?")
        args.append(str(filters["since"]))
    if filters.get("until"):
        clauses.append("created_at < ?")
        args.append(str(filters["until"]))
    if after is not None:
        clauses.append("(created_at, run_id) < (?, ?)")  # a row value: the index walks straight to the cursor
        args.extend([after[0], after[1]])
    size = max(1, min(limit, MAX_PAGE))
    rows = conn.execute(
        f"SELECT {', '.join(RUN_COLUMNS)}, json_extract(config_json, '$.compute_target') AS compute_target "
        f"FROM runs WHERE {' AND '.join(clauses)} ORDER BY created_at DESC, run_id DESC LIMIT ?",
        (*args, size + 1),
    ).fetchall()
    runs = [dict(row) for row in rows[:size]]
    last = runs[-1] if len(rows) > size else None
    return {"runs": runs, "next": [last["created_at"], last["run_id"]] if last else None}


def run_events(conn: sqlite3.Connection, ws: str, project: str, run_id: str, limit: int = 200) -> list[dict[str, Any]]:
    """The run's own events, newest first (the events_by_run index): its lifecycle, however busy its project."""
    rows = conn.execute(
        "SELECT cursor, event_type, actor, created_at, payload_json FROM events "
        "WHERE workspace_id = ? AND project_id = ? AND run_id = ? ORDER BY cursor DESC LIMIT ?",
        (ws, project, run_id, max(1, min(limit, 1000))),
    ).fetchall()
    return [{**dict(row), "payload": json.loads(row["payload_json"])} for row in rows]


def campaign_reports(
    conn: sqlite3.Connection, ws: str, project: str, campaign_id: str, limit: int = 5
) -> list[dict[str, Any]]:
    """The campaign's reports, newest first, with their manifests (a project holds few reports: a scan is cheap)."""
    rows = conn.execute(
        "SELECT report_id, title, created_at, created_by, manifest_json FROM reports WHERE workspace_id = ? "
        "AND project_id = ? AND kind = 'campaign' AND json_extract(manifest_json, '$.campaign_id') = ? "
        "ORDER BY created_at DESC, report_id DESC LIMIT ?",
        (ws, project, campaign_id, max(1, min(limit, 50))),
    ).fetchall()
    found = [dict(row) for row in rows]
    return [{**record, "manifest": json.loads(record.pop("manifest_json"))} for record in found]


def run_metrics(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> list[dict[str, Any]]:
    """The run's metrics: name, point count and step range (over every attempt)."""
    rows = conn.execute(
        "SELECT s.metric, COUNT(*) AS points, MIN(p.step) AS first_step, MAX(p.step) AS last_step "
        "FROM metric_series s JOIN metric_points p ON p.series_id = s.series_id "
        "WHERE s.workspace_id = ? AND s.project_id = ? AND s.run_id = ? GROUP BY s.metric ORDER BY s.metric",
        (ws, project, run_id),
    ).fetchall()
    return [dict(row) for row in rows]


def series(
    conn: sqlite3.Connection,
    ws: str,
    project: str,
    run_id: str,
    metric: str,
    *,
    lo: int | None = None,
    hi: int | None = None,
    buckets: int = 1000,
) -> dict[str, Any]:
    """The metric's points between steps lo and hi (inclusive): whole when they fit 4 a bucket, else per bucket its
    first, last, lowest and highest point. The latest attempt wins a step several attempts logged. `times` holds
    when each point was logged (Unix seconds), None where that was not recorded."""
    ids = [
        row[0]
        for row in conn.execute(
            "SELECT series_id FROM metric_series WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
            "AND metric = ? ORDER BY attempt_id",
            (ws, project, run_id, metric),
        )
    ]
    if not ids:
        return _empty(metric)
    marks = ", ".join("?" * len(ids))
    span = conn.execute(
        f"SELECT MIN(step), MAX(step), COUNT(*) FROM metric_points WHERE series_id IN ({marks}) "
        "AND step BETWEEN ? AND ?",
        (*ids, lo if lo is not None else -(2**62), hi if hi is not None else 2**62),
    ).fetchone()
    first, last, total = span[0], span[1], int(span[2])
    if not total:
        return _empty(metric)
    buckets = max(1, min(buckets, MAX_BUCKETS))
    if total <= buckets * 4 or len(ids) > 1:
        # Several attempts: read the range whole and let the latest attempt win each step (it is bounded by the
        # same budget below in practice: a resumed run re-logs few steps).
        points = _whole(conn, ids, first, last)
        if len(points) <= buckets * 4:
            return _answer(metric, points, total, decimated=False)
    width = max(1, (last - first + 1) / buckets)
    # SQLite gives the row an aggregate's MIN or MAX came from for the bare column beside it: per bucket, the first
    # and last step with their values, and the steps of the lowest and highest value.
    rows = conn.execute(
        f"""
        WITH p AS MATERIALIZED (
            SELECT step, value, CAST((step - ?) / ? AS INTEGER) AS b FROM metric_points
            WHERE series_id IN ({marks}) AND step BETWEEN ? AND ?
        )
        SELECT step, value FROM (SELECT MIN(step) AS step, value FROM p GROUP BY b)
        UNION SELECT step, value FROM (SELECT MAX(step) AS step, value FROM p GROUP BY b)
        UNION SELECT step, value FROM (SELECT step, MIN(value) AS value FROM p GROUP BY b)
        UNION SELECT step, value FROM (SELECT step, MAX(value) AS value FROM p GROUP BY b)
        ORDER BY step
        """,
        (first, width, *ids, first, last),
    ).fetchall()
    kept: dict[int, float] = {}
    for step, value in rows:
        kept.setdefault(step, value)  # attempts that logged the same step keep one point for it
    # The chosen points' times, by key afterwards: carried through the buckets, they slowed the scan more.
    times = _times(conn, ids, list(kept))
    return _answer(metric, [(step, value, times.get(step)) for step, value in kept.items()], total, decimated=True)


def _times(conn: sqlite3.Connection, ids: list[int], steps: list[int]) -> dict[int, float | None]:
    """When each of `steps` was logged; where attempts logged one step, the latest attempt's time (`ids` are in
    attempt order), as its value wins in the series."""
    rank = {series_id: i for i, series_id in enumerate(ids)}
    found: dict[int, tuple[int, float | None]] = {}
    series = ", ".join("?" * len(ids))
    for at in range(0, len(steps), 500):
        chunk = steps[at : at + 500]
        query = (
            f"SELECT series_id, step, logged_at FROM metric_points WHERE series_id IN ({series}) "
            f"AND step IN ({', '.join('?' * len(chunk))})"
        )
        for series_id, step, logged_at in conn.execute(query, (*ids, *chunk)):
            if step not in found or rank[series_id] > found[step][0]:
                found[step] = (rank[series_id], logged_at)
    return {step: logged_at for step, (_, logged_at) in found.items()}


Point = tuple[int, float, float | None]  # step, value, when it was logged


def _whole(conn: sqlite3.Connection, ids: list[int], first: int, last: int) -> list[Point]:
    by_step: dict[int, Point] = {}
    for series_id in ids:  # in attempt order: a later attempt's point replaces an earlier one's
        for step, value, logged_at in conn.execute(
            "SELECT step, value, logged_at FROM metric_points WHERE series_id = ? AND step BETWEEN ? AND ? "
            "ORDER BY step",
            (series_id, first, last),
        ):
            by_step[step] = (step, value, logged_at)
    return [by_step[step] for step in sorted(by_step)]


def _answer(metric: str, points: list[Point], total: int, *, decimated: bool) -> dict[str, Any]:
    return {
        "metric": metric,
        "steps": [step for step, _, _ in points],
        "values": [value for _, value, _ in points],
        "times": [logged_at for _, _, logged_at in points],
        "total": total,
        "decimated": decimated,
    }


def _empty(metric: str) -> dict[str, Any]:
    return _answer(metric, [], 0, decimated=False)
