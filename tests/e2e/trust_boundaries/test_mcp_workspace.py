"""`bashgym mcp` works in its token's own workspace: a token limited to one workspace is never sent to another.

Attack of issue 50, finding 10: the MCP server asked for workspace `default` with a token limited to `ws3`, so every
tool was refused (403) unless the agent's user knew to name the workspace.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, running_daemon
from tests.support.mcp_client import call, session

pytestmark = pytest.mark.anyio
PROJECT = "ws3-agents"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, str]]:
    """A daemon with one run in project ws3-agents of workspace ws3, and a project of the default workspace."""
    with running_daemon(tmp_path_factory.mktemp("mcp-workspace") / "home") as daemon, daemon.client() as admin:
        context = tracking_context(workspace_id="ws3", project_id=PROJECT)
        made = admin.post("/v1/runs", params={"workspace": "ws3"}, json={"method": "sft", "tracking_context": context})
        assert made.status_code == 201, made.text
        theirs = admin.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()})
        assert theirs.status_code == 201, theirs.text
        yield daemon, str(made.json()["record"]["run_id"])


async def test_a_workspace_token_lists_and_acts_in_its_workspace_without_naming_it(
    seeded: tuple[RunningDaemon, str],
) -> None:
    daemon, run_id = seeded
    token = issue_token(daemon, "ws3-agent", "researcher", workspace="ws3")
    async with session(daemon, token) as opened:
        failed, listed = await call(opened, "list_experiment_projects", {})
        assert not failed, listed
        assert [p["project_id"] for p in listed["projects"]] == [PROJECT]  # ws3's, not the default workspace's
        failed, run = await call(opened, "get_experiment_run", {"project": PROJECT, "run_id": run_id})
        assert not failed and run["run_id"] == run_id, run
        card: dict[str, Any] = {"project": PROJECT, "run_id": run_id, "known_limitations": ["registered only"]}
        failed, written = await call(opened, "create_runcard", card)
        assert not failed, written
    with daemon.client() as admin:
        cards = admin.get(f"/v1/projects/{PROJECT}/runs/{run_id}/runcards", params={"workspace": "ws3"})
    assert cards.status_code == 200 and "registered only" in cards.text, cards.text


async def test_a_workspace_the_user_names_still_wins(seeded: tuple[RunningDaemon, str]) -> None:
    daemon, _ = seeded
    async with session(daemon, daemon.token, options=("--workspace", "ws3")) as opened:
        failed, listed = await call(opened, "list_experiment_projects", {})
    assert not failed and [p["project_id"] for p in listed["projects"]] == [PROJECT], listed
