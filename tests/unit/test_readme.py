"""README stays true to the code: every daemon setting with its variable and default, and the newcomer's order."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bashgym.daemon.settings import Settings
from pydantic_core import PydanticUndefined

README = Path(__file__).resolve().parents[2] / "README.md"

# Issue 11: a newcomer reads what BashGym is, how to run it, the demo and Discord first; reference comes after.
REQUIRED_SECTIONS = [
    "## Two commands on a fresh machine",
    "## The demo",
    "## Connecting Discord",
    "## The CLI by task",
    "## Quickstart",
    "## Compute lanes",
    "## Configuration",
    "## State directory",
    "## Troubleshooting",
]
CLI_TASKS = ["launch", "monitor", "evaluate", "compare", "runcard", "promote", "campaigns", "reports"]
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
CODE_SPAN = re.compile(r"`([^`]*)`")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def headings(text: str) -> list[str]:
    """The Markdown headings outside code blocks, in order."""
    found, in_block = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
        elif not in_block and line.startswith("#"):
            found.append(line.strip())
    return found


def section(text: str, heading: str) -> str:
    """The text from `heading` to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    start = lines.index(heading)
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(rf"^#{{1,{len(level)}}} ", lines[i])),
        len(lines),
    )
    return "\n".join(lines[start + 1 : end])


def settings_table(text: str) -> dict[str, tuple[str, str]]:
    """setting name -> (environment variable cell, default cell) of the Configuration table."""
    rows: dict[str, tuple[str, str]] = {}
    in_table = False
    for line in section(text, "## Configuration").splitlines():
        if line.startswith("| setting | environment variable | default |"):
            in_table = True
            continue
        if not in_table or line.startswith("|---"):
            continue
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = (cells[1], cells[2])
    return rows


def code_default(name: str) -> Any:
    field = Settings.model_fields[name]
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    assert field.default is not PydanticUndefined, f"setting {name} has no default"
    return field.default


def documented_value(cell: str, like: Any) -> Any:
    """The README's default cell read as a value of the code default's type (None for unset/none)."""
    if cell.lower().startswith(("unset", "none")):
        return None
    spans = CODE_SPAN.findall(cell)
    raw = spans[0] if spans else cell
    sized = re.fullmatch(r"(\d+) (KiB|MiB|GiB)", raw)
    if sized:
        return int(sized.group(1)) * UNITS[sized.group(2)]
    if isinstance(like, bool):
        return {"true": True, "false": False}.get(raw.lower(), raw)
    if isinstance(like, int | float):
        return float(raw)
    if isinstance(like, Path):
        return Path(raw).expanduser()
    if isinstance(like, list):
        return [part.strip() for part in raw.split(",") if part.strip()]
    return raw


def test_the_configuration_table_lists_every_setting_with_its_variable_and_default() -> None:
    rows = settings_table(readme())
    assert rows, "README's Configuration section has no `| setting | environment variable | default |` table"
    missing = sorted(set(Settings.model_fields) - set(rows))
    unknown = sorted(set(rows) - set(Settings.model_fields))
    assert not missing, f"settings missing from README's Configuration table: {missing}"
    assert not unknown, f"README's Configuration table lists settings the code lacks: {unknown}"
    wrong = []
    for name, (variable, default_cell) in rows.items():
        if variable != f"`BASHGYM_{name.upper()}`":
            wrong.append(f"{name}: variable {variable}, expected `BASHGYM_{name.upper()}`")
        expected = code_default(name)
        empty = expected in (None, "") or expected in ([], {})
        shown = documented_value(default_cell, expected)
        if (shown is None) != empty or (not empty and shown != expected):
            wrong.append(f"{name}: README says {default_cell!r}, the code's default is {expected!r}")
    assert not wrong, "README's Configuration table disagrees with Settings:\n" + "\n".join(wrong)


def test_the_sections_come_in_the_newcomers_order() -> None:
    text = readme()
    found = headings(text)
    assert found[0] == "# BashGym"
    missing = [h for h in REQUIRED_SECTIONS if h not in found]
    assert not missing, f"README lacks the sections {missing}"
    positions = [found.index(h) for h in REQUIRED_SECTIONS]
    assert positions == sorted(positions), f"README's sections must come in this order: {REQUIRED_SECTIONS}"
    cli = [h.lower() for h in headings(section(text, "## The CLI by task")) if h.startswith("### ")]
    untreated = [task for task in CLI_TASKS if not any(task in h for h in cli)]
    assert not untreated, f"'The CLI by task' has no ### heading for {untreated}"


def test_the_opening_says_what_bashgym_is_in_three_sentences_and_draws_the_loop() -> None:
    opening = section(readme(), "# BashGym")
    prose, _, rest = opening.strip().partition("```")
    sentences = re.findall(r"[.!?](?:\s|$)", prose.strip())
    assert len(sentences) == 3, f"the opening has {len(sentences)} sentences, not three"
    diagram = rest.partition("```")[0].lower()
    for stage in ("train", "evaluate", "compare", "runcard", "promotion gate", "promote", "campaign", "ledger"):
        assert stage in diagram, f"the opening's diagram lacks {stage!r}"


def test_the_demo_example_holds_measured_figures_not_placeholders() -> None:
    text = readme()
    assert "<measured>" not in text, "fill the demo's example output from a real run"
    example = text[text.index("## The demo") : text.index("## Connecting Discord")]
    assert "Summary (measured in this run)" in example and "promotion gate" in example
