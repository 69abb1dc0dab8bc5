"""A workspace's admin stays in its workspace, and a project's token in its project's workspace.

Attacks of issue 50: finding 1 (a workspace admin issues itself an admin token of every workspace, lists and revokes
every workspace's tokens, reads the whole audit trail and backs up every workspace) and finding 3 (a project token
issued without a workspace acts on that project id in every workspace: API, web view and id lookup).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bashgym.client.specs import Actor
from bashgym.daemon.authority import CAPABILITIES, hash_token, new_token
from bashgym.ledger.store import Ledger

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.helpers import RunningDaemon, running_daemon

WS = "ws3"
IN_WS = {"workspace": WS}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    home = tmp_path_factory.mktemp("ws-admins") / "home"
    backups = tmp_path_factory.mktemp("backups")
    # A project token of the kind older daemons issued: a project, no workspace. It is bound at start.
    asyncio.run(_plant_legacy_project_token(home))
    with running_daemon(home, env={"BASHGYM_BACKUP_DIR": str(backups)}) as running:
        with running.client() as admin:
            for ws in ("default", WS):
                made = admin.post("/v1/projects", params={"workspace": ws}, json={"project_id": "pa", "name": "A"})
                assert made.status_code == 201, made.text
            secret = {"experiment_id": "exp-ws3-secret", "name": "Secret"}
            assert admin.post("/v1/projects/pa/experiments", params={"workspace": WS}, json=secret).status_code == 201
        yield running


LEGACY_TOKEN = new_token()


async def _plant_legacy_project_token(home: Path) -> None:
    home.mkdir(parents=True)
    async with await Ledger.open(home / "ledger.sqlite3") as ledger:
        await ledger.insert_token(
            Actor(actor_id="admin"),
            token_id="tok-legacy",
            token_hash=hash_token(LEGACY_TOKEN),
            actor_id="legacy-alice",
            profile="researcher",
            capabilities=[],
            workspace_id=None,
            project_id="pa",
            expires_at=None,
        )


@pytest.fixture(scope="module")
def ws_admin(daemon: RunningDaemon) -> str:
    return issue_token(daemon, "ws3-admin", "admin", workspace=WS)


def _cursor(daemon: RunningDaemon) -> int:
    with daemon.client() as admin:
        return int(admin.get("/v1/ledger/health").json()["last_cursor"])


# -- finding 1: a workspace's admin issues, lists, revokes, audits and backs up within its workspace only ------------


def test_a_workspace_admin_cannot_issue_a_token_of_every_workspace_or_every_capability(
    daemon: RunningDaemon, ws_admin: str
) -> None:
    before = _cursor(daemon)
    with tenant(daemon, ws_admin) as mallory:
        everything = {"actor_id": "mallory-root", "profile": "admin", "capabilities": list(CAPABILITIES)}
        refused = mallory.post("/v1/auth/tokens", params={"workspace": WS}, json=everything)
        assert refused.status_code == 403, refused.text
        assert "promotion.override" in refused.json()["error"]["message"]
        elsewhere = mallory.post(
            "/v1/auth/tokens", json={"actor_id": "mallory-default", "profile": "viewer", "workspace_id": "default"}
        )
        assert elsewhere.status_code == 403, elsewhere.text
        assert "limited to workspace 'ws3'" in elsewhere.json()["error"]["message"]
    assert _cursor(daemon) == before, "nothing is recorded for a refused issue"


def test_a_token_a_workspace_admin_issues_is_of_its_workspace(daemon: RunningDaemon, ws_admin: str) -> None:
    with tenant(daemon, ws_admin) as mallory:
        issued = mallory.post("/v1/auth/tokens", params=IN_WS, json={"actor_id": "ws3-alice", "profile": "admin"})
        assert issued.status_code == 201, issued.text
        assert issued.json()["workspace_id"] == WS
    with tenant(daemon, issued.json()["token"]) as alice:
        assert alice.get("/v1/projects", params={"workspace": "default"}).status_code == 403
        assert alice.get("/v1/projects").status_code == 200  # its own workspace, without naming it
        backup = alice.post("/v1/ledger/backup", params={"to": "from-ws3-alice.sqlite3"})
        assert backup.status_code == 403, backup.text


def test_a_workspace_admin_lists_audits_and_revokes_its_own_workspace_only(
    daemon: RunningDaemon, ws_admin: str
) -> None:
    colleague = issue_token(daemon, "default-researcher", "researcher")
    with daemon.client() as admin:
        others = {t["token_id"] for t in admin.get("/v1/auth/tokens").json() if t["workspace_id"] != WS}
        theirs = next(
            t["token_id"] for t in admin.get("/v1/auth/tokens").json() if t["actor_id"] == "default-researcher"
        )
    with tenant(daemon, ws_admin) as mallory:
        listed = mallory.get("/v1/auth/tokens", params=IN_WS)
        assert listed.status_code == 200, listed.text
        assert {t["workspace_id"] for t in listed.json()} == {WS}
        assert not others & {t["token_id"] for t in listed.json()}, "tok-admin and the default workspace's are hidden"
        audit = mallory.get("/v1/auth/audit", params=IN_WS)
        assert audit.status_code == 200, audit.text
        assert audit.json() and {e["workspace_id"] for e in audit.json()} == {WS}
        before = _cursor(daemon)
        revoked = mallory.post(f"/v1/auth/tokens/{theirs}/revoke", params=IN_WS)
        assert revoked.status_code == 404, revoked.text
        assert _cursor(daemon) == before
    with tenant(daemon, colleague) as alice:
        assert alice.get("/v1/auth/whoami").status_code == 200, "the other workspace's token still works"


def test_a_workspace_admin_cannot_write_a_backup_of_every_workspace(daemon: RunningDaemon, ws_admin: str) -> None:
    with tenant(daemon, ws_admin) as mallory:
        answer = mallory.post("/v1/ledger/backup", params={"to": "everything.sqlite3", "workspace": WS})
    assert answer.status_code == 403, answer.text
    assert "every workspace" in answer.json()["error"]["message"]
    with daemon.client() as admin:
        assert admin.post("/v1/ledger/backup", params={"to": "operator.sqlite3"}).status_code == 200


def test_a_token_never_outlives_its_issuer(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        body = {"actor_id": "ws3-temp-admin", "profile": "admin", "workspace_id": WS, "expires_in_s": 3600}
        short = admin.post("/v1/auth/tokens", json=body).json()
    with tenant(daemon, short["token"]) as temp:
        asked = {"actor_id": "x", "profile": "viewer", "expires_in_s": 7200}
        longer = temp.post("/v1/auth/tokens", params=IN_WS, json=asked)
        assert longer.status_code == 403, longer.text
        unasked = temp.post("/v1/auth/tokens", params=IN_WS, json={"actor_id": "y", "profile": "viewer"})
        assert unasked.status_code == 201, unasked.text
        assert unasked.json()["expires_at"] == short["expires_at"]


def test_a_workspace_admin_grants_discord_users_only_what_it_holds_and_revokes_only_its_own_grants(
    daemon: RunningDaemon, ws_admin: str
) -> None:
    with daemon.client() as admin:
        body = {"subject_kind": "user", "subject_id": "123456789012345678", "profile": "viewer"}
        theirs = admin.post("/v1/authority/grants", json=body).json()["grant_id"]
    with tenant(daemon, ws_admin) as mallory:
        override = {"subject_kind": "user", "subject_id": "42", "capabilities": ["promotion.override"]}
        assert mallory.post("/v1/authority/grants", params=IN_WS, json=override).status_code == 403
        revoked = mallory.post(f"/v1/authority/grants/{theirs}/revoke", params=IN_WS)
        assert revoked.status_code == 404, revoked.text
        revoked = mallory.post(f"/v1/authority/grants/{theirs}/revoke", params={"workspace": "default"})
        assert revoked.status_code == 403, revoked.text
    with daemon.client() as admin:
        assert not next(g for g in admin.get("/v1/authority/grants").json() if g["grant_id"] == theirs)["revoked_at"]


# -- finding 3: a project's token is of one workspace ---------------------------------------------------------------


def _reaches_pa_of_ws3(daemon: RunningDaemon, token: str) -> list[str]:
    """What of project pa in ws3 the token reached: API reads and writes, the id lookup, the web view."""
    reached = []
    with tenant(daemon, token) as alice:
        if alice.get("/v1/projects/pa", params={"workspace": WS}).status_code == 200:
            reached.append("read")
        body = {"experiment_id": "e-from-default", "name": "E"}
        if alice.post("/v1/projects/pa/experiments", params={"workspace": WS}, json=body).status_code < 300:
            reached.append("write")
        ids = alice.get("/v1/ids/exp-ws3", params={"workspace": WS})
        if ids.status_code == 200 and "exp-ws3-secret" in ids.text:
            reached.append("ids")
        link = alice.post("/v1/ui/links", params={"workspace": WS})
        if link.status_code == 201:
            with httpx.Client(timeout=30) as browser:
                browser.get(link.json()["url"], follow_redirects=False)
                if browser.get(f"{daemon.url}/ui/p/pa", params={"workspace": WS}).status_code == 200:
                    reached.append("web view")
    return reached


def test_a_project_token_issued_without_a_workspace_is_of_the_request_workspace(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        body = {"actor_id": "alice-pa", "profile": "researcher", "project_id": "pa"}
        issued = admin.post("/v1/auth/tokens", json=body)
    assert issued.status_code == 201, issued.text
    token = str(issued.json()["token"])
    assert _reaches_pa_of_ws3(daemon, token) == []
    assert issued.json()["workspace_id"] == "default"
    with tenant(daemon, token) as alice:
        assert alice.get("/v1/projects/pa").status_code == 200, "its own project, in its own workspace"


def test_a_project_token_from_before_the_binding_acts_in_the_default_workspace_only(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        legacy = next(t for t in admin.get("/v1/auth/tokens").json() if t["token_id"] == "tok-legacy")
        bound = admin.get("/v1/auth/audit", params={"actor": "system:daemon"}).json()
    assert _reaches_pa_of_ws3(daemon, LEGACY_TOKEN) == []
    assert legacy["workspace_id"] == "default"
    assert any(e["event_type"] == "auth.token_bound" for e in bound)
    with tenant(daemon, LEGACY_TOKEN) as alice:
        assert alice.get("/v1/projects/pa").status_code == 200
