"""The compare page's parameter views: a scatter of one chosen parameter against one chosen metric over the compared
runs, and parallel coordinates over their parameters and that metric.

Every value is the runs table's (ledger/runs_table.py, through run_filter.py's columns): `params.X` is what the run
logged last, else the params it was opened with, else its launch config's key; `metrics.X` is the series' latest
value and `eval.X` the latest completed evaluation's. The page carries the values as a table (readable without
JavaScript) and as data ui.js draws, in SVG, into the two figures.
"""

from __future__ import annotations

import json
from datetime import datetime
from html import escape
from typing import Any

from bashgym.client.errors import InvalidInput
from bashgym.daemon.ui.html import e, href, table
from bashgym.ledger.run_filter import MAX_COLUMNS, Column
from bashgym.ledger.store import Ledger

MAX_AXES = 12  # parallel coordinates past this many axes are unreadable at a page's width


async def params_view(
    ledger: Ledger,
    ws: str,
    name: str,
    records: list[dict[str, Any]],
    series: list[str],
    query: dict[str, str],
) -> str:
    """The section's HTML: the param and metric choice (`query`'s `param` and `metric`), the scatter, the parallel
    coordinates and the table of the values they draw."""
    run_ids = [r["run_id"] for r in records]
    params = await _param_names(ledger, ws, name, records)
    metrics = [Column("metric", m).name for m in series] + await _eval_names(ledger, ws, name, run_ids)
    if not params or not metrics:
        missing = "parameter" if not params else "metric"
        return f"<h2>Parameters against a metric</h2><p>These runs record no {missing} to plot.</p>"
    metric = _chosen(query, "metric", metrics) or _default_metric(metrics)
    values = await _values(ledger, ws, name, run_ids, [*params[: MAX_COLUMNS - 1], metric])
    differing = [p for p in params if len({json.dumps(v) for v in values.get(p, [])}) > 1]
    param = _chosen(query, "param", params) or (differing or params)[0]
    if param not in values:  # chosen past the first columns read: read it with the metric
        values |= await _values(ledger, ws, name, run_ids, [param, metric])
    axes = [*list(dict.fromkeys([param, *differing]))[: MAX_AXES - 1], metric]
    data = {"runs": run_ids, "param": param, "metric": metric, "axes": axes, "values": {a: values[a] for a in axes}}
    rows = [{"run": run_id, **{a: values[a][i] for a in axes}} for i, run_id in enumerate(run_ids)]
    listed = table(
        rows,
        ["run", *axes],
        links={"run": lambda r: href("p", name, "runs", r["run"])},
        caption=f"The values plotted: {len(axes) - 1} parameter(s) (those that differ, and the chosen one), {metric}",
    )
    chart_data = escape(json.dumps(data, default=str))
    return (
        "<h2>Parameters against a metric</h2>"
        + _choice(name, run_ids, params, param, metrics, metric)
        + f'<figure class="scatter" data-scatter="{chart_data}"><figcaption>{e(param)} against {e(metric)}, one '
        "point a run</figcaption><noscript>The plot needs JavaScript; the values are in the table below.</noscript>"
        "</figure>"
        + f'<figure class="parallel" data-parallel="{chart_data}"><figcaption>Parallel coordinates: the runs\' '
        f"parameters and {e(metric)}, one line a run</figcaption></figure>" + listed
    )


def _choice(name: str, run_ids: list[str], params: list[str], param: str, metrics: list[str], metric: str) -> str:
    kept = "".join(f'<input type="hidden" name="run" value="{escape(r)}">' for r in run_ids)
    return (
        f'<form method="get" action="{href("p", name, "compare")}" class="filters params-choice">{kept}'
        f"<label>Parameter {_options('param', params, param)}</label>"
        f"<label>Metric {_options('metric', metrics, metric)}</label>"
        '<button type="submit">Plot</button></form>'
    )


def _options(field: str, names: list[str], chosen: str) -> str:
    shown = "".join(
        f'<option value="{escape(n)}"{" selected" if n == chosen else ""}>{escape(n)}</option>' for n in names
    )
    return f'<select name="{field}">{shown}</select>'


def _chosen(query: dict[str, str], field: str, offered: list[str]) -> str | None:
    """The name the address chose, where the page offers it (anything else falls back to the default)."""
    name = query.get(field)
    return name if name in offered else None


def _default_metric(metrics: list[str]) -> str:
    """The latest evaluation's pass@1 where there is one (what a ship decision reads), else the first series that
    is not a system gauge."""
    if "eval.pass@1" in metrics:
        return "eval.pass@1"
    return next((m for m in metrics if not m.startswith("metrics.system.")), metrics[0])


async def _param_names(ledger: Ledger, ws: str, name: str, records: list[dict[str, Any]]) -> list[str]:
    """The runs' parameter columns: logged params, the params a run was opened with, its launch config's scalar
    keys; sorted, each once."""
    keys: set[str] = set()
    for record in records:
        config = record.get("config") or {}
        keys |= {k for k, v in config.items() if k != "tracking_context" and _is_scalar(v)}
        keys |= set(config.get("params") or {}) if isinstance(config.get("params"), dict) else set()
        for payload in await ledger.run_event_payloads(ws, name, record["run_id"], "run.tracked"):
            keys |= set(payload.get("params") or {}) if isinstance(payload.get("params"), dict) else set()
    # A key with a backquote cannot be written as a column; nothing else is refused.
    return sorted(Column("param", k).name for k in keys if "`" not in k and k.strip())


async def _eval_names(ledger: Ledger, ws: str, name: str, run_ids: list[str]) -> list[str]:
    latest = await ledger.latest_results_of_runs(ws, name, run_ids)
    keys = {
        k for results in latest.values() for r in results[:1] for k, v in (r.get("metrics") or {}).items()
        if isinstance(v, int | float) and "`" not in k
    }  # fmt: skip
    return sorted(Column("eval", k).name for k in keys)


async def _values(ledger: Ledger, ws: str, name: str, run_ids: list[str], columns: list[str]) -> dict[str, list[Any]]:
    """Each column's value per run, in the runs' order, through the runs table's own reading."""
    quoted = ", ".join("'" + r.replace("'", "''") + "'" for r in run_ids)
    try:
        page = await ledger.runs_table_page(
            ws, name, filter_text=f"run_id in ({quoted})", columns=", ".join(columns), limit=len(run_ids)
        )
    except InvalidInput:
        if len(columns) == 1:  # a name the grammar cannot hold (an odd key): its column stays empty
            return {columns[0]: [None] * len(run_ids)}
        return {c: v for column in columns for c, v in (await _values(ledger, ws, name, run_ids, [column])).items()}
    found = {row["run_id"]: row["values"] for row in page["runs"]}
    return {c: [_number(found.get(r, {}).get(c)) for r in run_ids] for c in page["columns"]}


def _is_scalar(value: object) -> bool:
    return value is not None and isinstance(value, str | int | float | bool)


def _number(value: object) -> object:
    """Text that reads as a number plotted as one (params are often logged as text)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


# One control for every curve of the page (ui.js sets each chart's own x axis from it).
ALIGN_CONTROL = (
    '<p class="controls align-all"><label>Align the curves by <select name="align">'
    '<option value="step">step</option><option value="relstep">steps since each run\'s first</option>'
    '<option value="elapsed">time since each run\'s start</option>'
    '<option value="wall">wall clock</option></select></label></p>'
)


def run_starts(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each started run's start as Unix seconds (the time-since-start axis's origin)."""
    starts = {}
    for record in records:
        started = record.get("started_at")
        if started:
            starts[record["run_id"]] = datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
    return starts
