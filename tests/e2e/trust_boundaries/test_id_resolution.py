"""Id prefixes (GET /v1/ids/{prefix}): a token learns only of ids in projects it may read.

Each attack is sent by the least-privileged token that might succeed: a viewer of project alpha resolving a
prefix of beta's runs, a viewer of the default workspace resolving ids that live in another workspace, and a
caller with no token at all. Ids beyond a token's reach are left out, never refused: the answer to a prefix
of another project's id is the answer to a prefix of nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from bashgym.client.http import DaemonClient

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, running_daemon

ENV = {"BASHGYM_RATE_LIMIT_BURST": "10000", "BASHGYM_RATE_LIMIT_PER_MINUTE": "10000"}
OTHER_WS = "ws-other"
BETA_RUNS = [f"run-shared-b{n:02d}" for n in range(11)]


@dataclass
class World:
    daemon: RunningDaemon
    alpha_viewer: str  # ledger.read in project alpha of the default workspace, and nothing else
    workspace_viewer: str  # ledger.read in every project of the default workspace
    generated_run: str  # a run id the daemon made (run-<12 hex ms>-<8 hex>), in alpha


def _register(admin: httpx.Client, project: str, run_id: str | None = None, *, ws: str = "default") -> str:
    body: dict[str, Any] = {"method": "sft", "tracking_context": tracking_context(workspace_id=ws, project_id=project)}
    if run_id:
        body["run_id"] = run_id
    answer = admin.post("/v1/runs", params={"workspace": ws}, json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["record"]["run_id"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_daemon(tmp_path_factory.mktemp("ids") / "home", env=ENV) as daemon:
        with daemon.client() as admin:
            _register(admin, "alpha", "run-shared-a01")
            for run_id in BETA_RUNS:
                _register(admin, "beta", run_id)
            _register(admin, "alpha", "run-shared-w01", ws=OTHER_WS)
            generated = _register(admin, "alpha")
        alpha_viewer = issue_token(daemon, "vic", "viewer", project="alpha", workspace="default")
        workspace_viewer = issue_token(daemon, "wes", "viewer", workspace="default")
        yield World(daemon, alpha_viewer, workspace_viewer, generated)


def _resolve(client: httpx.Client, prefix: str, **params: str) -> Any:
    answer = client.get(f"/v1/ids/{prefix}", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_project_scoped_token_never_learns_of_another_projects_ids(world: World) -> None:
    with tenant(world.daemon, world.alpha_viewer) as vic:
        assert _resolve(vic, "run-shared") == {
            "prefix": "run-shared",
            "matches": [{"id": "run-shared-a01", "kind": "run", "project_id": "alpha"}],
            "truncated": False,  # beta's eleven ids do not count toward the limit either
        }
        beta = _resolve(vic, "run-shared-b0")
        nothing = _resolve(vic, "run-nowhere-0")
        assert beta["matches"] == nothing["matches"] == [] and beta["truncated"] is nothing["truncated"] is False
        assert _resolve(vic, BETA_RUNS[0], kind="run")["matches"] == []
    with world.daemon.client() as admin:  # the ids are there: an unscoped token sees them
        everything = _resolve(admin, "run-shared")
    assert [m["id"] for m in everything["matches"]] == ["run-shared-a01", *BETA_RUNS[:9]]
    assert everything["truncated"] is True


def test_another_workspaces_ids_never_appear(world: World) -> None:
    with tenant(world.daemon, world.workspace_viewer) as wes:
        found = _resolve(wes, "run-shared")
        assert "run-shared-w01" not in [m["id"] for m in found["matches"]]
        assert _resolve(wes, "run-shared-w")["matches"] == []
        # Naming the other workspace is beyond the token, with the same refusal whether it holds ids or not.
        other = wes.get("/v1/ids/run-shared-w", params={"workspace": OTHER_WS})
        empty = wes.get("/v1/ids/run-shared-w", params={"workspace": "ws-empty"})
        assert other.status_code == empty.status_code == 403
        refusals = [answer.json()["error"]["message"] for answer in (other, empty)]
        assert refusals[0].replace(OTHER_WS, "X") == refusals[1].replace("ws-empty", "X")
    with world.daemon.client() as admin:
        assert _resolve(admin, "run-shared-w")["matches"] == []
        assert _resolve(admin, "run-shared-w", workspace=OTHER_WS)["matches"] == [
            {"id": "run-shared-w01", "kind": "run", "project_id": "alpha"}
        ]


def test_an_unauthenticated_request_or_one_without_ledger_read_is_refused(world: World) -> None:
    anonymous = httpx.get(f"{world.daemon.url}/v1/ids/run-shared-a01", timeout=30)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "authentication_required"
    with tenant(world.daemon, "bgy_not-a-token") as guesser:
        assert guesser.get("/v1/ids/run-shared-a01").status_code == 401
    no_read = issue_token(world.daemon, "evan", "", capabilities=("eval.run",), workspace="default")
    with tenant(world.daemon, no_read) as evan:
        refused = evan.get("/v1/ids/run-shared-a01")
    assert refused.status_code == 403 and "ledger.read" in refused.json()["error"]["message"]


def test_a_prefix_too_short_or_an_unknown_kind_is_refused_saying_what_to_send(world: World) -> None:
    with tenant(world.daemon, world.alpha_viewer) as vic:
        short = vic.get("/v1/ids/run-0")
        assert short.status_code == 422, short.text
        assert short.json()["error"]["message"] == "The id prefix 'run-0' is 5 characters; type at least 6."
        assert "or the whole id" in short.json()["error"]["hint"]
        unknown = vic.get("/v1/ids/run-shared", params={"kind": "runs"})
        assert unknown.status_code == 422 and "Kinds: run, campaign" in unknown.json()["error"]["hint"]
        assert vic.get("/v1/ids/run%25shared").status_code == 422  # not an identifier


@pytest.mark.anyio
async def test_a_runs_prefix_resolves_to_its_full_id_through_the_client(world: World) -> None:
    run_id = world.generated_run
    assert run_id.startswith("run-") and len(run_id) == len("run-01a245a59798-f8857d00")
    prefix = run_id[: len("run-01a245a59798-f8")]
    async with DaemonClient(world.daemon.url, world.alpha_viewer) as vic:
        found = await vic.resolve_id(prefix)
        assert found == {
            "prefix": prefix,
            "matches": [{"id": run_id, "kind": "run", "project_id": "alpha"}],
            "truncated": False,
        }
        assert (await vic.resolve_id(prefix, kind="run", workspace="default"))["matches"] == found["matches"]
        assert (await vic.resolve_id(prefix, kind="campaign"))["matches"] == []
        assert (await vic.resolve_id(run_id))["matches"] == found["matches"]
