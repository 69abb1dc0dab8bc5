"""How the CLI prints: one JSON document with --json; otherwise tables and reports for people, on rich.

Two rules hold for every human view. An id is printed whole, never cut: a table squeezes and wraps other
columns first, so what a list prints can be pasted into the next command. Figures are rounded for reading
(`client.render.figure`); `--json` keeps every digit.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, cast

from bashgym.client.render import figure

if TYPE_CHECKING:
    from rich.console import Console

# An id column is named so (`run_id`, `id`) or holds a ledger id (`run-01a2…-…`, `res-…`, `mv-…`).
ID_VALUE = re.compile(r"^[a-z]{2,8}-[0-9a-f]{6,}(?:-[0-9a-f]{4,})?(?:\.a\d+)?$")
_TIME_VALUE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?$")
_console: Console | None = None
PIPED_WIDTH = 1000


def console() -> Console:
    """The one console human views print on: the terminal's width, colour only on a terminal."""
    global _console
    if _console is None:
        from rich.console import Console

        # Into a pipe or a file, lines are not wrapped (a phrase stays greppable); on a terminal, its width.
        width = None if sys.stdout.isatty() else PIPED_WIDTH
        _console = Console(highlight=False, soft_wrap=False, file=cast("IO[str]", _Trimmed(sys.stdout)), width=width)
    return _console


class _Trimmed:
    """Stdout without the spaces rich pads lines with: a line copied from a view ends where its text ends."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.partial = ""

    def write(self, text: str) -> int:
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            self.file.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        self.file.flush()

    def isatty(self) -> bool:
        return bool(self.file.isatty())

    def fileno(self) -> int:
        return int(self.file.fileno())


def emit(result: Any, *, as_json: bool, columns: list[str] | None = None, title: str | None = None) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
        return
    if isinstance(result, list):
        table(result, columns, title)
    elif isinstance(result, dict):
        outline(result, title)
    else:
        console().print(str(result), markup=False)


def table(rows: Sequence[dict[str, Any]], columns: list[str] | None = None, title: str | None = None) -> None:
    """Rows as a table. Id columns are printed whole; the other columns are cut (with …) to fit the terminal, and
    where even the ids do not fit side by side, each row becomes a block of its own."""
    out = console()
    if not rows:
        out.print(f"{title}: none." if title else "None.", markup=False)
        return
    columns = columns or list(rows[0])
    cells = [[cell(row.get(column), column) for column in columns] for row in rows]
    headers = [HEADERS.get(column, column) for column in columns]
    natural = [max(len(header), *(len(line[i]) for line in cells)) for i, header in enumerate(headers)]
    ids = [is_id_column(column, [line[i] for line in cells]) for i, column in enumerate(columns)]
    widths = fit_widths(natural, ids, out.width - GAP * (len(columns) - 1))
    if widths is None:
        _blocks(columns, cells, title)
        return
    if title:
        out.print(f"[bold]{escape(title)}[/bold]")
    right = [not ids[i] and _numeric(rows, column) for i, column in enumerate(columns)]
    header = _line(headers, widths, right)
    out.print(f"[bold]{escape(header)}[/bold]", overflow="ignore", crop=False)
    for line in cells:
        out.print(_line(line, widths, right), markup=False, overflow="ignore", crop=False)


def _line(values: Sequence[str], widths: list[int], right: list[bool]) -> str:
    parts = []
    for value, width, flush_right in zip(values, widths, right, strict=True):
        text = value if len(value) <= width else value[: max(width - 1, 0)] + "…"
        parts.append(text.rjust(width) if flush_right else text.ljust(width))
    return (" " * GAP).join(parts).rstrip()


GAP = 2  # spaces between two columns
NAMES = frozenset({"id", "metric", "alias"})  # columns whose values are typed into the next command, like ids
# Shorter headers for the columns most tables have; the key stays the JSON field's name.
HEADERS = {"context_status": "context", "created_at": "created", "updated_at": "updated", "experiment_id": "experiment"}
MIN_CUT = 6  # a cut column keeps at least this many characters


def fit_widths(natural: list[int], ids: list[bool], room: int) -> list[int] | None:
    """Column widths within `room`: ids keep their full width, the other columns share what is left, the narrow
    ones whole and the wide ones cut evenly. None when the ids alone leave no room for the rest."""
    if sum(natural) <= room:
        return natural
    left = room - sum(w for w, is_id in zip(natural, ids, strict=True) if is_id)
    others = sorted((w, i) for i, (w, is_id) in enumerate(zip(natural, ids, strict=True)) if not is_id)
    if left < MIN_CUT * len(others):
        return None
    widths = list(natural)
    for position, (want, index) in enumerate(others):
        share = left // (len(others) - position)
        widths[index] = min(want, share)
        left -= widths[index]
    return widths


def _blocks(columns: list[str], cells: list[list[str]], title: str | None) -> None:
    out = console()
    if title:
        out.print(f"[bold]{escape(title)}[/bold]")
    for line in cells:
        out.print()
        _pairs([(column, value) for column, value in zip(columns, line, strict=True)], indent=0)


def outline(record: dict[str, Any], title: str | None = None, *, indent: int = 0) -> None:
    """A mapping as aligned `key  value` lines; nested mappings indent under their key, lists of records become
    small tables, and long values wrap in their column, whole."""
    out = console()
    if title:
        out.print(f"[bold]{escape(title)}[/bold]")
        indent = max(indent, 2)
    pairs: list[tuple[str, str]] = []
    for key, value in record.items():
        if not isinstance(value, dict | list) or _flat_list(value):
            text = ", ".join(cell(v, str(key)) for v in value) if isinstance(value, list) else cell(value, str(key))
            pairs.append((str(key), text or "-"))
            continue
        _pairs(pairs, indent=indent)
        pairs = []
        out.print(" " * indent + str(key))
        if isinstance(value, dict):
            outline(value, indent=indent + 2)
        elif all(isinstance(v, dict) for v in value):
            table(value)
        else:
            out.print(" " * (indent + 2) + escape(json.dumps(value, default=str)), overflow="fold")
    _pairs(pairs, indent=indent)


def pairs(items: Iterable[tuple[str, str]], *, indent: int = 2) -> None:
    """Labelled lines (`label  value`), values wrapping in their own column."""
    _pairs(list(items), indent=indent)


def _pairs(items: list[tuple[str, str]], *, indent: int) -> None:
    from rich.table import Table

    if not items:
        return
    grid = Table.grid(padding=(0, GAP))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in items:
        grid.add_row(escape(key), escape(value))
    if indent:
        from rich.padding import Padding

        console().print(Padding(grid, (0, 0, 0, indent), expand=False))
    else:
        console().print(grid)


def cell(value: Any, column: str = "") -> str:
    """One value as a table or outline shows it: rounded figures, short times, `-` for nothing."""
    if value is None or value == "":
        return "-"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return figure(value, column)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    text = str(value)
    if _TIME_VALUE.match(text):
        return when(text)
    return text


def when(stamp: str | None, *, now: datetime | None = None) -> str:
    """A ledger timestamp for people: `4m ago` or `3h ago` within a day, else `2026-12-04 10:00` (UTC)."""
    if not stamp:
        return "-"
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    seconds = (now - moment).total_seconds()
    if 0 <= seconds < 60:
        return "just now"
    if 0 <= seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if 0 <= seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    return moment.strftime("%Y-%m-%d %H:%M")


def is_id_column(column: str, values: Iterable[str]) -> bool:
    if column in NAMES or column.endswith("_id") or column.endswith(" id"):
        return True
    return any(ID_VALUE.match(v) for v in values)  # one id in a column is enough: it must paste whole


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _numeric(rows: Sequence[dict[str, Any]], column: str) -> bool:
    values = [row.get(column) for row in rows if row.get(column) is not None]
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _flat_list(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)


def error(message: str, hint: str = "") -> None:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")


def note(message: str) -> None:
    """A line beside the answer (which id a prefix resolved to, what a view left out): stderr, so pipes see only
    the answer."""
    sys.stderr.write(f"{message}\n")


def progress_bar(total: int, label: str, *, shown: bool, in_bytes: bool = False) -> Any:
    """A progress bar on stderr when `shown` (a terminal, not --json) and stderr is a terminal; the context's value
    `advance(n=1)` moves it."""
    if not shown or not sys.stderr.isatty():
        return nullcontext(lambda n=1: None)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    columns = (TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn()) if in_bytes else ()
    return _Bar(Progress(*columns, transient=True, console=Console(stderr=True)), total, label)


class _Bar:
    def __init__(self, progress: Any, total: int, label: str) -> None:
        self.progress, self.total, self.label = progress, total, label

    def __enter__(self) -> Any:
        self.progress.start()
        task = self.progress.add_task(self.label, total=self.total)
        return lambda n=1: self.progress.advance(task, n)

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
