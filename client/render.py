"""Wire objects as text for people: notices as the console channel prints them, figures rounded for reading, and
the facts of a project at a glance that the Discord embed and the terminal view both show."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bashgym.client.models import Notice

OUTCOME_MARKS = {"success": "✔", "failure": "✖", "warning": "!", "info": "•", "neutral": "·"}


def notice_text(notice: Notice) -> str:
    """A notice as readable plain text: the console channel's rendering of a Discord post."""
    lines = [f"{OUTCOME_MARKS[notice.outcome]} {notice.title}"]
    if notice.description:
        text = notice.description if len(notice.description) <= 600 else notice.description[:600] + " …"
        lines += [f"    {line}" for line in text.splitlines() if line.strip()]
    if notice.fields:
        lines.append("    " + "   ".join(f"{f.name}: {f.value}" for f in notice.fields))
    lines += [f"    chart: {f.name}" for f in notice.files]
    lines.append(f"    ({notice.footer})")
    return "\n".join(lines)


# -- figures for people ---------------------------------------------------------------------------

# Metrics that are fractions of something: three decimals, the precision an evaluation of a few hundred samples has.
_FRACTION_MARKS = ("pass@", "rate", "accuracy", "success", "precision", "recall", "win_", "ece")
_UNITS = {
    "tokens_per_second": "tokens/s",
    "samples_per_second": "samples/s",
    "seconds": "s",
    "_s": "s",
    "gpu_hours": "GPU-h",
}
_NAMING_INTS = ("pid", "cursor", "step", "version", "port", "seed", "_id", "year")


def figure(value: Any, metric: str = "") -> str:
    """A number as a person reads it: fractions to three decimals, large counts grouped, tiny values in scientific
    notation, and the unit a metric's name implies (`system.tokens_per_second` → `8,841 tokens/s`)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, int | float):
        return str(value)
    name = metric.rsplit(".", 1)[-1].lower()
    unit = unit_of(metric)
    if unit == "s" and abs(value) >= 120:
        return duration(float(value))
    if isinstance(value, int):
        # Counts are grouped (12,000 points); numbers that name something (a pid, a cursor, a step) are not.
        text = str(value) if name.endswith(_NAMING_INTS) or abs(value) < 10_000 else f"{value:,}"
    elif any(mark in name for mark in _FRACTION_MARKS) and "learning_rate" not in name and -1.0 <= value <= 1.0:
        text = f"{value:.3f}"
    elif value != 0 and abs(value) < 1e-3:
        text = f"{value:.2e}"
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.1f}"
    else:
        text = f"{value:.4g}" if abs(value) >= 1 else f"{value:.4f}".rstrip("0").rstrip(".") or "0"
    return f"{text} {unit}" if unit else text


def duration(seconds: float) -> str:
    """Seconds as a person says them: `45 s`, `6 min 17 s`, `2 h 5 min`."""
    whole = round(seconds)
    if whole < 120:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 120:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"


def sentences(items: list[str]) -> str:
    """Items as sentences, each ending once with its own punctuation: never `sealed.; local only.`"""
    stripped = [item.strip() for item in items if item.strip()]
    return " ".join(item if item.endswith((".", "!", "?")) else f"{item}." for item in stripped)


def unit_of(metric: str) -> str:
    """The unit a metric's name implies, or '' for a plain number."""
    name = metric.rsplit(".", 1)[-1].lower()
    return next((unit for key, unit in _UNITS.items() if name.endswith(key)), "")


def signed(value: float | None) -> str:
    """A difference, always with its sign: `+0.037`; `-` where none was recorded (an imported comparison may state no
    CI)."""
    return "-" if value is None else f"{value:+.3f}"


# What a result's or comparison's provenance means to its reader: only measured evidence counts toward a ship.
PROVENANCE = {
    "measured": "measured by the daemon's evaluator",
    "asserted": "asserted: imported, never counts toward a ship",
    "unrecorded": "unrecorded: made before provenance was kept; evaluate again to count it",
}


def provenance_of(record: dict[str, Any]) -> str:
    """`measured`, `asserted` or `unrecorded` (a record from before the ledger kept provenance)."""
    value = str(record.get("provenance") or "unrecorded")
    return value if value in PROVENANCE else "unrecorded"


def provenance_text(record: dict[str, Any]) -> str:
    """The provenance with what it means: `asserted: imported, never counts toward a ship`."""
    return PROVENANCE[provenance_of(record)]


# -- a project at a glance: the facts `/project context` and `bashgym ledger context` both show ----------------

SIGNALS = {
    "stale_active_runs": "active runs with no news for an hour",
    "failed_runs": "failed runs",
    "completed_without_evaluation": "completed runs never evaluated",
    "terminal_without_artifact": "completed runs without an artifact",
    "incomplete_lineage": "runs not fully identified",
}
CAMPAIGN_ENDS = frozenset({"exhausted", "completed", "blocked", "failed", "cancelled"})
# What a campaign that met a stop rule did, in the rule's words: its status `exhausted` names no outcome.
STOP_RULES = {
    "max_iterations": "iteration limit reached",
    "max_consecutive_discards": "discard limit reached",
    "deadline": "deadline passed",
}


def campaign_state(status: str, reason: str | None = None) -> str:
    """A campaign's state as a person reads it: `exhausted` is "completed: iteration limit reached" (the stop rule
    its reason names); every other status is itself. The API keeps the status."""
    if status != "exhausted":
        return status
    rule = (reason or "").partition(":")[0].strip()
    return f"completed: {STOP_RULES.get(rule, 'a stop rule was met')}"


@dataclass(frozen=True)
class Signal:
    label: str
    ids: list[str]
    truncated: bool

    @property
    def count(self) -> str:
        return f"{len(self.ids)}{'+' if self.truncated else ''}"


@dataclass(frozen=True)
class ProjectGlance:
    """What a lead wants of a project at a glance, from `GET /v1/projects/{p}/context` and its campaigns."""

    project_id: str
    name: str
    description: str
    signals: list[Signal]
    inventory: str
    runs: list[dict[str, Any]]
    aliases: list[tuple[str, str]]
    open_campaigns: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    evaluations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.signals


def project_glance(project: str, context: dict[str, Any], campaigns: list[dict[str, Any]]) -> ProjectGlance:
    record = context.get("project") or {}
    raw = context.get("signals") or {}
    signals = [
        Signal(label, list(raw[key]["ids"]), bool(raw[key].get("truncated")))
        for key, label in SIGNALS.items()
        if (raw.get(key) or {}).get("ids")
    ]
    inventory = context.get("inventory") or {}
    by_status = inventory.get("runs_by_status") or {}
    runs = _count(int(inventory.get("runs", 0)), "run") + (
        f" ({', '.join(f'{n} {status}' for status, n in sorted(by_status.items()))})" if by_status else ""
    )
    counted = sorted((name, n) for name, n in inventory.items() if isinstance(n, int) and name != "runs")
    others = [_count(n, name.replace("_", " ")) for name, n in counted]
    recent = context.get("recent") or {}
    return ProjectGlance(
        project_id=str(record.get("project_id") or project),
        name=str(record.get("name") or project),
        description=str(record.get("description") or ""),
        signals=signals,
        inventory=" · ".join([runs, *others]),
        runs=list(recent.get("runs") or []),
        aliases=[(a["alias"], a["model_version_id"]) for a in (context.get("lineage") or {}).get("aliases") or []],
        open_campaigns=[c for c in campaigns if c.get("status") not in CAMPAIGN_ENDS],
        decisions=list(recent.get("decisions") or []),
        evaluations=list(recent.get("evaluations") or []),
    )


def key_metric_text(run: dict[str, Any]) -> str:
    """A run's key figure as the context gives it (`pass@1 0.540 (bash-tasks-v1)`, `train.loss 0.3218`), or ''."""
    metric = run.get("key_metric")
    if not metric:
        return ""
    where = f" ({metric['suite_id']})" if metric.get("suite_id") else ""
    return f"{metric['name']} {figure(metric['value'], metric['name'])}{where}"


def _count(n: int, noun: str) -> str:
    """`1 run`, `8 runs`, `1 comparisons` no more: the plural only where it is one."""
    if n == 1 and noun.endswith("s") and not noun.endswith("ss"):
        noun = noun[:-1]
    elif n != 1 and not noun.endswith("s"):
        noun += "s"
    return f"{n} {noun}"
