"""Values as the run page shows them: numbers formatted as the CLI formats them (client.render.figure), lists and
mappings as lists and tables instead of JSON, a run's settings limited to those its method reads, and its timing."""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any

from bashgym.client.render import duration, figure
from bashgym.trainers.contracts.fields import LORA_FIELDS, READ_BY

_MAX_ITEMS = 50  # a list or mapping past this shows its first items and says how many more


def readable(value: Any, key: str = "") -> str:
    """A value as HTML: a number as `figure` writes it (the key names its metric), a list as a list, a mapping as a
    key-value table, nested alike; every text escaped."""
    if value is None or value == "" or value == [] or value == {}:
        return "—"
    if isinstance(value, bool | int | float):
        return escape(figure(value, key))
    if isinstance(value, dict):
        rows = [
            f'<tr><th scope="row">{escape(str(k))}</th><td>{readable(v, str(k))}</td></tr>'
            for k, v in list(sorted(value.items()))[:_MAX_ITEMS]
        ]
        return f'<table class="values"><tbody>{"".join(rows)}</tbody></table>{_more(len(value))}'
    if isinstance(value, list):
        items = "".join(f"<li>{readable(v, key)}</li>" for v in value[:_MAX_ITEMS])
        return f'<ul class="values">{items}</ul>{_more(len(value))}'
    return escape(str(value))


def method_settings(config: dict[str, Any], method: str | None, *, every: bool = False) -> list[dict[str, Any]]:
    """A run's settings as rows of key and readable value: those its method reads (`every`: all of them)."""
    rows = []
    for key, value in sorted(config.items()):
        if key == "tracking_context":
            continue
        if not every and not _is_read(key, method, use_lora=config.get("use_lora", True) is not False):
            continue
        rows.append({"key": key, "value": readable(value, key)})
    return rows


def timing(record: dict[str, Any], now: datetime) -> list[tuple[str, str]]:
    """When a run started and ended (its first attempt's start, its last attempt's end) and how long it took or
    has taken so far."""
    attempts = record.get("attempts") or []
    starts = [a["started_at"] for a in attempts if a.get("started_at")]
    ends = [a["ended_at"] for a in attempts if a.get("ended_at")]
    started = min(starts) if starts else None
    ended = max(ends) if ends and all(a.get("ended_at") for a in attempts) else None
    if started is None:
        return [("started", "not yet"), ("ended", "—"), ("duration", "—")]
    until = _moment(ended) if ended else now
    took = duration(max(0.0, (until - _moment(started)).total_seconds()))
    return [
        ("started", started),
        ("ended", ended or "still running"),
        ("duration", took if ended else f"{took} so far"),
    ]


def _is_read(key: str, method: str | None, *, use_lora: bool) -> bool:
    if key in LORA_FIELDS and not use_lora:
        return False
    readers = READ_BY.get(key)
    return readers is None or method is None or method in readers


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _more(count: int) -> str:
    return f"<p>… and {count - _MAX_ITEMS} more</p>" if count > _MAX_ITEMS else ""
