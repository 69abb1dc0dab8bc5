"""`bashgym mcp` as an agent meets it: a real daemon, the server as a subprocess over stdio, driven by the MCP SDK's
own client. The tools a token sees follow its capabilities; every tool answers a well-formed call and refuses a
malformed one with the daemon's message; a destructive tool waits for a confirmation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon
from tests.support.mcp_client import ADMIN_MORE, PROJECT, READ_ONLY, RESEARCHER_MORE, call, seeded_daemon, session

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, dict[str, Any]]]:
    with seeded_daemon(tmp_path_factory.mktemp("mcp")) as made:
        yield made


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        ("viewer", READ_ONLY),
        ("researcher", READ_ONLY | RESEARCHER_MORE),
        ("admin", READ_ONLY | RESEARCHER_MORE | ADMIN_MORE),
    ],
)
async def test_the_tools_listed_follow_the_tokens_capabilities(
    seeded: tuple[RunningDaemon, dict[str, Any]], profile: str, expected: set[str]
) -> None:
    daemon, made = seeded
    async with session(daemon, made["tokens"][profile]) as opened:
        tools = {tool.name: tool for tool in (await opened.list_tools()).tools}
        assert set(tools) == expected
        assert tools["list_experiment_projects"].annotations.read_only_hint is True  # type: ignore[union-attr]
        if "stop_run" in tools:
            assert tools["stop_run"].annotations.destructive_hint is True  # type: ignore[union-attr]
        context = tools["get_experiment_context"]
        assert context.input_schema["required"] == ["project"]
        assert all(t.description and len(t.description) > 30 for t in tools.values())
        # The listing is what an agent reads before its first call, so it stays small (issue 52: 59 KB): input
        # schemas without titles or lengths, no output schemas (answers are still structured; see below).
        assert all(t.output_schema is None for t in tools.values())
        assert "title" not in json.dumps([t.input_schema for t in tools.values()])


async def test_reads_answer_structured_and_refusals_are_tool_errors_with_the_daemons_message(
    seeded: tuple[RunningDaemon, dict[str, Any]],
) -> None:
    daemon, made = seeded
    run, (baseline, candidate) = made["run"], made["results"]
    valid: dict[str, dict[str, Any]] = {
        "list_experiment_projects": {},
        "get_experiment_context": {"project": PROJECT},
        "get_experiment_run": {"project": PROJECT, "run_id": run},
        "list_runs": {"project": PROJECT, "status": "completed"},
        "get_run_log": {"project": PROJECT, "run_id": run},
        "get_metric_trend": {"project": PROJECT, "metric": "train.loss", "run_id": run},
        "list_events": {"project": PROJECT, "after_cursor": 0, "limit": 5},
        "list_evaluations": {"project": PROJECT},
        "show_runcards": {"project": PROJECT, "run_id": run},
        "promotion_gate": {"project": PROJECT, "run_id": run},
        "list_campaigns": {"project": PROJECT},
        "budget_show": {"project": PROJECT},
        "list_devices": {},
        "doctor": {},
        "whoami": {},
        "compare_results": {"project": PROJECT, "baseline_result_id": baseline, "candidate_result_id": candidate},
        "create_runcard": {"project": PROJECT, "run_id": run, "known_limitations": ["registered, not trained"]},
    }
    async with session(daemon, made["tokens"]["researcher"]) as opened:
        for tool, arguments in valid.items():
            failed, answer = await call(opened, tool, arguments)
            assert not failed, (tool, answer)
            assert isinstance(answer, dict)
        _, context = await call(opened, "get_experiment_context", {"project": PROJECT})
        assert run in json.dumps(context["recent"])
        _, trend = await call(opened, "get_metric_trend", valid["get_metric_trend"])
        assert trend["summary"]["count"] == 4
        _, compared = await call(opened, "compare_results", valid["compare_results"])
        assert round(compared["delta"], 3) == 0.25
        # Malformed: an unknown argument (with the closest one), a wrong type, a missing project, a huge value.
        failed, said = await call(opened, "get_experiment_run", {"projct": PROJECT, "run_id": run})
        assert failed and "`projct` is not an argument; did you mean `project`?" in said
        failed, said = await call(opened, "list_events", {"project": PROJECT, "after_cursor": "soon"})
        assert failed and "after_cursor" in said
        failed, said = await call(opened, "get_experiment_context", {})
        assert failed and "project" in said
        failed, said = await call(opened, "get_experiment_context", {"project": "x" * 100_000})
        assert failed and "200" in said  # at most 200 characters
        failed, said = await call(opened, "get_experiment_context", {"project": "nope"})
        assert failed and "No project 'nope'" in said and "[not_found, HTTP 404]" in said


async def test_a_refused_capability_is_a_tool_error_and_the_ledger_is_unchanged(
    seeded: tuple[RunningDaemon, dict[str, Any]], tmp_path: Path
) -> None:
    daemon, made = seeded
    with daemon.client() as client:
        before = client.get("/v1/ledger/health").json()["last_cursor"]
    async with session(daemon, made["tokens"]["researcher"]) as opened:
        # A local file is checked before it leaves this machine: /etc/passwd is no SFT data, so nothing is sent.
        failed, said = await call(
            opened, "plan_training", {"request": {"method": "sft", "base_model": "m", "dataset_path": "/etc/passwd"}}
        )
        assert failed and "breaks the sft contract" in said and "Nothing was uploaded" in said
        # A path the daemon would have to read itself is refused by the daemon.
        outside = {"method": "sft", "base_model": "/etc/hostname-model", "dataset_path": "/nonexistent/data.jsonl"}
        failed, said = await call(opened, "plan_training", {"request": outside})
        assert failed and "outside the directories this daemon may use" in said
        failed, said = await call(opened, "plan_training", {"request": {"method": "sft", "lr": 1, "epochz": 2}})
        assert failed and "`epochz` is not a field" in said
        # A tool the researcher is offered, on a capability the daemon checks per call (a project it cannot read).
        failed, said = await call(opened, "get_experiment_context", {"project": "elsewhere"})
        assert failed
    with daemon.client() as client:
        assert client.get("/v1/ledger/health").json()["last_cursor"] == before


async def test_a_destructive_tool_asks_first_and_does_nothing_unconfirmed(
    seeded: tuple[RunningDaemon, dict[str, Any]],
) -> None:
    daemon, made = seeded
    asked: list[str] = []

    async def decline(context: Any, params: Any) -> Any:
        from mcp.types import ElicitResult

        asked.append(params.message)
        return ElicitResult(action="decline")

    arguments = {"project": PROJECT, "reason": "more runs", "runs": 2}
    async with session(daemon, made["tokens"]["admin"]) as opened:
        failed, said = await call(opened, "amend_budget", arguments)
        assert failed and "confirm: true" in said and "Nothing was done" in said
        _, budget = await call(opened, "budget_show", {"project": PROJECT})
        assert budget["amended"]["runs"] == 0
    async with session(daemon, made["tokens"]["admin"], elicitation_callback=decline) as opened:
        failed, said = await call(opened, "amend_budget", arguments)
        assert failed and "Not confirmed" in said and asked and "budget" in asked[0]
        # A client that can ask the person is asked, even when the agent says confirm: true for them.
        failed, said = await call(opened, "amend_budget", {**arguments, "confirm": True})
        assert failed and "Not confirmed" in said and len(asked) == 2
        _, budget = await call(opened, "budget_show", {"project": PROJECT})
        assert budget["amended"]["runs"] == 0
    async with session(daemon, made["tokens"]["admin"]) as opened:  # a client without elicitation
        failed, done = await call(opened, "amend_budget", {**arguments, "confirm": True})
        assert not failed, done
        _, budget = await call(opened, "budget_show", {"project": PROJECT})
        assert budget["amended"]["runs"] == 2


async def test_an_agent_runs_the_loop_from_projects_to_a_confirmed_promotion(
    seeded: tuple[RunningDaemon, dict[str, Any]], tmp_path: Path
) -> None:
    """list projects → context → plan (a typo'd field gets its suggestion) → start_training with its context,
    waiting with progress → evaluate → compare → RunCard → gate → decide, confirmed through elicitation."""
    from bashgym.trainers.tiny import build_tiny

    daemon, made = seeded
    tiny = build_tiny(tmp_path / "tiny")
    data = sft_data(tmp_path)
    request = training_request(
        tiny, data, tracking_context=tracking_context(project_id=PROJECT, project_display_name="Agents")
    )
    progress: list[tuple[float, float | None, str | None]] = []
    confirmations: list[str] = []

    async def accept(context: Any, params: Any) -> Any:
        from mcp.types import ElicitResult

        confirmations.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async with session(daemon, made["tokens"]["admin"], elicitation_callback=accept) as opened:
        _, listed = await call(opened, "list_experiment_projects", {})
        assert PROJECT in [p["project_id"] for p in listed["projects"]]
        failed, said = await call(opened, "plan_training", {"request": {**request, "learning_rat": 1e-3}})
        assert failed and "`learning_rat` is not a field; did you mean `learning_rate`?" in said
        failed, plan = await call(opened, "plan_training", {"request": request})
        assert not failed and plan["ready"] and plan["context_status"] == "verified", plan

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        result = await opened.call_tool(
            "start_training",
            {"request": request, "idempotency_key": "agent-launch-1", "wait": True},
            progress_callback=on_progress,
        )
        assert not result.is_error, result.content
        started = result.structured_content
        assert started is not None and started["status"] == "completed", started
        run_id = started["run_id"]
        assert progress and all(total in (None, 4.0) for _, total, _ in progress)
        # The same key again: the same run, not a second launch.
        _, again = await call(opened, "start_training", {"request": request, "idempotency_key": "agent-launch-1"})
        assert again["run_id"] == run_id
        assert again["replayed"] is True and again["status"] == "completed", again  # its state now, not at launch
        _, runs = await call(opened, "list_runs", {"project": PROJECT, "limit": 100})
        assert [r["run_id"] for r in runs["runs"]].count(run_id) == 1

        failed, base = await call(opened, "run_evaluation", {"project": PROJECT, "gold": True, "limit_tasks": 2})
        assert not failed, base
        failed, cand = await call(opened, "run_evaluation", {"project": PROJECT, "run_id": run_id, "limit_tasks": 2})
        assert not failed, cand
        failed, compared = await call(
            opened, "compare_results",
            {"project": PROJECT, "baseline_result_id": base["result_id"], "candidate_result_id": cand["result_id"]},
        )  # fmt: skip
        assert failed or "delta" in compared  # two tasks may be too few to pair: then the daemon says why
        failed, card = await call(
            opened, "create_runcard", {"project": PROJECT, "run_id": run_id, "known_limitations": ["4 steps"]}
        )
        assert not failed, card
        _, verdict = await call(opened, "promotion_gate", {"project": PROJECT, "run_id": run_id})
        assert verdict["ship"] is False and verdict["blockers"]  # 4 steps on two tasks: evidence, not a claim
        failed, said = await call(opened, "promote_decide", {"project": PROJECT, "run_id": run_id})
        assert failed and "blocks run" in said and confirmations  # confirmed, then refused by the gate itself
        _, cards = await call(opened, "show_runcards", {"project": PROJECT, "run_id": run_id})
        assert cards["since"]["gate"]["ship"] is False


async def test_every_tool_refuses_an_argument_it_does_not_take_and_changes_nothing(
    seeded: tuple[RunningDaemon, dict[str, Any]],
) -> None:
    daemon, made = seeded
    with daemon.client() as client:
        before = client.get("/v1/ledger/health").json()["last_cursor"]
    async with session(daemon, made["tokens"]["admin"]) as opened:
        names = [tool.name for tool in (await opened.list_tools()).tools]
        assert len(names) == len(READ_ONLY | RESEARCHER_MORE | ADMIN_MORE)
        for name in names:
            failed, said = await call(opened, name, {"project": PROJECT, "bogus_argument": 1})
            assert failed and "`bogus_argument` is not an argument" in said and "Nothing was done" in said, name
    with daemon.client() as client:
        assert client.get("/v1/ledger/health").json()["last_cursor"] == before


async def test_an_agent_tags_and_notes_a_run_finds_it_by_tag_and_a_viewer_is_not_offered_the_tool(
    seeded: tuple[RunningDaemon, dict[str, Any]],
) -> None:
    daemon, made = seeded
    run = made["run"]
    async with session(daemon, made["tokens"]["researcher"]) as opened:
        arguments = {"project": PROJECT, "kind": "run", "entity_id": run, "set_tags": {"team": "nlp"}, "note": "ok"}
        failed, tagged = await call(opened, "tag_entity", arguments)
        assert not failed and tagged["tags"] == {"team": "nlp"} and tagged["note"] == "ok", tagged
        _, found = await call(opened, "list_runs", {"project": PROJECT, "tag": ["team=nlp"]})
        assert [(r["run_id"], r["tags"]) for r in found["runs"]] == [(run, "team=nlp")]
        _, shown = await call(opened, "get_experiment_run", {"project": PROJECT, "run_id": run})
        assert (shown["tags"], shown["note"]) == ("team=nlp", "ok")
        failed, said = await call(opened, "tag_entity", {**arguments, "set_tags": {"a'; DROP": "x"}})
        assert failed and "not a tag key" in said, said
        untagged = {"project": PROJECT, "kind": "run", "entity_id": run, "remove_tags": ["team"], "note": ""}
        failed, cleared = await call(opened, "tag_entity", untagged)
        assert not failed and cleared["tags"] == {} and cleared["note"] is None, cleared
    async with session(daemon, made["tokens"]["viewer"]) as opened:
        assert "tag_entity" not in {tool.name for tool in (await opened.list_tools()).tools}
