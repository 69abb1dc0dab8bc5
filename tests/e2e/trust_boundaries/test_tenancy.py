"""Tenancy: a token reaches its own workspace and project, and every route it needs there.

Attacks of issue 34: findings 4 (another workspace stops your run), 9 (a viewer moves durable cursors),
13 (a Discord user id in other digits) and 14 (project-scoped principals cannot use the routes they need).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, running_daemon, wait_for_run

GUILD = "111111111111111111"
TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    env = {"BASHGYM_DISCORD_GUILD_IDS": GUILD, "BASHGYM_LOCAL_SLOTS": "2"}
    with running_daemon(tmp_path_factory.mktemp("tenancy") / "home", env=env) as running:
        yield running


def _wait_running(daemon: RunningDaemon, project: str, run_id: str) -> None:
    with daemon.client() as admin:
        run = wait_for_run(admin, project, run_id, {"running", *TERMINAL}, timeout_s=120)
    assert run["status"] == "running", run


def test_another_workspace_cannot_take_a_live_run_id_stop_it_or_read_its_log(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    request = training_request(tiny, sft_data(tmp_path), max_steps=5000, save_steps=5000)
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        _wait_running(daemon, "nightly", run_id)
        attacker = issue_token(daemon, "mallory", "researcher", workspace="ws3")
        with tenant(daemon, attacker) as mallory:
            context = tracking_context(workspace_id="ws3")
            taken = mallory.post(
                "/v1/runs",
                params={"workspace": "ws3"},
                json={"run_id": run_id, "method": "sft", "tracking_context": context},
            )
            assert taken.status_code == 409, taken.text
            assert "unique" in taken.json()["error"]["message"]
            stopped = mallory.post(f"/v1/projects/nightly/runs/{run_id}/stop", params={"workspace": "ws3"})
            assert stopped.status_code in {403, 404}, stopped.text
            log = mallory.get(f"/v1/projects/nightly/runs/{run_id}/log", params={"workspace": "ws3"})
            assert log.status_code in {403, 404}, log.text
            # Without a workspace the token's own one applies (no such run there); naming the default is refused.
            assert mallory.get(f"/v1/projects/nightly/runs/{run_id}").status_code == 404
            assert (
                mallory.get(f"/v1/projects/nightly/runs/{run_id}", params={"workspace": "default"}).status_code == 403
            )
        time.sleep(1)
        assert admin.get(f"/v1/projects/nightly/runs/{run_id}").json()["status"] == "running"
        assert admin.post(f"/v1/projects/nightly/runs/{run_id}/stop").status_code == 200
        assert wait_for_run(admin, "nightly", run_id, TERMINAL)["status"] == "cancelled"


def test_run_ids_are_unique_across_projects_of_one_workspace(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        first = admin.post(
            "/v1/runs", json={"run_id": "run-shared-1", "method": "sft", "tracking_context": tracking_context()}
        )
        assert first.status_code == 201, first.text
        other = tracking_context(project_id="other-project")
        again = admin.post("/v1/runs", json={"run_id": "run-shared-1", "method": "sft", "tracking_context": other})
        assert again.status_code == 409, again.text
        assert "nightly" not in again.json()["error"]["message"], "another project's name is not disclosed"


@pytest.mark.parametrize("consumer", ["discord-notifier", "sink.audit", "curator", "console-notifier"])
def test_a_viewer_cannot_move_a_durable_consumer_cursor(daemon: RunningDaemon, consumer: str) -> None:
    viewer = issue_token(daemon, f"viewer-{consumer.replace('.', '-')}", "viewer")
    with daemon.client() as admin:
        admin.post("/v1/projects", json={"project_id": "cursors", "name": "Cursors"})
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
        before = admin.get(f"/v1/consumers/{consumer}/cursor").json()["cursor"]
    with tenant(daemon, viewer) as eve:
        moved = eve.put(f"/v1/consumers/{consumer}/cursor", json={"cursor": head})
    assert moved.status_code == 403, moved.text
    with daemon.client() as admin:
        assert admin.get(f"/v1/consumers/{consumer}/cursor").json()["cursor"] == before


@pytest.mark.parametrize("consumer", ["sink.audit", "console-notifier"])
def test_the_daemons_own_consumers_move_for_admins_only(daemon: RunningDaemon, consumer: str) -> None:
    """A lead writes to the ledger, but skipping a sink's or the console's events is not the lead's to do."""
    lead = issue_token(daemon, f"lead-{consumer.replace('.', '-')}", "lead")
    with daemon.client() as admin:
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
    with tenant(daemon, lead) as lee:
        moved = lee.put(f"/v1/consumers/{consumer}/cursor", json={"cursor": head})
    assert moved.status_code == 403, moved.text
    assert "authority.manage" in moved.json()["error"]["message"]


def test_a_cursor_moved_by_someone_else_than_its_consumer_is_an_event(daemon: RunningDaemon) -> None:
    curator = issue_token(daemon, "curator-bot", "researcher")
    lead = issue_token(daemon, "lead-lee", "lead")
    with daemon.client() as admin:
        admin.post("/v1/projects", json={"project_id": "moves", "name": "Moves"})
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
    with tenant(daemon, curator) as own:
        assert own.put("/v1/consumers/curator.moves/cursor", json={"cursor": head - 1}).status_code == 200
        assert own.put("/v1/consumers/curator.moves/cursor", json={"cursor": head}).status_code == 200
    with tenant(daemon, lead) as other:
        assert other.put("/v1/consumers/curator.moves/cursor", json={"cursor": head + 1}).status_code in {200, 422}
        with daemon.client() as admin:
            admin.post("/v1/projects", json={"project_id": "moves-2", "name": "Moves 2"})
            head = admin.get("/v1/ledger/health").json()["last_cursor"]
        assert other.put("/v1/consumers/curator.moves/cursor", json={"cursor": head}).status_code == 200
    with daemon.client() as admin:
        events = admin.get("/v1/events", params={"type": "consumer.cursor_moved", "limit": 100}).json()["events"]
    moves = [e for e in events if e["payload"]["consumer"] == "curator.moves"]
    assert [e["actor"] for e in moves] == ["lead-lee"], moves
    assert moves[0]["payload"]["previous_cursor"] <= moves[0]["payload"]["cursor"]


@pytest.mark.parametrize("consumer", ["curator", "curator.nightly"])
@pytest.mark.parametrize("named", [{"workspace": "ws3"}, {}], ids=["in-its-own-workspace", "in-default"])
def test_a_researcher_of_another_workspace_cannot_move_the_default_workspaces_curator(
    daemon: RunningDaemon, consumer: str, named: dict[str, str]
) -> None:
    """Cursor names are daemon-wide: ledger.write in ws3 is no right to skip the default workspace's events."""
    mallory = issue_token(daemon, f"mallory-{consumer.replace('.', '-')}-{len(named)}", "researcher", workspace="ws3")
    with daemon.client() as admin:
        admin.post("/v1/projects", json={"project_id": "nightly", "name": "Nightly SFT"})
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
        before = admin.get(f"/v1/consumers/{consumer}/cursor").json()["cursor"]
    with tenant(daemon, mallory) as client:
        moved = client.put(f"/v1/consumers/{consumer}/cursor", params=named, json={"cursor": head})
        ws3_moves = client.get("/v1/events", params={"workspace": "ws3", "type": "consumer.cursor_moved"})
    assert moved.status_code == 403, moved.text
    assert "limited to workspace 'ws3'" in moved.json()["error"]["message"]
    assert ws3_moves.status_code == 200 and ws3_moves.json()["events"] == []
    with daemon.client() as admin:
        assert admin.get(f"/v1/consumers/{consumer}/cursor").json()["cursor"] == before


def test_the_curator_moves_its_cursors_with_a_token_of_the_default_workspace(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    cora = issue_token(daemon, "cora", "researcher", workspace="default")
    with daemon.client() as admin:
        assert admin.post("/v1/projects", json={"project_id": "curated", "name": "Curated"}).status_code == 201
    env = {**daemon.env(), "BASHGYM_TOKEN": cora}
    for args in (["--project", "curated"], []):
        curated = cli(env, "curate", "--root", str(tmp_path / "kb"), *args, "--json")
        assert curated.code == 0, curated.stderr
    with daemon.client() as admin:
        for consumer in ("curator.curated", "curator"):
            stored = admin.get(f"/v1/consumers/{consumer}/cursor").json()
            assert stored["owner"] == "cora" and stored["cursor"] > 0, stored
        admin.post("/v1/projects", json={"project_id": "curated-2", "name": "Curated 2"})
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
        assert admin.put("/v1/consumers/curator.curated/cursor", json={"cursor": head}).status_code == 200
    # Its owner sees the move where it reads: a token of project `curated` alone reads that project's events.
    reader = issue_token(daemon, "cora-reads", "viewer", project="curated")
    with tenant(daemon, reader) as own:
        events = own.get("/v1/projects/curated/events", params={"type": "consumer.cursor_moved"}).json()["events"]
    assert [(e["actor"], e["payload"]["owner"], e["payload"]["cursor"]) for e in events] == [("admin", "cora", head)]


def test_a_curator_of_another_workspace_keeps_its_own_cursor_and_reaches_no_other(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    wendy = issue_token(daemon, "wendy", "researcher", workspace="ws7")
    with tenant(daemon, wendy) as own:
        made = own.post("/v1/projects", params={"workspace": "ws7"}, json={"project_id": "w7", "name": "W7"})
        assert made.status_code == 201, made.text
    with daemon.client() as admin:
        before = admin.get("/v1/consumers/curator/cursor").json()
    env = {**daemon.env(), "BASHGYM_TOKEN": wendy}
    for args in (["--project", "w7"], []):
        curated = cli(env, "curate", "--workspace", "ws7", "--root", str(tmp_path / "kb"), *args, "--json")
        assert curated.code == 0, curated.stderr
        assert curated.json()["cursor"] == ("curator:ws7.w7" if args else "curator:ws7")
    with daemon.client() as admin:
        for consumer in ("curator:ws7.w7", "curator:ws7"):
            stored = admin.get(f"/v1/consumers/{consumer}/cursor").json()
            assert stored["owner"] == "wendy" and stored["cursor"] > 0, stored
        assert admin.get("/v1/consumers/curator/cursor").json() == before, "the default workspace's is untouched"
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
    with tenant(daemon, wendy) as own:  # another workspace's curator by its name: still not hers, nor its place
        for consumer in ("curator:default", "curator:default.nightly", "curator"):
            moved = own.put(f"/v1/consumers/{consumer}/cursor", params={"workspace": "ws7"}, json={"cursor": head})
            assert moved.status_code == 403, (consumer, moved.text)
            read = own.get(f"/v1/consumers/{consumer}/cursor", params={"workspace": "ws7"})
            assert read.status_code == 403, (consumer, read.text)
        assert own.get("/v1/consumers/curator:ws7/cursor", params={"workspace": "ws7"}).status_code == 200


def test_the_bots_delegate_token_moves_its_notifier_cursor_and_another_workspaces_cannot(
    daemon: RunningDaemon,
) -> None:
    bot = issue_token(daemon, "discord-bot-tenancy", "viewer", capabilities=("delegate.discord",))  # as bot.token
    elsewhere = issue_token(daemon, "ws3-bot", "viewer", workspace="ws3", capabilities=("delegate.discord",))
    with daemon.client() as admin:
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
    with tenant(daemon, elsewhere) as other:
        refused = other.put("/v1/consumers/discord-notifier/cursor", params={"workspace": "ws3"}, json={"cursor": head})
    assert refused.status_code == 403, refused.text
    with tenant(daemon, bot) as own:
        assert own.put("/v1/consumers/discord-notifier/cursor", json={"cursor": head}).status_code == 200
    # The other two ways of acting as a consumer: holding its lease (shutting the real one out), and recording a
    # refused notice, which moves its cursor past it.
    lease = {"holder": "mallory-bot", "pid": 4242, "workspace": "ws3"}
    failure = {"cursor": head, "event_id": "evt-x", "channel_id": "1", "status": 400, "code": 0, "message": "x"}
    with tenant(daemon, elsewhere) as other:
        taken = other.post("/v1/consumers/discord-notifier/lease", params=lease)
        assert taken.status_code == 403, taken.text
        skipped = other.post("/v1/consumers/discord-notifier/failures", params={"workspace": "ws3"}, json=failure)
        assert skipped.status_code == 403, skipped.text
    mallory = issue_token(daemon, "ws3-writer", "researcher", workspace="ws3")
    with tenant(daemon, mallory) as other:
        for name in ("curator", "curator.nightly"):
            taken = other.post(f"/v1/consumers/{name}/lease", params=lease)
            assert taken.status_code == 403, (name, taken.text)
            skipped = other.post(f"/v1/consumers/{name}/failures", params={"workspace": "ws3"}, json=failure)
            assert skipped.status_code == 403, (name, skipped.text)
    with tenant(daemon, bot) as own:
        held = own.post("/v1/consumers/discord-notifier/lease", params={"holder": "bot", "pid": 1})
        assert held.status_code == 200, held.text
        own.delete("/v1/consumers/discord-notifier/lease", params={"holder": "bot", "pid": 1})


def test_the_daemons_own_consumers_move_for_an_admin_of_every_workspace_and_the_move_is_audited(
    daemon: RunningDaemon,
) -> None:
    """A sink's cursor is one for the sinks of that name in every workspace: an admin of one workspace may not."""
    scoped = issue_token(daemon, "ada-default", "admin", workspace="default")
    with daemon.client() as admin:
        head = admin.get("/v1/ledger/health").json()["last_cursor"]
    with tenant(daemon, scoped) as ada:
        refused = ada.put("/v1/consumers/sink.tenancy/cursor", json={"cursor": head})
    assert refused.status_code == 403, refused.text
    assert "no workspace limit" in refused.json()["error"]["message"]
    with daemon.client() as admin:
        moved = admin.put("/v1/consumers/sink.tenancy/cursor", json={"cursor": head})
        assert moved.status_code == 200, moved.text
        assert moved.json()["owner"] == "system:daemon", "the daemon's consumer stays the daemon's"
        audit = admin.get("/v1/auth/audit", params={"actor": "admin"}).json()
    assert any(e["event_type"] == "consumer.cursor_moved" and e["workspace_id"] == "*" for e in audit), audit


def test_a_discord_user_id_is_ascii_digits_only(daemon: RunningDaemon) -> None:
    bot = issue_token(daemon, "discord-bot", "", capabilities=("delegate.discord",))
    with daemon.client() as admin:
        grant = {"subject_kind": "user", "subject_id": "12", "profile": "viewer"}
        assert admin.post("/v1/authority/grants", json=grant).status_code == 201
    headers = {"X-Discord-Guild-Id": GUILD, "X-Discord-Role-Ids": ""}
    with tenant(daemon, bot) as client:
        assert client.get("/v1/projects", headers={**headers, "X-Discord-User-Id": "12"}).status_code == 200
        # HTTP headers are latin-1: its superscript digits are what str.isdigit() also accepts.
        for forged in ("12²", "1²", "12¹"):
            answer = client.get("/v1/projects", headers={**headers, "X-Discord-User-Id": forged.encode("latin-1")})
            assert answer.status_code == 401, (forged, answer.text)
        roles = client.get(
            "/v1/projects", headers={**headers, "X-Discord-User-Id": "12", "X-Discord-Role-Ids": "3²".encode("latin-1")}
        )
        assert roles.status_code == 401


def test_a_project_scoped_researcher_trains_uploads_and_registers_in_its_project_only(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    token = issue_token(daemon, "pat", "researcher", project="scoped")
    data = sft_data(tmp_path)
    context = tracking_context(project_id="scoped")
    with tenant(daemon, token) as pat:
        uploaded = pat.put("/v1/blobs", params={"project": "scoped"}, content=data.read_bytes())
        assert uploaded.status_code == 200, uploaded.text
        elsewhere = pat.put("/v1/blobs", params={"project": "nightly"}, content=data.read_bytes())
        assert elsewhere.status_code == 403, elsewhere.text
        registered = pat.post("/v1/runs", json={"method": "sft", "tracking_context": context})
        assert registered.status_code == 201, registered.text
        assert registered.json()["record"]["project_id"] == "scoped"
        foreign = pat.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()})
        assert foreign.status_code == 403, foreign.text
        unassigned = pat.post("/v1/runs", json={"method": "sft"})
        assert unassigned.status_code == 403, "a run without context goes to unassigned, which is not pat's"
        request = training_request(tiny, data, tracking_context=context, max_steps=2)
        planned = pat.post("/v1/training/plan", json=request)
        assert planned.status_code == 200, planned.text
        assert planned.json()["project_id"] == "scoped"
        started = pat.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        assert started.json()["project_id"] == "scoped"
        other = pat.post("/v1/training/plan", json=training_request(tiny, data))
        assert other.status_code == 403, other.text
        assert "nightly" in other.json()["error"]["message"]
        listed = pat.get("/v1/projects")
        assert listed.status_code == 200 and [p["project_id"] for p in listed.json()] == ["scoped"]
    with daemon.client() as admin:
        run = wait_for_run(admin, "scoped", started.json()["run_id"], TERMINAL, timeout_s=180)
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]


def test_a_model_version_names_only_a_run_of_its_own_project(daemon: RunningDaemon) -> None:
    """Run directories are named by id alone: a version pointing at another project's run would train, evaluate
    or export that run's model from the attacker's project."""
    with daemon.client() as admin:
        victim = admin.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()})
        assert victim.status_code == 201, victim.text
    run_id = victim.json()["record"]["run_id"]
    token = issue_token(daemon, "theo", "researcher", project="theft")
    with tenant(daemon, token) as theo:
        assert theo.post("/v1/projects", json={"project_id": "theft", "name": "Theft"}).status_code == 201
        version = {"model_version_id": "stolen", "model_id": "m", "source_uri": f"bashgym://runs/{run_id}"}
        refused = theo.post("/v1/projects/theft/model-versions", json=version)
    assert refused.status_code == 404, refused.text
    assert "nightly" not in refused.text
