"""Wire objects as plain text for a terminal: the console channel and the demo print notices this way."""

from __future__ import annotations

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
