"""The runs table: a project's runs (or an experiment's, or a campaign's) through a filter in the search grammar
(run_filter.py), sorted by any column, with chosen metric, param, tag and evaluation columns, a page at a time.

A page's cursor is the last run's id: the next page starts after that run's sort key (its value, then its id), a row
value, so each page costs the same however deep it is. Sorted by created_at (the default) the walk follows the
`runs_by_created` index and stops when the page is full. Sorted by any other column, each page first computes the
sort key of every run the filter keeps (one indexed look-up per run and column: metric_series's unique key, the
events_by_run and eval_results_by_run indexes), sorts them, then reads the chosen columns of the page's runs alone;
bench/ui_bench.py measures it at 100,000 runs. Runs without a value sort last either way.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from bashgym.client.errors import InvalidInput
from bashgym.ledger.rows import require_project
from bashgym.ledger.run_filter import ATTRIBUTES, Column, compile_filter, parse_columns, parse_filter, parse_sort

SHOWN = ("run_id", "experiment_id", "method", "status", "model_version_id", "dataset_version_id", "created_at",
         "started_at", "ended_at", "compute_target", "duration_s")  # fmt: skip
MAX_PAGE = 200


def runs_table(
    conn: sqlite3.Connection,
    ws: str,
    project: str,
    *,
    filter_text: str = "",
    sort: str = "",
    columns: str = "",
    experiment: str | None = None,
    campaign: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """One page: `runs` (each with SHOWN and `values`, the chosen columns by name), the parsed `columns`, `sort` and
    `descending`, and `next`, the cursor of the next page (a run id; None at the end)."""
    require_project(conn, ws, project)
    chosen = parse_columns(columns) if columns.strip() else []
    by, descending = parse_sort(sort) if sort.strip() else (Column("attribute", "created_at"), True)
    where, args = compile_filter(parse_filter(filter_text) if filter_text.strip() else [])
    where = ["r.workspace_id = ?", "r.project_id = ?", *where]
    args = [ws, project, *args]
    if experiment is not None:
        where.append("r.experiment_id = ?")
        args.append(experiment)
    if campaign is not None:
        where.append(
            "r.run_id IN (SELECT ci.run_id FROM campaign_iterations AS ci WHERE ci.workspace_id = r.workspace_id "
            "AND ci.project_id = r.project_id AND ci.campaign_id = ? AND ci.run_id IS NOT NULL)"
        )
        args.append(campaign)
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit is {limit}; a page holds 1 to {MAX_PAGE} runs.")
    size = limit
    ids = _page_ids(conn, (ws, project), where, args, by, descending, after, size + 1)
    runs = _rows(conn, ws, project, ids[:size], chosen)
    return {
        "runs": runs,
        "columns": [c.name for c in chosen],
        "sort": by.name,
        "descending": descending,
        "next": runs[-1]["run_id"] if len(ids) > size else None,
    }


def _page_ids(
    conn: sqlite3.Connection,
    key: tuple[str, str],
    where: list[str],
    args: list[object],
    by: Column,
    descending: bool,
    after: str | None,
    count: int,
) -> list[str]:
    way, beyond = ("DESC", "<") if descending else ("ASC", ">")
    expr, bound = by.sql()
    if by == Column("attribute", "created_at"):
        if after is not None:
            where = [*where, f"(r.created_at, r.run_id) {beyond} (?, ?)"]
            args = [*args, _cursor_value(conn, key, after, expr, bound), after]
        rows = conn.execute(
            f"SELECT r.run_id FROM runs AS r WHERE {' AND '.join(where)} "
            f"ORDER BY r.created_at {way}, r.run_id {way} LIMIT ?",
            (*args, count),
        ).fetchall()
        return [row[0] for row in rows]
    # Runs without a value come last: a flag first in the key (1 for a value when descending, 0 when ascending).
    flag = "(v IS NOT NULL)" if descending else "(v IS NULL)"
    after_clause, after_args = "", []
    if after is not None:
        value = _cursor_value(conn, key, after, expr, bound)
        shown_flag = int(value is not None) if descending else int(value is None)
        after_clause = f"WHERE ({flag}, IFNULL(v, 0), rid) {beyond} (?, ?, ?)"
        after_args = [shown_flag, 0 if value is None else value, after]
    rows = conn.execute(
        f"WITH keyed AS MATERIALIZED (SELECT r.run_id AS rid, {expr} AS v FROM runs AS r WHERE {' AND '.join(where)}) "
        f"SELECT rid FROM keyed {after_clause} ORDER BY {flag} {way}, IFNULL(v, 0) {way}, rid {way} LIMIT ?",
        (*bound, *args, *after_args, count),
    ).fetchall()
    return [row[0] for row in rows]


def _cursor_value(conn: sqlite3.Connection, key: tuple[str, str], run_id: str, expr: str, bound: list[object]) -> Any:
    row = conn.execute(
        f"SELECT {expr} FROM runs AS r WHERE r.workspace_id = ? AND r.project_id = ? AND r.run_id = ?",
        (*bound, *key, run_id),
    ).fetchone()
    if row is None:
        raise InvalidInput(
            f"The page cursor names run {run_id!r}, which project {key[1]} does not hold.",
            hint="Start from the first page (no `after`), then follow each page's `next`.",
        )
    return row[0]


def _rows(
    conn: sqlite3.Connection, ws: str, project: str, ids: list[str], chosen: list[Column]
) -> list[dict[str, Any]]:
    if not ids:
        return []
    shown = [f"{ATTRIBUTES[name]} AS {name}" for name in SHOWN]
    exprs, bound = [], []
    for i, column in enumerate(chosen):
        expr, args = column.sql()
        exprs.append(f"{expr} AS c{i}")
        bound.extend(args)
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT {', '.join([*shown, *exprs])} FROM runs AS r WHERE r.workspace_id = ? AND r.project_id = ? "
        f"AND r.run_id IN ({marks})",
        (*bound, ws, project, *ids),
    ).fetchall()
    found = {}
    for row in rows:
        record = {name: row[name] for name in SHOWN}
        record["values"] = {c.name: row[f"c{i}"] for i, c in enumerate(chosen)}
        found[record["run_id"]] = record
    return [found[run_id] for run_id in ids if run_id in found]
