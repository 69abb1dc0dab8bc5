"""The table from CLI command to MCP tool that agents/hints.py translates next actions with, kept honest: each
command and option is the CLI's, each tool and argument is one `tools/list` offers, and every command a next action
of the daemon names is either translated or a host command an agent passes on."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
from bashgym.agents import external_jobs
from bashgym.agents.daemon import Daemon
from bashgym.agents.hints import COMMANDS, HOST_COMMANDS, for_agents, tool_call, translate
from bashgym.agents.tools import build
from bashgym.cli.main import build_parser
from bashgym.cli.registry import COMMANDS as CLI
from mcp.server.mcpserver import MCPServer

pytestmark = pytest.mark.anyio
SOURCES = Path(__file__).resolve().parents[2]


def cli_options(command: str) -> dict[str, str]:
    """The CLI command's options (a positional under ""), from its own parser."""
    build_parser()  # imports every command module, which fills the registry
    parser = argparse.ArgumentParser()
    CLI[tuple(command.split())][1](parser)
    options = {flag: a.dest for a in parser._actions for flag in a.option_strings}
    positionals = [a.dest for a in parser._actions if not a.option_strings]
    return options | ({"": positionals[0]} if positionals else {})


async def input_schemas() -> dict[str, dict[str, Any]]:
    server = MCPServer(name="hints")
    daemon = Daemon(client=None)  # type: ignore[arg-type]  # nothing is called: the tools are only listed
    for tool in [*build(daemon), *external_jobs.build(daemon)]:
        server.add_tool(tool.run, name=tool.name, description=tool.description, structured_output=True)
    return {t.name: t.input_schema for t in await server.list_tools()}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_and_option_of_the_table_is_the_clis(command: str) -> None:
    options = cli_options(command.split(" --")[0])
    assert set(COMMANDS[command].options) <= set(options), (command, sorted(options))


async def test_each_tool_and_argument_the_table_names_is_offered() -> None:
    schemas = await input_schemas()
    for command, call in COMMANDS.items():
        assert call.tool in schemas, (command, call.tool)
        named = {*call.options.values(), *call.fixed}
        assert named <= set(schemas[call.tool]["properties"]), (command, named - set(schemas[call.tool]["properties"]))


def test_every_command_a_next_action_names_is_translated_or_a_host_command() -> None:
    build_parser()
    named = set()
    for path in [*(SOURCES / "daemon").rglob("*.py"), *(SOURCES / "agents").rglob("*.py")]:
        for match in re.finditer(r"bashgym ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", path.read_text()):
            words = match.group(1).split()
            named |= {" ".join(words[:n]) for n in (2, 1) if tuple(words[:n]) in CLI}
    assert named - {c.split(" --")[0] for c in COMMANDS} - HOST_COMMANDS == set()


async def test_a_gates_next_actions_become_tool_calls_with_their_ids() -> None:
    schemas = await input_schemas()
    required = {name: tuple(schema.get("required", ())) for name, schema in schemas.items()}
    gate = {
        "ship": False,
        "blockers": [
            {"code": "no_evaluation", "next_action": "bashgym eval run --project p1 --run run-1 (the shipped split)."},
            {"code": "no_baseline_comparison",
             "next_action": "bashgym eval compare --project p1 --baseline RESULT --candidate res-2"},
            {"code": "runcard_missing", "next_action": "bashgym runcard create --run RUN"},
            {"code": "daemon_down", "next_action": "Restart the daemon (bashgym daemon)."},
        ],
    }  # fmt: skip
    blockers = translate(gate, {"project": "p1", "run_id": "run-1"}, required)["blockers"]
    assert blockers[0]["next_tool"] == {
        "tool": "run_evaluation", "arguments": {"project": "p1", "run_id": "run-1"}, "missing": []
    }  # fmt: skip
    assert blockers[0]["next_action"] == 'run_evaluation(project="p1", run_id="run-1") (the shipped split).'
    assert blockers[1]["next_tool"]["arguments"] == {"project": "p1", "candidate_result_id": "res-2"}
    assert blockers[1]["next_tool"]["missing"] == ["baseline_result_id"]
    # RUN is a placeholder the call knows; the card's limitations are required and the hint has none.
    assert blockers[2]["next_tool"]["arguments"] == {"project": "p1", "run_id": "run-1"}
    assert blockers[2]["next_tool"]["missing"] == ["known_limitations"]
    assert "next_tool" not in blockers[3] and blockers[3]["next_action"] == "Restart the daemon (bashgym daemon)."


def test_a_campaigns_next_step_names_the_campaign_the_call_was_about() -> None:
    said = {"next_action": {"code": "validate", "detail": "Validate the campaign: bashgym campaign validate."}}
    out = translate(said, {"project": "p1", "campaign_id": "camp-1"})["next_action"]
    assert (
        out["detail"]
        == 'Validate the campaign: campaign_action(action="validate", project="p1", campaign_id="camp-1").'
    )
    assert out["next_tool"]["arguments"] == {"action": "validate", "project": "p1", "campaign_id": "camp-1"}


def test_prose_after_a_command_is_kept_and_an_option_no_tool_takes_leaves_the_command_as_written() -> None:
    text = "Plan again (bashgym training plan lists missing_context_fields)."
    assert for_agents(text) == "Plan again (plan_training() lists missing_context_fields)."
    assert tool_call("bashgym eval run --run run-1 --split holdout") is None  # no tool takes --split
    assert for_agents("see `bashgym ledger runs --project p1`.") == 'see list_runs(project="p1").'
