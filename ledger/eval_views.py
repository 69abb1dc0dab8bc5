"""What the web view's evaluation pages read: one result, one comparison, the comparisons a result takes part in, and
the latest results of a few runs (each a primary-key or index read: a project with thousands of results costs the same).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from bashgym.client.errors import NotFound
from bashgym.ledger.rows import require_project, to_record

MAX_RESULTS_PER_RUN = 5


def eval_result(conn: sqlite3.Connection, ws: str, project: str, result_id: str) -> dict[str, Any]:
    return _one(conn, ws, project, "eval_results", "result_id", result_id, what="evaluation result")


def comparison(conn: sqlite3.Connection, ws: str, project: str, comparison_id: str) -> dict[str, Any]:
    return _one(conn, ws, project, "comparisons", "comparison_id", comparison_id, what="comparison")


def _one(
    conn: sqlite3.Connection, ws: str, project: str, table: str, key: str, value: str, *, what: str
) -> dict[str, Any]:
    """One row of `table` (a name of this module's, never the caller's) by its primary key in the project."""
    require_project(conn, ws, project)
    row = conn.execute(
        f"SELECT * FROM {table} WHERE workspace_id = ? AND project_id = ? AND {key} = ?", (ws, project, value)
    ).fetchone()
    if row is None:
        raise NotFound(f"No {what} {value!r} in project {project!r}.")
    return to_record(row)


def comparisons_between(
    conn: sqlite3.Connection, ws: str, project: str, result_ids: list[str], limit: int = 50
) -> list[dict[str, Any]]:
    """The comparisons, newest first, whose baseline or candidate is one of `result_ids`."""
    if not result_ids:
        return []
    marks = ", ".join("?" * len(result_ids))
    rows = conn.execute(
        f"SELECT * FROM comparisons WHERE workspace_id = ? AND project_id = ? AND (baseline_result_id IN ({marks}) "
        f"OR candidate_result_id IN ({marks})) ORDER BY created_at DESC, comparison_id DESC LIMIT ?",
        (ws, project, *result_ids, *result_ids, max(1, min(limit, 200))),
    ).fetchall()
    return [to_record(row) for row in rows]


def latest_results_of_runs(
    conn: sqlite3.Connection, ws: str, project: str, run_ids: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Each run's latest results (at most MAX_RESULTS_PER_RUN, newest first), by run id (eval_results_by_run)."""
    require_project(conn, ws, project)
    found: dict[str, list[dict[str, Any]]] = {}
    for run_id in run_ids:
        rows = conn.execute(
            "SELECT * FROM eval_results WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
            "ORDER BY created_at DESC, result_id DESC LIMIT ?",
            (ws, project, run_id, MAX_RESULTS_PER_RUN),
        ).fetchall()
        found[run_id] = [to_record(row) for row in rows]
    return found
