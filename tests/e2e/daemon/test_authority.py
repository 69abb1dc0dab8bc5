"""Authority as users meet it: delegation, revocation, expiry, audit, rate limits, and planted secrets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, cli, running_daemon

GUILD = "111111111111111111"
FAKE_HF_TOKEN = "hf_" + "Zq9" * 12  # shaped like a Hugging Face token; never real
FAKE_DISCORD_TOKEN = "MTA" + "x" * 21 + ".Gabcde." + "y" * 30


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[RunningDaemon]:
    env = {
        "BASHGYM_DISCORD_GUILD_IDS": GUILD,
        "HF_TOKEN": FAKE_HF_TOKEN,
        "BASHGYM_RATE_LIMIT_BURST": "20",
        "BASHGYM_RATE_LIMIT_PER_MINUTE": "60",
        "BASHGYM_DISCORD_TOKEN": FAKE_DISCORD_TOKEN,
    }
    with running_daemon(tmp_path / "home", env=env) as running:
        yield running


def issue(daemon: RunningDaemon, *args: str) -> dict[str, str]:
    result = cli(daemon.env(), "auth", "issue", *args, "--json")
    assert result.code == 0, result.stderr
    return dict(result.json())


def as_discord(token: str, user: str = "222", roles: str = "", guild: str = GUILD) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "X-Discord-User-Id": user,
        "X-Discord-Role-Ids": roles,
        "X-Discord-Guild-Id": guild,
    }


def test_issued_token_is_shown_once_and_carries_its_profile(guarded: RunningDaemon) -> None:
    issued = issue(guarded, "--actor", "alice", "--profile", "viewer")
    assert issued["token"].startswith("bgy_")
    listed = cli(guarded.env(), "auth", "list", "--json").json()
    assert issued["token"] not in str(listed)
    env = {**guarded.env(), "BASHGYM_TOKEN": issued["token"]}
    whoami = cli(env, "auth", "whoami", "--json").json()
    assert whoami["actor_id"] == "alice" and whoami["capabilities"] == ["ledger.read"]
    denied = cli(env, "project", "create", "--id", "p", "--name", "P")
    assert denied.code == 4
    assert "ledger.write" in denied.stderr


def test_revoking_a_token_applies_on_the_next_request(guarded: RunningDaemon) -> None:
    issued = issue(guarded, "--actor", "bob", "--profile", "researcher")
    with httpx.Client(base_url=guarded.url, headers={"Authorization": f"Bearer {issued['token']}"}) as bob:
        assert bob.get("/v1/projects").status_code == 200
        assert cli(guarded.env(), "auth", "revoke", issued["token_id"]).code == 0
        refused = bob.get("/v1/projects")
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]["message"]


def test_forged_delegation_headers_from_a_non_delegate_token_are_refused(guarded: RunningDaemon) -> None:
    researcher = issue(guarded, "--actor", "mallory", "--profile", "lead")
    answer = httpx.get(f"{guarded.url}/v1/projects", headers=as_discord(researcher["token"]))
    assert answer.status_code == 403
    assert "delegate.discord" in answer.json()["error"]["message"]


def test_a_discord_user_acts_only_through_grants_and_revocation_is_immediate(guarded: RunningDaemon) -> None:
    bot = issue(guarded, "--actor", "discord-bot", "--capability", "delegate.discord")["token"]
    no_grant = httpx.get(f"{guarded.url}/v1/projects", headers=as_discord(bot, user="333"))
    assert no_grant.status_code == 403
    assert "discord:333 lacks the capability ledger.read" in no_grant.json()["error"]["message"]
    grant = cli(guarded.env(), "authority", "grant", "--discord-role", "444", "--profile", "researcher", "--json")
    assert grant.code == 0, grant.stderr
    via_role = httpx.post(
        f"{guarded.url}/v1/projects",
        headers=as_discord(bot, user="333", roles="444"),
        json={"project_id": "from-discord", "name": "From Discord"},
    )
    assert via_role.status_code == 201, via_role.text
    events = httpx.get(
        f"{guarded.url}/v1/projects/from-discord/events", headers={"Authorization": f"Bearer {guarded.token}"}
    ).json()["events"]
    assert (events[0]["actor"], events[0]["credential_kind"]) == ("discord:333", "discord")
    assert cli(guarded.env(), "authority", "revoke", grant.json()["grant_id"]).code == 0
    after = httpx.get(f"{guarded.url}/v1/projects", headers=as_discord(bot, user="333", roles="444"))
    assert after.status_code == 403


def test_a_guild_outside_the_allowlist_is_refused(guarded: RunningDaemon) -> None:
    bot = issue(guarded, "--actor", "discord-bot", "--capability", "delegate.discord")["token"]
    cli(guarded.env(), "authority", "grant", "--discord-user", "555", "--profile", "admin")
    answer = httpx.get(f"{guarded.url}/v1/projects", headers=as_discord(bot, user="555", guild="999"))
    assert answer.status_code == 403
    assert "guild 999" in answer.json()["error"]["message"]


def test_a_project_grant_applies_in_that_project_only(guarded: RunningDaemon) -> None:
    bot = issue(guarded, "--actor", "discord-bot", "--capability", "delegate.discord")["token"]
    with guarded.client() as admin:
        for project in ("mine", "theirs"):
            admin.post("/v1/projects", json={"project_id": project, "name": project})
    cli(guarded.env(), "authority", "grant", "--discord-user", "666", "--profile", "viewer", "--project", "mine")
    assert httpx.get(f"{guarded.url}/v1/projects/mine", headers=as_discord(bot, user="666")).status_code == 200
    assert httpx.get(f"{guarded.url}/v1/projects/theirs", headers=as_discord(bot, user="666")).status_code == 403


def test_an_expired_token_is_refused_saying_so(guarded: RunningDaemon, tmp_path: Path) -> None:
    import sqlite3

    issued = issue(guarded, "--actor", "temp", "--profile", "viewer", "--expires-in", "1h")
    with sqlite3.connect(guarded.home / "ledger.sqlite3") as conn:
        conn.execute(
            "UPDATE api_tokens SET expires_at = '2000-01-01T00:00:00Z' WHERE token_id = ?", (issued["token_id"],)
        )
    # The daemon caches token rows it wrote itself; a restart drops that cache like any new process.
    guarded.stop()
    with running_daemon(guarded.home) as restarted:
        answer = httpx.get(f"{restarted.url}/v1/projects", headers={"Authorization": f"Bearer {issued['token']}"})
    assert answer.status_code == 401
    assert "expired" in answer.json()["error"]["message"]


def test_audit_lists_mutations_with_actor_credential_and_capability(guarded: RunningDaemon) -> None:
    with guarded.client() as admin:
        admin.post("/v1/projects", json={"project_id": "audited", "name": "A"}, headers={"X-Correlation-Id": "cor-1"})
    rows = cli(guarded.env(), "auth", "audit", "--actor", "admin", "--json").json()
    created = [r for r in rows if r["event_type"] == "project.created"]
    assert created and created[-1]["capability"] == "ledger.write"
    assert created[-1]["credential_kind"] == "token" and created[-1]["correlation_id"] == "cor-1"


def test_mutations_over_the_rate_limit_answer_429_with_retry_after(guarded: RunningDaemon) -> None:
    statuses = []
    with guarded.client() as admin:
        for i in range(25):
            answer = admin.post("/v1/projects", json={"project_id": f"rl{i}", "name": "R"})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["Retry-After"]) >= 1
                assert answer.json()["error"]["code"] == "rate_limited"
                break
        assert admin.get("/v1/projects").status_code == 200  # reads are not limited
    assert 429 in statuses


def test_a_planted_secret_never_reaches_the_ledger_log_or_answers(guarded: RunningDaemon) -> None:
    context = tracking_context(metadata={"notes": f"pushed with {FAKE_HF_TOKEN} yesterday"})
    answers = []
    with guarded.client() as admin:
        answers.append(
            admin.post(
                "/v1/runs",
                json={"method": "sft", "tracking_context": context, "config": {"comment": f"Bearer {FAKE_HF_TOKEN}"}},
            )
        )
        run = answers[-1].json()["record"]
        answers.append(
            admin.post(
                f"/v1/projects/nightly/runs/{run['run_id']}/transitions",
                json={"status": "failed", "error_summary": f"401 for {FAKE_HF_TOKEN}"},
            )
        )
        answers.append(
            admin.post("/v1/projects/nightly/annotations", json={"text": f"discord token {FAKE_DISCORD_TOKEN} rotated"})
        )
        answers.append(admin.post("/v1/runs", json={"method": "sft", "config": {"hf_token": FAKE_HF_TOKEN}}))
        answers.append(admin.get(f"/v1/projects/nightly/runs/{run['run_id']}"))
        answers.append(admin.get("/v1/projects/nightly/events"))
    assert answers[3].status_code == 422 and "$.hf_token" in answers[3].json()["error"]["message"]
    guarded.stop()
    for secret in (FAKE_HF_TOKEN, FAKE_DISCORD_TOKEN):
        for path in guarded.home.glob("ledger.sqlite3*"):
            assert secret.encode() not in path.read_bytes(), path.name
        assert secret not in guarded.log
        assert [a.request.url.path for a in answers if secret in a.text] == []
    assert "[redacted]" in answers[4].text
