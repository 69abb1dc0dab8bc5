"""Every benchmark figure's history from bench/results.jsonl (bench/history.py writes it): per benchmark and figure,
one row per commit measured (its latest run), the value, its ratio to the previous commit's, the anchor's figure from
the same run and how many times as good ours is (x2.0: half the time, or twice the rate). A change the wrong way by
more than --threshold is marked REGRESSION; a row measured on another machine than the row before it, or on a busy
one (1-minute load above half its CPUs), says so and is not called a regression, since it was not made alike.

Run: make bench-report, or python bench/report.py [--file F] [--benchmark NAME] [--last 10] [--threshold 0.1]
[--strict: exit 1 when a figure's latest commit regressed]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from history import RESULTS, read


@dataclass(frozen=True)
class Row:
    at: str
    commit: str
    value: float
    unit: str
    better: str
    anchor: float | None
    anchor_name: str | None
    machine: str
    busy: bool
    ratio: float | None = None  # this value / the previous commit's
    regression: bool = False
    note: str = ""


def history(lines: list[dict[str, Any]]) -> dict[str, dict[str, list[Row]]]:
    """benchmark -> figure -> rows, one per commit (its latest run), oldest first, each compared with the one before."""
    latest: dict[tuple[str, str, str], Row] = {}
    for line in lines:
        cpus = (line.get("machine") or {}).get("cpus") or 1
        machine = f"{(line.get('machine') or {}).get('cpu_model', '?')} x{cpus}"
        busy = float((line.get("load") or {}).get("before") or 0) > cpus / 2
        commit = (line.get("commit") or "unknown")[:9] + ("+dirty" if line.get("dirty") else "")
        for name, figure in line["figures"].items():
            key = (line["benchmark"], name, commit)
            latest.pop(key, None)  # re-inserted last: a commit's place is that of its latest run
            latest[key] = Row(
                at=str(line.get("at", "")),
                commit=commit,
                value=float(figure["value"]),
                unit=str(figure.get("unit", "")),
                better=str(figure.get("better", "lower")),
                anchor=figure.get("anchor"),
                anchor_name=figure.get("anchor_name"),
                machine=machine,
                busy=busy,
            )
    found: dict[str, dict[str, list[Row]]] = {}
    for (benchmark, name, _), row in latest.items():
        found.setdefault(benchmark, {}).setdefault(name, []).append(row)
    return found


def compared(rows: list[Row], threshold: float) -> list[Row]:
    """Each row with its ratio to the row before and whether that is a regression beyond `threshold`."""
    out: list[Row] = []
    for row in rows:
        if not out:
            out.append(row)
            continue
        before = out[-1]
        ratio = row.value / before.value if before.value else None
        note, regression = "", False
        if row.machine != before.machine:
            note = f"other machine than {before.commit}: not compared"
        elif row.busy or before.busy:
            note = "measured on a busy machine: not compared"
        elif ratio is not None:
            worse = ratio - 1 if row.better == "lower" else 1 - ratio
            regression = worse > threshold
        out.append(Row(**{**row.__dict__, "ratio": ratio, "regression": regression, "note": note}))
    return out


def print_report(found: dict[str, dict[str, list[Row]]], *, last: int, threshold: float) -> bool:
    """Print the tables; answer whether any figure's latest commit regressed."""
    regressed = False
    for benchmark in sorted(found):
        print(f"\n{benchmark}")
        for name in sorted(found[benchmark]):
            rows = compared(found[benchmark][name], threshold)[-last:]
            print(f"  {name} ({rows[-1].unit}, {rows[-1].better} is better)")
            for row in rows:
                ratio = f"x{row.ratio:.3f}" if row.ratio is not None else "-"
                peer = ""
                if row.anchor and row.value:
                    factor = row.anchor / row.value if row.better == "lower" else row.value / row.anchor
                    peer = f"  {row.anchor_name or 'anchor'} {row.anchor:g}: ours x{factor:.1f} as good"
                flag = "  REGRESSION" if row.regression else ""
                note = f"  ({row.note})" if row.note else ""
                print(f"    {row.at[:10]} {row.commit:15s} {row.value:>12g} {ratio:>8s}{peer}{flag}{note}")
            regressed = regressed or rows[-1].regression
    return regressed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--file", type=Path, default=RESULTS)
    parser.add_argument("--benchmark", help="only this benchmark's figures")
    parser.add_argument("--last", type=int, default=10, help="commits shown per figure")
    parser.add_argument("--threshold", type=float, default=0.10, help="a worse change beyond this is a regression")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a figure's latest commit regressed")
    args = parser.parse_args()
    lines = [line for line in read(args.file) if args.benchmark in (None, line["benchmark"])]
    if not lines:
        print(f"No benchmark figures in {args.file} yet: run a benchmark (bench/README.md) to record some.")
        return
    regressed = print_report(history(lines), last=args.last, threshold=args.threshold)
    sys.exit(1 if regressed and args.strict else 0)


if __name__ == "__main__":
    main()
