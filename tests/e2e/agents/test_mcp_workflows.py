"""`bashgym mcp` beyond reads and launches: campaigns, run control and devices as tools, each answered or refused
by the daemon's own rules, and a campaign report's files as resources."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon
from tests.support.mcp_client import PROJECT, call, seeded_daemon, session

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, dict[str, Any]]]:
    with seeded_daemon(tmp_path_factory.mktemp("mcp")) as made:
        yield made


async def test_campaign_run_control_and_device_tools_answer_or_refuse_by_the_daemons_rules(
    seeded: tuple[RunningDaemon, dict[str, Any]], tmp_path: Path
) -> None:
    from tests.support.factories import campaign_spec

    daemon, made = seeded
    run = made["run"]
    data = sft_data(tmp_path)
    spec = campaign_spec(campaign_id="agents-c1", report_schedule=None)
    async with session(daemon, made["tokens"]["admin"]) as opened:
        failed, checked = await call(opened, "validate_training_data", {"method": "sft", "path": str(data)})
        assert not failed and checked["ok"], checked
        failed, said = await call(
            opened, "validate_training_data", {"method": "sft", "path": str(tmp_path / "no.jsonl")}
        )
        assert failed and "no.jsonl" in said
        failed, created = await call(opened, "create_campaign", {"project": PROJECT, "spec": spec})
        assert not failed, created
        failed, said = await call(opened, "create_campaign", {"project": PROJECT, "spec": {**spec, "titel": "x"}})
        assert failed and "`titel` is not a field; did you mean `title`?" in said
        _, shown = await call(opened, "get_campaign", {"project": PROJECT, "campaign_id": "agents-c1"})
        assert shown["status"] == "draft" and shown["iterations"] == []
        _, listed = await call(opened, "list_campaigns", {"project": PROJECT})
        assert "agents-c1" in json.dumps(listed)
        failed, doctor = await call(opened, "campaign_doctor", {"project": PROJECT, "campaign_id": "agents-c1"})
        assert not failed, doctor
        _, state = await call(opened, "research_state", {"project": PROJECT, "campaign_id": "agents-c1"})
        assert state["campaign_id"] == "agents-c1"
        _, waited = await call(
            opened,
            "research_wait",
            {"project": PROJECT, "campaign_id": "agents-c1", "after_cursor": 10**6, "timeout_s": 0},
        )
        assert waited["outcome"] == "timeout"
        change = {"primary_variable": "learning_rate", "value": 1e-3, "rationale": "5e-3 overshoots"}
        failed, proposed = await call(
            opened, "propose_candidate", {"project": PROJECT, "campaign_id": "agents-c1", **change}
        )
        assert not failed, proposed
        failed, said = await call(
            opened, "propose_candidate", {"project": PROJECT, "campaign_id": "agents-c1", **change, "value": 5e-3}
        )
        assert failed and "must change it" in said
        failed, validated = await call(
            opened, "campaign_action", {"project": PROJECT, "campaign_id": "agents-c1", "action": "validate"}
        )
        assert failed or "findings" in validated  # its pins name versions this project lacks: said, not crashed
        failed, said = await call(
            opened, "campaign_action", {"project": PROJECT, "campaign_id": "agents-c1", "action": "explode"}
        )
        assert failed and "action" in said
        failed, report = await call(opened, "create_campaign_report", {"project": PROJECT, "campaign_id": "agents-c1"})
        assert not failed, report
        # The report's files are resources: a chart as a PNG image, the Markdown as text.
        charts = [f["name"] for f in report["files"] if f["name"].endswith(".png")]
        base = f"bashgym://projects/{PROJECT}/reports/{report['report_id']}"
        chart = (await opened.read_resource(f"{base}/charts/{charts[0]}")).contents[0]
        png = base64.b64decode(chart.blob)  # type: ignore[union-attr]
        assert chart.mime_type == "image/png"
        assert png.startswith(b"\x89PNG")
        markdown = (await opened.read_resource(f"{base}/files/report.md")).contents[0]
        assert "agents-c1" in markdown.text  # type: ignore[union-attr]
        failed, said = await call(opened, "cancel_campaign", {"project": PROJECT, "campaign_id": "agents-c1"})
        assert failed and "confirm: true" in said
        failed, cancelled = await call(
            opened, "cancel_campaign", {"project": PROJECT, "campaign_id": "agents-c1", "confirm": True}
        )
        assert not failed, cancelled
        failed, said = await call(
            opened, "conclude_campaign", {"project": PROJECT, "campaign_id": "agents-c1", "confirm": True}
        )
        assert failed and "cancelled" in said  # terminal: the daemon refuses, by the campaign's state
        # Run control on a run that has ended: each is the daemon's refusal, by name.
        for tool in ("pause_run", "resume_run"):
            failed, said = await call(opened, tool, {"project": PROJECT, "run_id": run})
            assert failed and "completed" in said, (tool, said)
        failed, said = await call(opened, "stop_run", {"project": PROJECT, "run_id": run, "confirm": True})
        assert failed or said["status"] == "completed"
        _, devices = await call(opened, "list_devices", {})
        assert devices["devices"] == []
        failed, said = await call(opened, "preflight_device", {"device_id": "gpu-nowhere"})
        assert failed and "gpu-nowhere" in said


async def test_a_runs_model_is_kept_as_a_version_only_when_the_run_kept_one(
    seeded: tuple[RunningDaemon, dict[str, Any]],
) -> None:
    """register_run_model answers the daemon's refusal for a run that kept no model (registered, not trained),
    and a viewer, who lacks ledger.write, is not offered it at all."""
    daemon, made = seeded
    arguments = {"project": PROJECT, "run_id": made["run"], "model_version_id": "kept-v1", "model_id": "tiny"}
    async with session(daemon, made["tokens"]["researcher"]) as opened:
        failed, said = await call(opened, "register_run_model", arguments)
        assert failed and "registered no artifacts" in said
    async with session(daemon, made["tokens"]["viewer"]) as opened:
        failed, said = await call(opened, "register_run_model", arguments)
        assert failed and "Unknown tool: register_run_model" in said
