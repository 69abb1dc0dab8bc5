"""Tamper evidence, migration pinning, corrupt files, backups and restores."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from bashgym.client.errors import InvalidInput, LedgerUnavailable, MigrationMismatch
from bashgym.client.specs import (
    Actor,
    DatasetVersionSpec,
    DeviceGroupSpec,
    DeviceSpec,
    ProjectSpec,
    RunRegistration,
)
from bashgym.ledger import store
from bashgym.ledger.migrations import MIGRATIONS, Migration, migrate
from bashgym.ledger.restore import restore_ledger
from bashgym.ledger.store import Ledger

pytestmark = pytest.mark.anyio


def edit_with_sqlite_shell(path: Path, sql: str) -> None:
    """Edit the file as an attacker would, with the sqlite3 shell when the machine has it."""
    shell = shutil.which("sqlite3")
    if shell:
        subprocess.run([shell, str(path), sql], check=True, capture_output=True)
    else:
        with sqlite3.connect(path) as conn:
            conn.execute(sql)


async def _populated(tmp_path: Path, actor: Actor) -> Path:
    path = tmp_path / "ledger.sqlite3"
    async with await Ledger.open(path) as ledger:
        for i in range(5):
            await ledger.create_project(actor, "default", ProjectSpec(project_id=f"p{i}", name=f"P{i}"))
        await ledger.register_run(actor, "default", RunRegistration(method="sft"))
        assert (await ledger.verify())["ok"] is True
    return path


async def test_an_edited_event_row_breaks_verify_at_that_cursor(tmp_path: Path, actor: Actor) -> None:
    path = await _populated(tmp_path, actor)
    edit_with_sqlite_shell(path, "UPDATE events SET actor = 'mallory' WHERE cursor = 3")
    async with await Ledger.open(path) as ledger:
        verdict = await ledger.verify()
    assert verdict["ok"] is False
    assert verdict["first_broken_cursor"] == 3
    assert "edited" in verdict["reason"]


async def test_a_deleted_event_row_breaks_verify(tmp_path: Path, actor: Actor) -> None:
    path = await _populated(tmp_path, actor)
    edit_with_sqlite_shell(path, "DELETE FROM events WHERE cursor = 2")
    async with await Ledger.open(path) as ledger:
        verdict = await ledger.verify()
    assert verdict == {"ok": False, "checked": 1, "first_broken_cursor": 3, "reason": verdict["reason"]}
    assert "removed" in verdict["reason"]


async def test_a_changed_migration_checksum_refuses_to_open(tmp_path: Path, actor: Actor) -> None:
    path = await _populated(tmp_path, actor)
    edit_with_sqlite_shell(path, "UPDATE schema_migrations SET checksum = 'deadbeef' WHERE number = 1")
    with pytest.raises(MigrationMismatch) as refused:
        await Ledger.open(path)
    assert "Migration 1" in refused.value.message
    assert "bashgym ledger restore" in refused.value.hint


def test_changed_migration_text_is_detected_against_an_applied_ledger(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "l.sqlite3", isolation_level=None)
    migrate(conn)
    edited = (Migration(1, MIGRATIONS[0].name, MIGRATIONS[0].sql + "\n-- edited"),)
    with pytest.raises(MigrationMismatch):
        migrate(conn, edited)
    conn.close()


async def test_a_corrupted_file_refuses_to_open_pointing_at_health_and_backup(tmp_path: Path, actor: Actor) -> None:
    path = await _populated(tmp_path, actor)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\x00" * (4096 - 100)
    data[4096 * 2 : 4096 * 3] = b"garbage!" * 512
    path.write_bytes(bytes(data))
    with pytest.raises(LedgerUnavailable) as refused:
        await Ledger.open(path)
    assert "bashgym ledger health" in refused.value.hint
    assert "backup" in refused.value.hint


async def test_backup_then_restore_brings_every_event_back(tmp_path: Path, actor: Actor) -> None:
    path = await _populated(tmp_path, actor)
    backup = tmp_path / "backup.sqlite3"
    async with await Ledger.open(path) as ledger:
        copied = await ledger.backup(backup)
        with pytest.raises(InvalidInput):
            await ledger.backup(backup)  # never overwrites
    assert copied["integrity_check"] == "ok"
    path.write_bytes(b"not a database at all" * 100)
    restored = restore_ledger(backup, path)
    assert restored["restored_events"] == copied["events"]
    async with await Ledger.open(path) as ledger:
        assert (await ledger.verify())["ok"] is True
        assert len(await ledger.list_projects("default")) == 6  # five plus unassigned


async def test_restore_refuses_a_tampered_backup(tmp_path: Path, actor: Actor) -> None:
    path = await _populated(tmp_path, actor)
    backup = tmp_path / "backup.sqlite3"
    async with await Ledger.open(path) as ledger:
        await ledger.backup(backup)
    edit_with_sqlite_shell(backup, "UPDATE events SET payload_json = '{}' WHERE cursor = 1")
    with pytest.raises(InvalidInput, match="broken event chain at cursor 1"):
        restore_ledger(backup, tmp_path / "target.sqlite3")


async def test_a_ledger_of_migration_7_upgrades_keeping_runs_attempts_and_references(
    tmp_path: Path, actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 8 rebuilds `runs`: every row and attempt comes through, the chain still verifies, the
    attempts' reference to runs is still enforced, and a run id may now repeat in another project."""
    path = tmp_path / "ledger.sqlite3"
    with monkeypatch.context() as patch:  # a ledger written by the BashGym of migration 7
        patch.setattr(store, "migrate", lambda conn: migrate(conn, MIGRATIONS[:7]))
        async with await Ledger.open(path) as old:
            await old.create_project(actor, "default", ProjectSpec(project_id="p1", name="P1"))
            for run_id in ("r1", "r2"):
                await old.register_run(actor, "default", RunRegistration(run_id=run_id, method="sft"))
    assert _rows(path, "SELECT MAX(number) FROM schema_migrations") == [(7,)]
    before = _rows(path, "SELECT * FROM runs ORDER BY run_id") + _rows(path, "SELECT * FROM attempts ORDER BY 1, 3")
    async with await Ledger.open(path) as ledger:
        assert (await ledger.verify())["ok"] is True
        other = await ledger.register_run(
            actor, "default", RunRegistration(run_id="r1", method="sft", tracking_context=None)
        )
        assert other.replayed  # the same run again in unassigned: a replay, not a second row
    after = _rows(path, "SELECT * FROM runs ORDER BY run_id") + _rows(path, "SELECT * FROM attempts ORDER BY 1, 3")
    assert after == before
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA foreign_keys=ON")
        assert raw.execute("SELECT MAX(number) FROM schema_migrations").fetchone() == (MIGRATIONS[-1].number,)
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute(
                "INSERT INTO attempts (workspace_id, project_id, attempt_id, run_id, attempt_number, status, "
                "identity_json, identity_digest, created_at, updated_at) "
                "VALUES ('default', 'unassigned', 'x.a1', 'no-such-run', 1, 'queued', '{}', '', '', '')"
            )


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return [tuple(row) for row in conn.execute(sql)]


async def test_a_ledger_of_migration_8_upgrades_and_its_devices_can_form_a_group(
    tmp_path: Path, actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.sqlite3"
    with monkeypatch.context() as patch:  # a ledger written by the BashGym of migration 8
        patch.setattr(store, "migrate", lambda conn: migrate(conn, MIGRATIONS[:8]))
        async with await Ledger.open(path) as old:
            for name in ("gpu1", "gpu2"):
                spec = DeviceSpec(device_id=name, host=f"{name}.lab", user="ml", key_path="/keys/id")
                await old.add_device(actor, "default", spec)
    async with await Ledger.open(path) as ledger:
        await ledger.add_device_group(actor, "default", DeviceGroupSpec(group_id="pair", members=["gpu1", "gpu2"]))
        assert (await ledger.get_device_group("default", "pair"))["main_process_ip"] == "gpu1.lab"
        assert (await ledger.verify())["ok"] is True
    assert _rows(path, "SELECT MAX(number) FROM schema_migrations") == [(len(MIGRATIONS),)]


async def test_a_ledger_of_migration_9_upgrades_without_stored_secrets_and_with_its_blobs_held(
    tmp_path: Path, actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 10: stored idempotency keys become digests, a stored token issue loses its token, and the
    projects of existing stored versions hold their blobs."""
    path = tmp_path / "ledger.sqlite3"
    token = "bgy_" + "k" * 43
    answer = json.dumps({"token": token, "token_id": "tok-1", "actor_id": "alice", "profile": "viewer"})
    with monkeypatch.context() as patch:  # a ledger written by the BashGym of migration 9
        patch.setattr(store, "migrate", lambda conn: migrate(conn, MIGRATIONS[:9]))
        async with await Ledger.open(path) as old:
            await old.store_idempotent(
                principal="p", key="my-raw-key", method="POST", path="/v1/auth/tokens",
                request_digest="d", status_code=201, response_json=answer,
            )  # fmt: skip
            await old.create_project(actor, "default", ProjectSpec(project_id="p1", name="P1"))
            data = DatasetVersionSpec(
                dataset_version_id="d1", dataset_id="d", source_uri=f"bashgym://artifacts/sha256/{'a' * 64}",
                content_digest="a" * 64,
            )  # fmt: skip
            await old.register_dataset_version(actor, "default", "p1", data)
    async with await Ledger.open(path) as ledger:
        assert await ledger.find_idempotent("p", "my-raw-key") is None
        stored = await ledger.find_idempotent("p", "sha256:" + hashlib.sha256(b"my-raw-key").hexdigest())
        assert stored is not None
        replay = json.loads(stored["response_json"])
        assert replay["token"] is None and replay["token_id"] == "tok-1" and "cannot be shown again" in replay["notice"]
        assert await ledger.holds_blob("default", "p1", "a" * 64)
        assert not await ledger.holds_blob("default", "unassigned", "a" * 64)
        assert (await ledger.verify())["ok"] is True
    wal = Path(f"{path}-wal")
    raw = path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert token.encode() not in raw and b"my-raw-key" not in raw  # secure_delete: not even in free pages
