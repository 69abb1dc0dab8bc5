"""An agent launches an official run as the CLI and Discord do: by project and registered versions, over MCP.

Issue 52: `start_training` refused `project` and `model_version`, so an agent needed a hand-written 17-field
tracking context, or its run landed in `unassigned`; a retried launch answered `replayed: false, status: queued`
for a run that had ended."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.trainers.tiny import build_tiny
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import sft_data, tracking_context
from tests.support.helpers import (
    BASHGYM,
    RunningDaemon,
    daemon_with_project,
    register_versions,
    running_daemon,
    wait_for_run,
)
from tests.support.mcp_client import call, session

pytestmark = pytest.mark.anyio
PROJECT = "agents-official"
METHOD = {"method": "sft", "max_steps": 2, "batch_size": 4, "max_seq_length": 128}
OFFICIAL = {"project": PROJECT, "model_version": "tiny-v1", "dataset_version": "rows-v1"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    root = tmp_path_factory.mktemp("mcp-official")
    tiny, data = build_tiny(root / "tiny"), sft_data(root, rows=8)
    with daemon_with_project(root / "home", PROJECT, "Agents, officially") as running:
        register_versions(running, PROJECT, tiny, data)
        yield running


async def test_an_agent_plans_and_starts_an_official_run_by_project_and_versions(daemon: RunningDaemon) -> None:
    token = issue_token(daemon, "agent-rita", "researcher", project=PROJECT)
    async with session(daemon, token) as opened:
        failed, plan = await call(opened, "plan_training", {"request": METHOD, **OFFICIAL})
        assert not failed and plan["ready"] and plan["context_status"] == "verified", plan
        arguments = {"request": METHOD, **OFFICIAL, "idempotency_key": "official-1"}
        failed, started = await call(opened, "start_training", arguments)
        assert not failed, started
        assert started["project_id"] == PROJECT and started["context_status"] == "verified", started
        assert started["replayed"] is False and not started.get("note"), started
        with daemon.client() as admin:  # stopping takes training.stop, which a researcher does not hold
            stopped = admin.post(f"/v1/projects/{PROJECT}/runs/{started['run_id']}/stop")
            assert stopped.status_code == 200, stopped.text
            # A stop answers at once; the run is cancelled when its supervisor has ended the trainer.
            wait_for_run(admin, PROJECT, started["run_id"], {"cancelled"}, timeout_s=60)
        # Retried with its key: the same run, said to be a replay, with the state it is in now.
        failed, again = await call(opened, "start_training", arguments)
        assert not failed and again["run_id"] == started["run_id"], again
        assert again["replayed"] is True and again["status"] == "cancelled", again
        # A project without its versions is refused, saying which are missing.
        failed, refused = await call(opened, "plan_training", {"request": METHOD, "project": PROJECT})
        assert failed and "model_version" in refused, refused


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("mcp-empty") / "home") as running:
        yield running


async def test_an_agent_sets_up_a_project_from_an_empty_home_with_tools_alone(
    empty: RunningDaemon, tmp_path: Path
) -> None:
    """Issue 52: an agent could not create a project or register a dataset or a model over MCP."""
    tiny, data = build_tiny(tmp_path / "tiny"), sft_data(tmp_path, rows=8)
    token = issue_token(empty, "agent-new", "researcher", project="fresh")  # scoped to a project not yet made
    async with session(empty, token) as opened:
        failed, said = await call(opened, "create_project", {"project_id": "elsewhere", "name": "Not mine"})
        assert failed and "elsewhere" in said, said  # a scoped token creates its own project only
        steps = [
            ("create_project", {"project_id": "fresh", "name": "Fresh"}),
            ("create_experiment", {"project": "fresh", "experiment_id": "first", "name": "First try",
                                   "objective": "Does SFT on rows-v1 help?", "task_type": "terminal_agent_sft"}),
            ("register_dataset_version", {"project": "fresh", "dataset_id": "rows", "dataset_version_id": "rows-v1",
                                          "path": str(data)}),
            ("register_model_version", {"project": "fresh", "model_id": "tiny", "model_version_id": "tiny-v1",
                                        "directory": str(tiny)}),
        ]  # fmt: skip
        for tool, arguments in steps:
            failed, written = await call(opened, tool, arguments)
            assert not failed and written["replayed"] is False, (tool, written)
        failed, model = await call(
            opened, "register_model_version", {**steps[3][1], "directory": None, "hub_id": "a/b"}
        )
        assert failed and "revision" in model, model
        with empty.client() as admin:  # an experiment recorded without an objective cannot make a run official
            vague = {"experiment_id": "vague", "name": "Vague"}
            assert admin.post("/v1/projects/fresh/experiments", json=vague).status_code == 201
        versions = {"project": "fresh", "experiment": "vague", "model_version": "tiny-v1", "dataset_version": "rows-v1"}
        failed, said = await call(opened, "plan_training", {"request": METHOD, **versions})
        assert failed and "objective" in said and "unassigned" in said, said
        versions["experiment"] = "first"
        failed, plan = await call(opened, "plan_training", {"request": METHOD, **versions})
        assert not failed and plan["ready"] and plan["context_status"] == "verified", plan
        failed, started = await call(opened, "start_training", {"request": METHOD, **versions})
        assert not failed and started["project_id"] == "fresh" and started["context_status"] == "verified", started
    with empty.client() as admin:
        run = admin.get(f"/v1/projects/fresh/runs/{started['run_id']}").json()
        admin.post(f"/v1/projects/fresh/runs/{started['run_id']}/stop")  # its record is what this test reads
    assert (run["experiment_id"], run["model_version_id"], run["dataset_version_id"]) == ("first", "tiny-v1", "rows-v1")
    assert run["config"]["model_check"] == "files", run["config"]


async def test_without_a_daemon_the_server_stays_up_and_says_how_to_start_one(tmp_path: Path) -> None:
    """Issue 52: with no daemon, `bashgym mcp` exited at start; the agent saw only "Connection closed"."""
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "BASHGYM_HOME": str(tmp_path / "home"), "BASHGYM_API": f"http://127.0.0.1:{port}",
           "BASHGYM_TOKEN": "bgy_not-checked"}  # fmt: skip
    params = StdioServerParameters(command=BASHGYM[0], args=[*BASHGYM[1:], "mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as opened:
        await opened.initialize()
        listed = await opened.list_tools()
        assert [tool.name for tool in listed.tools] == ["daemon_status"]
        failed, said = await call(opened, "daemon_status", {})
    assert failed and f"127.0.0.1:{port}" in said and "bashgym up" in said and "restart" in said, said


async def test_a_short_id_resolves_and_an_ambiguous_or_unknown_one_says_what_to_do(daemon: RunningDaemon) -> None:
    """Issue 52: the CLI takes unique prefixes of ids; MCP tools refused them."""
    context = tracking_context(project_id=PROJECT, project_display_name="Agents, officially")
    with daemon.client() as admin:
        runs = [
            admin.post("/v1/runs", json={"method": "sft", "tracking_context": context}).json()["record"]["run_id"]
            for _ in range(2)
        ]
    common = next(n for n in range(len(runs[0])) if runs[0][n] != runs[1][n])  # `run-<same ms prefix>`
    token = issue_token(daemon, "agent-ids", "viewer", project=PROJECT)
    async with session(daemon, token) as opened:
        failed, run = await call(opened, "get_experiment_run", {"project": PROJECT, "run_id": runs[1][: common + 1]})
        assert not failed and run["run_id"] == runs[1], run
        failed, said = await call(opened, "get_experiment_run", {"project": PROJECT, "run_id": runs[0][:common]})
        assert failed and f"{runs[0][:common]} is ambiguous" in said and runs[0] in said and runs[1] in said, said
        failed, said = await call(opened, "promotion_gate", {"project": PROJECT, "run_id": "run-ffffffff"})
        assert failed and "No run id in project agents-official starts with 'run-ffffffff'" in said, said
        assert "list_runs" in said, said
