"""The ledger as a CLI user meets it: projects, datasets, models, queries, verify, restart safety."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import httpx

from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, cli, running_daemon


def test_project_and_experiment_round_trip_with_json(daemon: RunningDaemon) -> None:
    env = daemon.env()
    created = cli(env, "project", "create", "--id", "nightly", "--name", "Nightly", "--json")
    assert created.code == 0, created.stderr
    assert created.json()["replayed"] is False
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly", "--json").json()["replayed"] is True
    conflict = cli(env, "project", "create", "--id", "nightly", "--name", "Other")
    assert conflict.code == 6
    assert "name" in conflict.stderr
    assert cli(env, "experiment", "create", "--project", "nightly", "--id", "e1", "--name", "E1").code == 0
    listed = cli(env, "experiment", "list", "--project", "nightly", "--json").json()
    assert [e["experiment_id"] for e in listed] == ["e1"]
    missing = cli(env, "ledger", "context", "--project", "nope")
    assert missing.code == 5
    assert "bashgym project list" in missing.stderr


def test_dataset_register_stores_the_file_once_with_digest_and_row_counts(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = daemon.env()
    cli(env, "project", "create", "--id", "p", "--name", "P")
    data = tmp_path / "traces.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(12)))
    first = cli(
        env,
        "dataset",
        "register",
        "--project",
        "p",
        "--dataset",
        "traces",
        "--version",
        "v1",
        "--file",
        str(data),
        "--json",
    )
    assert first.code == 0, first.stderr
    record = first.json()["record"]
    assert record["row_counts"] == {"total": 12}
    assert len(record["content_digest"]) == 64
    again = cli(
        env,
        "dataset",
        "register",
        "--project",
        "p",
        "--dataset",
        "traces",
        "--version",
        "v1",
        "--file",
        str(data),
        "--json",
    )
    assert again.json()["replayed"] is True
    stored = list((daemon.home / "artifacts" / "sha256").rglob("*"))
    assert len([p for p in stored if p.is_file()]) == 1


def test_model_register_from_a_directory_and_from_a_hub_id(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = daemon.env()
    cli(env, "project", "create", "--id", "p", "--name", "P")
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"\x00" * 64)
    from_dir = cli(
        env, "model", "register", "--project", "p", "--model", "tiny", "--version", "v1", "--dir", str(model), "--json"
    )
    assert from_dir.code == 0, from_dir.stderr
    assert {f["path"] for f in from_dir.json()["record"]["files"]} == {"config.json", "model.safetensors"}
    assert from_dir.json()["record"]["config_digest"]
    no_revision = cli(
        env, "model", "register", "--project", "p", "--model", "llama", "--version", "base", "--hub-id", "org/llama"
    )
    assert no_revision.code == 7
    hub = cli(
        env,
        "model",
        "register",
        "--project",
        "p",
        "--model",
        "llama",
        "--version",
        "base",
        "--hub-id",
        "org/llama",
        "--revision",
        "abc123",
        "--json",
    )
    assert hub.json()["record"]["source_uri"] == "hf://org/llama"


def test_verify_exits_7_naming_the_cursor_after_a_row_is_edited(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_daemon(home) as running:
        cli(running.env(), "project", "create", "--id", "p", "--name", "P")
        cli(running.env(), "experiment", "create", "--project", "p", "--id", "e", "--name", "E")
        assert cli(running.env(), "ledger", "verify").code == 0
        ledger = home / "ledger.sqlite3"
        sql = "UPDATE events SET actor = 'mallory' WHERE cursor = 2"
        if shutil.which("sqlite3"):
            subprocess.run(["sqlite3", str(ledger), sql], check=True)
        else:
            with sqlite3.connect(ledger) as conn:
                conn.execute(sql)
        broken = cli(running.env(), "ledger", "verify", "--json")
        assert broken.code == 7
        assert broken.json()["first_broken_cursor"] == 2


def test_a_changed_migration_checksum_stops_the_daemon_with_a_clear_message(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_daemon(home) as running:
        running.stop()
    with sqlite3.connect(home / "ledger.sqlite3") as conn:
        conn.execute("UPDATE schema_migrations SET checksum = 'x' WHERE number = 1")
    result = cli({**os.environ, "BASHGYM_HOME": str(home)}, "daemon", "--port", "0", timeout_s=30)
    assert result.code == 8
    assert "Migration 1" in result.stderr and "must never change" in result.stderr


def test_a_consumer_cursor_survives_a_daemon_restart_without_loss_or_repeat(tmp_path: Path) -> None:
    home = tmp_path / "home"
    seen: list[int] = []
    with running_daemon(home) as running, running.client() as client:
        for i in range(5):
            client.post("/v1/projects", json={"project_id": f"p{i}", "name": "P"})
        page = client.get("/v1/events", params={"after_cursor": 0, "limit": 3}).json()
        seen += [e["cursor"] for e in page["events"]]
        client.put("/v1/consumers/notifier/cursor", json={"cursor": page["next_cursor"]})
        running.stop()
    with running_daemon(home) as running, running.client() as client:
        client.post("/v1/projects", json={"project_id": "after", "name": "After"})
        cursor = client.get("/v1/consumers/notifier/cursor").json()["cursor"]
        page = client.get("/v1/events", params={"after_cursor": cursor, "limit": 100}).json()
        seen += [e["cursor"] for e in page["events"]]
    # Cursor 1 is the admin token's issue event, which belongs to no workspace's stream.
    assert seen == list(range(2, 8))


def test_events_long_poll_returns_as_soon_as_an_event_lands(daemon: RunningDaemon) -> None:
    import threading

    with daemon.client() as client:
        client.post("/v1/projects", json={"project_id": "poll", "name": "Poll"})
        start = client.get("/v1/projects/poll/events").json()["next_cursor"]

        def write_later() -> None:
            with daemon.client() as other:
                other.post("/v1/projects/poll/experiments", json={"experiment_id": "e", "name": "E"})

        timer = threading.Timer(0.3, write_later)
        timer.start()
        page = client.get("/v1/projects/poll/events", params={"after_cursor": start, "wait_s": 20}).json()
        timer.join()
    assert [e["event_type"] for e in page["events"]] == ["experiment.created"]


def test_a_run_registered_over_the_api_is_verified_or_unassigned(daemon: RunningDaemon) -> None:
    with daemon.client() as client:
        verified = client.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()}).json()
        unassigned = client.post("/v1/runs", json={"method": "sft"}).json()
    assert verified["record"]["context_status"] == "verified"
    assert unassigned["record"]["project_id"] == "unassigned"
    runs = cli(daemon.env(), "ledger", "runs", "--project", "unassigned", "--json").json()
    assert [r["run_id"] for r in runs] == [unassigned["record"]["run_id"]]


def test_metric_batches_over_the_api_reject_nan_and_oversized_batches(daemon: RunningDaemon) -> None:
    with daemon.client() as client:
        run = client.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()}).json()["record"]
        url = "/v1/projects/nightly/metrics"
        base = {"run_id": run["run_id"], "attempt_id": f"{run['run_id']}.a1"}
        nan = client.post(
            url,
            content=json.dumps({**base, "points": [{"metric": "train.loss", "step": 1, "value": float("nan")}]}),
            headers={"Content-Type": "application/json"},
        )
        assert nan.status_code == 422
        too_many = {**base, "points": [{"metric": "m", "step": i, "value": 1.0} for i in range(10_001)]}
        assert client.post(url, json=too_many).status_code == 422
        ok = client.post(url, json={**base, "points": [{"metric": "m", "step": i, "value": 1.0} for i in range(10)]})
        assert ok.status_code == 201
        assert httpx.get(f"{daemon.url}/v1/health").json()["ledger"] == "ok"


def test_a_backup_restored_onto_a_new_home_starts_with_a_new_admin_token_and_keeps_the_old_one(
    tmp_path: Path,
) -> None:
    """The restored ledger knows tok-admin, but the new home's admin.token is another token: the daemon
    registers it under its own id (it used to stop on an internal IntegrityError) and says how to revoke
    the earlier one, which stays valid until then."""
    backup = tmp_path / "old" / "backups" / "backup.sqlite3"  # a name in the old home's backup directory
    with running_daemon(tmp_path / "old") as old:
        assert cli(old.env(), "project", "create", "--id", "kept", "--name", "Kept").code == 0
        written = cli(old.env(), "ledger", "backup", "--to", "backup.sqlite3", "--json")
        assert written.code == 0, written.stderr
        assert written.json()["to"] == str(backup.resolve())
        old_token = old.token
    new_home = tmp_path / "new"
    restored = cli({**os.environ, "BASHGYM_HOME": str(new_home)}, "ledger", "restore", "--from", str(backup))
    assert restored.code == 0, restored.stderr
    with running_daemon(new_home) as new:
        assert new.token != old_token
        tokens = cli(new.env(), "auth", "list", "--json")
        with httpx.Client(base_url=new.url, headers={"Authorization": f"Bearer {old_token}"}) as earlier:
            still_valid = earlier.get("/v1/projects/kept")
        verified = cli(new.env(), "ledger", "verify")
    assert tokens.code == 0, tokens.stderr
    admins = sorted(t["token_id"] for t in tokens.json() if t["actor_id"] == "admin")
    assert admins[0] == "tok-admin" and admins[1].startswith("tok-admin-") and len(admins) == 2
    assert still_valid.status_code == 200
    assert "bashgym auth revoke tok-admin" in new.log
    assert verified.code == 0


def test_run_list_takes_the_search_grammar_sort_and_columns(daemon: RunningDaemon) -> None:
    env = daemon.env()
    with daemon.client() as client:
        made = []
        for loss, rate in ((0.8, 1e-5), (0.25, 3e-4), (0.5, 2e-5)):
            body = {"method": "sft", "tracking_context": tracking_context(), "config": {"learning_rate": rate}}
            run_id = client.post("/v1/runs", json=body).json()["record"]["run_id"]
            points = [{"metric": "train.loss", "step": 0, "value": loss}]
            client.post("/v1/projects/nightly/metrics", json={"run_id": run_id, "attempt_id": f"{run_id}.a1",
                                                               "points": points})  # fmt: skip
            made.append(run_id)
    args = ("run", "list", "--project", "nightly", "--filter", "params.learning_rate < 1e-4",
            "--sort", "metrics.train.loss asc", "--columns", "metrics.train.loss, params.learning_rate")  # fmt: skip
    listed = cli(env, *args, "--json")
    assert listed.code == 0, listed.stderr
    assert [r["run_id"] for r in listed.json()["runs"]] == [made[2], made[0]]
    shown = cli({**env, "COLUMNS": "200"}, *args, "--limit", "1")
    assert shown.code == 0, shown.stderr
    assert "metrics.train.loss" in shown.stdout and "2.00e-05" in shown.stdout and made[2] in shown.stdout
    assert f"--after {made[2]}" in shown.stdout + shown.stderr
    refused = cli(env, "run", "list", "--project", "nightly", "--filter", "status = 'complete'")
    assert refused.code != 0 and "a run status" in refused.stderr and "character 10" in refused.stderr
