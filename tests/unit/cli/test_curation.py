"""Receipts keep every source event that ever touched them, across curations."""

from __future__ import annotations

from pathlib import Path

from bashgym.cli.curation import Receipt, previous_sources, render, write_if_changed


def test_an_existing_receipts_source_events_are_read_back(tmp_path: Path) -> None:
    receipt = Receipt(kind="run", workspace_id="default", project_id="p", entity_id="r1", title="Run r1")
    receipt.source_event_ids = ["evt-2", "evt-1"]
    path = receipt.path(tmp_path)
    assert write_if_changed(path, render(receipt))
    assert previous_sources(path) == ["evt-1", "evt-2"]
    assert previous_sources(tmp_path / "missing.md") == []
