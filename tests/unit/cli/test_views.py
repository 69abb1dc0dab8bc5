"""Terminal views of records a caller wrote: what the ledger accepts, the CLI shows without a traceback."""

from __future__ import annotations

import pytest
from bashgym.cli import views


def test_a_comparison_imported_without_a_ci_is_listed_with_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    imported = {
        "comparison_id": "cmp-1",
        "primary_metric": "pass@1",
        "delta": 0.2,
        "ci_low": None,
        "ci_high": None,
        "suite_id": "bash-tasks-v1",
        "provenance": "asserted",
    }
    views.evaluations({"suites": [], "results": [], "comparisons": [imported]})
    shown = capsys.readouterr().out
    assert "cmp-1" in shown and "+0.200" in shown and "[-, -]" in shown, shown
