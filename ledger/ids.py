"""Id prefixes: which full ids of the named projects start with what a user typed, like git's short hashes."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TypedDict

from bashgym.client.errors import InvalidInput
from bashgym.client.validation import check_identifier

# The kinds of record a user names by id on the command line: each kind's table and id column. Every one of
# these tables is keyed (workspace_id, project_id, <id column>), so a range on the id within one project is
# a seek on that key, read in id order.
ID_KINDS: dict[str, tuple[str, str]] = {
    "run": ("runs", "run_id"),
    "campaign": ("campaigns", "campaign_id"),
    "eval_result": ("eval_results", "result_id"),
    "comparison": ("comparisons", "comparison_id"),
    "runcard": ("runcards", "card_id"),
    "model_version": ("model_versions", "model_version_id"),
    "dataset_version": ("dataset_versions", "dataset_version_id"),
    "experiment": ("experiments", "experiment_id"),
    "eval_suite": ("eval_suites", "suite_id"),
}
MAX_MATCHES = 10


class IdMatch(TypedDict):
    id: str
    kind: str
    project_id: str


class IdMatches(TypedDict):
    prefix: str
    matches: list[IdMatch]
    truncated: bool


def check_kind(kind: str) -> str:
    """Return kind when it is one of ID_KINDS, else raise InvalidInput naming them."""
    if kind not in ID_KINDS:
        raise InvalidInput(f"Unknown id kind {kind!r}.", hint=f"Kinds: {', '.join(ID_KINDS)}.")
    return kind


def ids_with_prefix(
    conn: sqlite3.Connection,
    ws: str,
    prefix: str,
    *,
    projects: Sequence[str],
    kind: str | None = None,
    limit: int = MAX_MATCHES,
) -> IdMatches:
    """The first `limit` ids, in id order, of records in `projects` of `ws` that start with `prefix`.

    Only the projects named are searched, one at a time: what the answer holds, and whether it was cut
    at `limit`, says nothing of any other project's ids. An id equal to the prefix sorts first.
    """
    check_identifier(prefix, field="id prefix")
    kinds = [check_kind(kind)] if kind is not None else list(ID_KINDS)
    end = prefix_end(prefix)
    found: list[IdMatch] = []
    for name in kinds:
        sql = _range_sql(*ID_KINDS[name])
        for project in dict.fromkeys(projects):
            rows = conn.execute(sql, (ws, project, prefix, end, limit + 1)).fetchall()
            found.extend(IdMatch(id=str(row[0]), kind=name, project_id=project) for row in rows)
    found.sort(key=lambda match: (match["id"], match["kind"], match["project_id"]))
    return IdMatches(prefix=prefix, matches=found[:limit], truncated=len(found) > limit)


def prefix_end(prefix: str) -> str:
    """The least string above every string that starts with `prefix`: the prefix with its last character
    plus one (`run-0f` -> `run-0g`). Identifiers are ASCII, so that character exists."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _range_sql(table: str, column: str) -> str:
    # A range, not LIKE: LIKE is case-insensitive and treats _ as a wildcard, so SQLite will not seek on it.
    return (
        f"SELECT {column} FROM {table} WHERE workspace_id = ? AND project_id = ? AND {column} >= ? AND {column} < ? "
        f"ORDER BY {column} LIMIT ?"
    )
