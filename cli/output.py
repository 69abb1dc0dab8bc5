"""How the CLI prints: one JSON document with --json, readable tables otherwise."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit(result: Any, *, as_json: bool, columns: list[str] | None = None, title: str | None = None) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
        return
    if isinstance(result, list):
        _table(result, columns, title)
    elif isinstance(result, dict):
        _mapping(result, title)
    else:
        print(result)


def _table(rows: list[dict[str, Any]], columns: list[str] | None, title: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    if not rows:
        print(f"{title}: none." if title else "None.")
        return
    columns = columns or list(rows[0])
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*[_cell(row.get(column)) for column in columns])
    Console(soft_wrap=True).print(table)


def _mapping(record: dict[str, Any], title: str | None) -> None:
    if title:
        print(title)
    width = max((len(str(key)) for key in record), default=0)
    for key, value in record.items():
        print(f"  {str(key).ljust(width)}  {_cell(value)}")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str)
        return text if len(text) <= 120 else text[:117] + "..."
    return str(value)


def error(message: str, hint: str = "") -> None:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")
