"""The runs table of a page (a project's, an experiment's, a campaign's): a search box in the filter grammar, chosen
columns, headers that sort on the server, compare boxes and the next page's link.

The older form fields (status, lane, since, ...) are conditions in the same grammar, so a value they cannot hold
(`?status=complete`, `?since=yesterday`) is named in the page as an unparseable filter, never a silent "none". The
column choice is kept per project in the browser (ui.js), which fills the box when the address names none.
"""

from __future__ import annotations

from typing import Any

from bashgym.client.errors import InvalidInput
from bashgym.client.render import figure
from bashgym.daemon.ui.html import checkbox, e, href, link, select, text_input
from bashgym.ledger.run_filter import STATUSES
from bashgym.ledger.store import Ledger

LANES = ("local", "ssh", "ssh-group", "cloud", "hf-jobs", "managed", "skypilot", "dstack")
# A form field -> the grammar's condition it stands for.
FIELDS = {
    "status": "status = {}", "method": "method = {}", "lane": "lane = {}", "model_version": "model_version_id = {}",
    "dataset_version": "dataset_version_id = {}", "since": "created_at >= {}", "until": "created_at < {}",
}  # fmt: skip
QUERY_KEYS = (*FIELDS, "filter", "sort", "columns", "after")
BASE_COLUMNS = ("run_id", "status", "method", "compute_target", "duration_s", "created_at")
MAX_COMPARED = 20


async def runs_section(
    ledger: Ledger,
    ws: str,
    name: str,
    query: dict[str, str],
    path: tuple[str, ...],
    *,
    experiment: str | None = None,
    campaign: str | None = None,
) -> str:
    """The section's HTML for the page at `href(*path)`, from the page's query."""
    kept = {k: query[k] for k in QUERY_KEYS if query.get(k)}
    conditions = [FIELDS[k].format(_quoted(kept[k])) for k in FIELDS if k in kept]
    typed = kept.get("filter", "")
    error, listed = "", None
    try:
        listed = await ledger.runs_table_page(
            ws, name, filter_text=" and ".join([*conditions, *([typed] if typed else [])]), sort=kept.get("sort", ""),
            columns=kept.get("columns", ""), experiment=experiment, campaign=campaign, after=kept.get("after"),
        )  # fmt: skip
    except InvalidInput as refused:
        error = f'<p class="error" role="alert">{e(refused.message)} {e(refused.hint)}</p>'
    form = (
        f'<form method="get" action="{href(*path)}" class="filters runs-search" data-project="{e(name)}">'
        + text_input("filter", typed, label="Search", placeholder="metrics.pass@1 > 0.5 and status = 'completed'")
        + text_input("columns", kept.get("columns"), label="Columns", placeholder="metrics.train.loss, eval.pass@1")
        + select("status", STATUSES, kept.get("status"), label="Status")
        + text_input("method", kept.get("method"), label="Method", placeholder="sft")
        + select("lane", LANES, kept.get("lane"), label="Lane")
        + text_input("since", kept.get("since"), label="Since", placeholder="2026-12-01")
        + text_input("until", kept.get("until"), label="Until", placeholder="2026-12-31")
        + (f'<input type="hidden" name="sort" value="{e(kept["sort"])}">' if kept.get("sort") else "")
        + "<button>Search</button></form>"
    )  # fmt: skip
    if listed is None:
        return form + error
    chosen = list(listed["columns"])
    base = {k: v for k, v in kept.items() if k != "after"}
    rows = "".join(_row(name, run, chosen) for run in listed["runs"])
    heads = "".join(_head(path, base, column, listed) for column in (*BASE_COLUMNS, *chosen))
    order = "descending" if listed["descending"] else "ascending"
    caption = f"Runs by {listed['sort']}, {order}"
    body = (
        f'<table><caption>{e(caption)}</caption><thead><tr><th scope="col">compare</th>{heads}</tr>'
        f"</thead><tbody>{rows}</tbody></table>"
        if rows
        else f"<p>{e(caption)}: none match.</p>"
    )
    nav = f"<p>{link('Next page', href(*path, **base, after=listed['next']))}</p>" if listed["next"] else ""
    compare = (
        f'<form method="get" action="{href("p", name, "compare")}" class="runs-table">{body}'
        f"<button>Compare selected (2 to {MAX_COMPARED})</button></form>"
    )
    return form + compare + nav


def _head(path: tuple[str, ...], base: dict[str, str], column: str, listed: dict[str, Any]) -> str:
    """A header that sorts by its column: descending first, the other way when it is already the sort."""
    current = listed["sort"] == column
    descending = not (current and listed["descending"])
    mark = (" ▼" if listed["descending"] else " ▲") if current else ""
    sort = f"{column} {'desc' if descending else 'asc'}"
    aria = f' aria-sort="{"descending" if listed["descending"] else "ascending"}"' if current else ""
    return f'<th scope="col"{aria}>{link(column + mark, href(*path, **{**base, "sort": sort}))}</th>'


def _row(name: str, run: dict[str, Any], chosen: list[str]) -> str:
    cells = [checkbox("run", run["run_id"], label=f"compare {run['run_id']}")]
    cells.append(link(run["run_id"], href("p", name, "runs", run["run_id"])))
    cells.extend(_cell(run.get(column), column) for column in BASE_COLUMNS[1:])
    cells.extend(_cell(run["values"].get(column), column) for column in chosen)
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _cell(value: Any, column: str) -> str:
    """A value as the CLI shows it (client/render.py's figure: units, rounding, durations)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return e(figure(value, column.split(":")[0]))
    return e(value)


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
