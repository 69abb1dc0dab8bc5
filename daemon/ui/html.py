"""The web view's HTML: one layout, tables and key-value lists, every value escaped.

Pages are whole documents rendered on the server, readable without JavaScript (charts are the only part that needs
it), navigable by keyboard (links, forms and tables, a skip link), in the reader's light or dark scheme. Links are
plain paths under /ui, so a page's address can be pasted into Discord and opened by anyone whose session may read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

ASSETS = "/ui/static"
UPLOT = "uplot-1.6.32"
ICON = f'<link rel="icon" href="{ASSETS}/favicon.svg" type="image/svg+xml">'


def e(value: object) -> str:
    """A value as HTML text: None as an em dash, floats to 4 significant digits."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return escape(f"{value:.4g}")
    if isinstance(value, dict | list):
        return escape(json.dumps(value, sort_keys=True, default=str)[:2000])
    return escape(str(value))


def href(*parts: str, **query: object) -> str:
    """A /ui path from parts (each quoted whole: an id cannot add a path segment) and a query."""
    path = "/ui/" + "/".join(quote(str(part), safe="") for part in parts)
    kept = [(k, str(v)) for k, v in query.items() if v not in (None, "", [])]
    return path + (f"?{urlencode(kept)}" if kept else "")


def link(text: object, url: str) -> str:
    return f'<a href="{escape(url)}">{e(text)}</a>'


def page(title: str, body: str, *, who: str, crumbs: Sequence[tuple[str, str]] = (), charts: bool = False) -> str:
    """A whole document: header with the trail and who is signed in, then the body."""
    trail = " / ".join(link(text, url) for text, url in [("Projects", href()), *crumbs])
    head_assets = f'<link rel="stylesheet" href="{ASSETS}/ui.css">{ICON}'
    scripts = ""
    if charts:
        head_assets += f'<link rel="stylesheet" href="{ASSETS}/{UPLOT}.min.css">'
        scripts = f'<script src="{ASSETS}/{UPLOT}.min.js" defer></script><script src="{ASSETS}/ui.js" defer></script>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark"><title>{escape(title)} · BashGym</title>{head_assets}{scripts}</head>
<body><a class="skip" href="#main">Skip to content</a>
<header><nav aria-label="Trail">{trail}</nav>
<form method="post" action="/ui/signout" class="who"><span>{e(who)}</span> <button>Sign out</button></form></header>
<main id="main"><h1>{escape(title)}</h1>
{body}
</main></body></html>
"""


def message_page(title: str, text: str, *, status_hint: str = "") -> str:
    """A page for someone not signed in, or a refusal: what happened and what to do next."""
    hint = f"<p>{escape(status_hint)}</p>" if status_hint else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{escape(title)} · BashGym</title><link rel="stylesheet" href="{ASSETS}/ui.css">{ICON}</head>
<body><main id="main"><h1>{escape(title)}</h1><p>{escape(text)}</p>{hint}</main></body></html>
"""


def table(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    *,
    links: dict[str, Any] | None = None,
    caption: str = "",
    marked: dict[str, set[str]] | None = None,
    raw: frozenset[str] = frozenset(),
) -> str:
    """Rows as a table; `links[column](row)` makes a cell a link; `marked[column]` names row keys to highlight;
    `raw` columns hold HTML this module built (a form control), not values."""
    links = links or {}
    head = "".join(f'<th scope="col">{escape(c)}</th>' for c in columns)
    body = []
    for row in rows:
        cells = []
        for column in columns:
            if column in raw:
                text = str(row.get(column) or "")
            elif column in links:
                text = link(row.get(column), links[column](row))
            else:
                text = e(row.get(column))
            css = ' class="differs"' if marked and str(row.get("key")) in marked.get(column, set()) else ""
            cells.append(f"<td{css}>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    if not body:
        return f"<p>{escape(caption + ': ' if caption else '')}none.</p>"
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def facts(pairs: Iterable[tuple[str, object]], *, caption: str = "") -> str:
    """Key-value pairs as a description list."""
    items = "".join(f"<dt>{escape(k)}</dt><dd>{e(v)}</dd>" for k, v in pairs)
    heading = f"<h2>{escape(caption)}</h2>" if caption else ""
    return f"{heading}<dl>{items}</dl>"


def select(name: str, options: Sequence[str], chosen: str | None, *, label: str) -> str:
    opts = "".join(
        f'<option value="{escape(o)}"{" selected" if o == chosen else ""}>{escape(o) or "any"}</option>'
        for o in ("", *options)
    )
    return f'<label>{escape(label)} <select name="{escape(name)}">{opts}</select></label>'


def text_input(name: str, value: str | None, *, label: str, placeholder: str = "") -> str:
    return (
        f'<label>{escape(label)} <input name="{escape(name)}" value="{escape(value or "")}" '
        f'placeholder="{escape(placeholder)}"></label>'
    )


def checkbox(name: str, value: str, *, label: str) -> str:
    return f'<input type="checkbox" name="{escape(name)}" value="{escape(value)}" aria-label="{escape(label)}">'


def chart(
    project: str, runs: Sequence[str], metric: str, *, live: bool = False, starts: dict[str, float] | None = None
) -> str:
    """A chart's place: the script fills it from the series endpoint; without JavaScript it says where the numbers
    are. `starts`: each run's start (Unix seconds), the origin of the time-since-start axis (else its first point)."""
    spec: dict[str, object] = {"project": project, "runs": list(runs), "metric": metric, "live": live}
    if starts:
        spec["starts"] = starts
    data = escape(json.dumps(spec))
    return (
        f'<figure class="chart" data-chart="{data}"><figcaption>{escape(metric)}</figcaption>'
        f"<noscript>Charts need JavaScript; the numbers are in the metrics table.</noscript></figure>"
    )
