"""README and docs/ stay true to the code and to a newcomer's evening: a short README in the newcomer's order, the
reference in docs/ pages by task, every daemon setting with its variable and default, and links that stay inside
the repository."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bashgym.daemon.settings import Settings
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 400  # issue 52: an evening's reader gets the product, the demo and a first run; docs/ the rest

# Issues 11 and 52: what BashGym is, how to run it, the demo, then the reader's own first run; reference is in docs/.
REQUIRED_SECTIONS = [
    "## Two commands on a fresh machine",
    "## The demo",
    "## Your first official run in ten minutes",
    "## Where to go next",
]
# The CLI first, then an agent over MCP, then Discord (which needs an application set up first).
FIRST_RUN_ORDER = ["### From the terminal", "### From a coding agent (MCP)", "### From Discord"]
PAGES = ["cli", "discord", "mcp", "web", "lanes", "training-methods", "evidence", "security", "configuration",
         "architecture", "operations", "campaigns", "development"]  # fmt: skip
# Where a user looks for each task: (page, a word of its heading there).
TASKS = {
    "launch": "training-methods", "monitor": "cli", "evaluate": "evidence", "compare": "evidence",
    "runcard": "evidence", "promote": "evidence", "campaigns": "campaigns", "reports": "campaigns",
    "budgets": "campaigns", "compute lanes": "lanes", "troubleshooting": "operations", "backups": "operations",
    "state directory": "configuration", "security model": "security", "authority": "security",
}  # fmt: skip
LINK = re.compile(r"\]\(([^)\s]+)\)")
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
    for line in section(text, "## Configuration").splitlines():  # docs/configuration.md
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
    rows = settings_table((DOCS / "configuration.md").read_text(encoding="utf-8"))
    assert rows, "docs/configuration.md has no `| setting | environment variable | default |` table"
    missing = sorted(set(Settings.model_fields) - set(rows))
    unknown = sorted(set(rows) - set(Settings.model_fields))
    assert not missing, f"settings missing from docs/configuration.md's table: {missing}"
    assert not unknown, f"docs/configuration.md's table lists settings the code lacks: {unknown}"
    wrong = []
    for name, (variable, default_cell) in rows.items():
        if variable != f"`BASHGYM_{name.upper()}`":
            wrong.append(f"{name}: variable {variable}, expected `BASHGYM_{name.upper()}`")
        expected = code_default(name)
        empty = expected in (None, "") or expected in ([], {})
        shown = documented_value(default_cell, expected)
        if (shown is None) != empty or (not empty and shown != expected):
            wrong.append(f"{name}: the docs say {default_cell!r}, the code's default is {expected!r}")
    assert not wrong, "docs/configuration.md's table disagrees with Settings:\n" + "\n".join(wrong)


def test_the_readme_is_short_and_its_sections_come_in_the_newcomers_order() -> None:
    text = readme()
    lines = len(text.splitlines())
    assert lines <= MAX_README_LINES, f"README has {lines} lines, over {MAX_README_LINES}: move reference to docs/"
    found = headings(text)
    assert found[0] == "# BashGym"
    missing = [h for h in [*REQUIRED_SECTIONS, *FIRST_RUN_ORDER] if h not in found]
    assert not missing, f"README lacks the sections {missing}"
    for order in (REQUIRED_SECTIONS, FIRST_RUN_ORDER):
        positions = [found.index(h) for h in order]
        assert positions == sorted(positions), f"README's sections must come in this order: {order}"


def test_every_task_has_its_page_and_heading_in_docs() -> None:
    missing = [page for page in PAGES if not (DOCS / f"{page}.md").is_file()]
    assert not missing, f"docs/ lacks the pages {missing}"
    for page in PAGES:
        assert headings((DOCS / f"{page}.md").read_text(encoding="utf-8"))[0].startswith("# "), f"docs/{page}.md"
    untreated = [
        f"{task} (docs/{page}.md)"
        for task, page in TASKS.items()
        if not any(task in h.lower() for h in headings((DOCS / f"{page}.md").read_text(encoding="utf-8")))
    ]
    assert not untreated, f"no heading names these tasks on their page: {untreated}"
    listed = section(readme(), "## Where to go next")
    unlisted = [page for page in PAGES if f"(docs/{page}.md)" not in listed]
    assert not unlisted, f"README's 'Where to go next' links no {unlisted}"


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings."""
    return {re.sub(r"[^\w\- ]", "", h.lstrip("#").strip().lower()).replace(" ", "-") for h in headings(text)}


def test_links_stay_inside_the_repository_and_reach_their_file_and_heading() -> None:
    wrong = []
    for doc in [README, *sorted(DOCS.glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), start=1):
            for target in LINK.findall(line):
                if target.startswith(("http://", "https://", "mailto:")):
                    continue
                path, _, anchor = target.partition("#")
                file = (doc.parent / path).resolve() if path else doc
                where = f"{doc.relative_to(ROOT)}:{number}: {target}"
                if not file.is_relative_to(ROOT):
                    wrong.append(f"{where} leaves the repository")
                elif not file.exists():
                    wrong.append(f"{where}: no such file")
                elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
                    wrong.append(f"{where}: no heading with that anchor")
    assert not wrong, "\n".join(wrong)


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
    example = section(text, "## The demo")
    assert "Summary (measured in this run)" in example and "promotion gate" in example
