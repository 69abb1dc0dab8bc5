"""Host paths: a request reaches the daemon's host only inside the roots its operator set.

Attacks of issue 34: findings 2 (any path a caller sends is a path on the host; blobs by digest alone),
3 (a viewer backs the ledger up anywhere) and 8 (a lead points the daemon's SSH client at any key and any
host, loopback included). The daemon runs with an operator's defaults: no data roots beyond its home's
`data` and `exports`, keys only from `$BASHGYM_HOME/keys`, no devices on this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import tracking_context
from tests.support.helpers import running_daemon

OPERATOR_DEFAULTS = {
    "BASHGYM_DATA_ROOTS": "",
    "BASHGYM_EXPORT_ROOTS": "",
    "BASHGYM_SSH_KEYS_DIR": "",
    "BASHGYM_ALLOW_PRIVATE_DEVICE_HOSTS": "false",
}
# Other bytes than the blob test's: uploading those for "mine" would make that test's blob its own.
HELD_ROWS = '{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}\n' * 4
SECRET_TEXT = '{"messages": [{"role": "user", "content": "the root-only secret"}]}\n'


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("host")
    secret = root / "root-only.jsonl"
    secret.write_text(SECRET_TEXT)
    secret.chmod(0o600)
    with running_daemon(root / "home", env=OPERATOR_DEFAULTS) as daemon:
        yield {
            "daemon": daemon,
            "root": root,
            "secret": secret,
            "researcher": issue_token(daemon, "rita", "researcher", project="mine"),
            "lead": issue_token(daemon, "lena", "lead"),
            "viewer": issue_token(daemon, "vic", "viewer"),
        }


def _refused(answer: Any, field: str) -> dict[str, Any]:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "path_refused" and error["details"]["field"] == field, error
    return dict(error)


def test_a_researchers_paths_outside_the_data_roots_are_refused_before_anything_reads_them(
    host: dict[str, Any],
) -> None:
    daemon, secret = host["daemon"], host["secret"]
    context = tracking_context(project_id="mine")
    with tenant(daemon, host["researcher"]) as rita:
        rita.post("/v1/projects", json={"project_id": "mine", "name": "Mine"})
        evaluation = {"run_id": "x", "dataset_path": str(secret)}
        _refused(rita.post("/v1/projects/mine/evaluations", json=evaluation), "dataset_path")
        launch = {
            "strategy": "sft",
            "base_model": "org/model",
            "dataset_path": str(secret),
            "tracking_context": context,
        }
        _refused(rita.post("/v1/training/plan", json=launch), "dataset_path")
        _refused(rita.post("/v1/training/start", json=launch), "dataset_path")
        escape = {**launch, "dataset_path": str(daemon.home / "data" / ".." / "admin.token")}
        _refused(rita.post("/v1/training/start", json=escape), "dataset_path")
        _refused(rita.post("/v1/training/start", json={**launch, "eval_dataset_path": "/etc/shadow"}), "dataset_path")
        source = {"model_version_id": "stolen", "model_id": "m", "source_uri": "file:///root/.ssh"}
        _refused(rita.post("/v1/projects/mine/model-versions", json=source), "source_uri")
        _refused(rita.post("/v1/projects/mine/model-versions/import", json={"from_dir": "/root/.ssh"}), "from_dir")
        bundle = {"to": str(host["root"] / "victim" / ".ssh")}
        rita.post(
            "/v1/projects/mine/model-versions", json={**source, "source_uri": "hf://org/m", "source_revision": "a"}
        )
        _refused(rita.post("/v1/projects/mine/model-versions/stolen/export", json=bundle), "to")
    assert not (host["root"] / "victim").exists()
    assert not list((daemon.home / "artifacts").rglob(hashlib.sha256(SECRET_TEXT.encode()).hexdigest()[2:]))


def test_a_model_path_outside_the_data_roots_is_refused_though_the_data_is_the_projects_own(
    host: dict[str, Any],
) -> None:
    daemon = host["daemon"]
    with tenant(daemon, host["researcher"]) as rita:
        rita.post("/v1/projects", json={"project_id": "mine", "name": "Mine"})
        held = rita.put("/v1/blobs", params={"project": "mine"}, content=HELD_ROWS.encode())
        assert held.status_code == 200, held.text
        launch = {
            "strategy": "sft",
            "base_model": "org/m",
            "dataset_path": f"bashgym://artifacts/sha256/{held.json()['sha256']}",
            "tracking_context": tracking_context(project_id="mine"),
        }
        distill = {**launch, "strategy": "distillation", "teacher_model": "org/teacher"}
        for route in ("/v1/training/plan", "/v1/training/start"):
            _refused(rita.post(route, json={**launch, "base_model": "/root"}), "base_model")
            _refused(rita.post(route, json={**distill, "base_model": str(daemon.home / "runs")}), "base_model")
            _refused(rita.post(route, json={**distill, "teacher_model": "/root"}), "teacher_model")
            _refused(rita.post(route, json={**distill, "teacher_model": str(daemon.home)}), "teacher_model")
            for field, model in (("base_model", launch), ("teacher_model", distill)):
                relative = rita.post(route, json={**model, field: "../../runs/x/final"})
                assert relative.status_code == 422 and f"`{field}`" in relative.json()["error"]["message"], (
                    relative.text
                )


def test_a_refused_path_says_nothing_of_what_exists_there(host: dict[str, Any]) -> None:
    daemon, secret = host["daemon"], host["secret"]
    context = tracking_context(project_id="mine")
    answers = []
    with tenant(daemon, host["researcher"]) as rita:
        for probe in (str(secret), str(secret) + ".missing", "/etc/passwd", "/no/such/dir/file.jsonl"):
            launch = {"strategy": "sft", "base_model": "org/m", "dataset_path": probe, "tracking_context": context}
            error = _refused(rita.post("/v1/training/plan", json=launch), "dataset_path")
            answers.append((error["message"].replace(repr(probe), "<path>"), error["hint"]))
    assert len(set(answers)) == 1, answers


def test_a_blob_is_reached_only_through_a_project_that_holds_it(host: dict[str, Any], tmp_path: Path) -> None:
    daemon = host["daemon"]
    rows = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n' * 4
    with daemon.client() as admin:
        stored = admin.put("/v1/blobs", params={"project": "theirs"}, content=rows.encode())
        assert stored.status_code == 200, stored.text
    sha = stored.json()["sha256"]
    context = tracking_context(project_id="mine")
    with tenant(daemon, host["researcher"]) as rita:
        rita.post("/v1/projects", json={"project_id": "mine", "name": "Mine"})
        assert rita.post("/v1/projects", json={"project_id": "theirs", "name": "T"}).status_code == 403
        registered = rita.post(
            "/v1/projects/mine/dataset-versions/from-blob",
            json={"dataset_id": "d", "dataset_version_id": "d1", "sha256": sha, "filename": "d.jsonl"},
        )
        assert registered.status_code == 404, registered.text
        launch = {
            "strategy": "sft",
            "base_model": "org/m",
            "dataset_path": f"bashgym://artifacts/sha256/{sha}",
            "tracking_context": context,
        }
        assert rita.post("/v1/training/plan", json=launch).status_code == 404
        files = [{"path": "model.bin", "sha256": sha, "size_bytes": len(rows)}]
        version = {"model_version_id": "by-digest", "model_id": "m", "source_uri": "bashgym://models/m", "files": files}
        assert rita.post("/v1/projects/mine/model-versions", json=version).status_code == 404
        # The same bytes uploaded for its own project are its own to use.
        own = rita.put("/v1/blobs", params={"project": "mine"}, content=rows.encode())
        assert own.status_code == 200 and own.json()["sha256"] == sha
        assert rita.post("/v1/projects/mine/model-versions", json=version).status_code == 201


def test_backup_is_an_admin_action_into_the_backup_directory_written_0600(host: dict[str, Any]) -> None:
    daemon = host["daemon"]
    for token in (host["viewer"], host["lead"], host["researcher"]):
        with tenant(daemon, token) as caller:
            refused = caller.post("/v1/ledger/backup", params={"to": str(host["root"] / "stolen.sqlite3")})
        assert refused.status_code == 403, refused.text
        assert "ledger.backup" in refused.json()["error"]["message"]
    assert not (host["root"] / "stolen.sqlite3").exists()
    with daemon.client() as admin:
        for outside in (str(host["root"] / "x.sqlite3"), "/proc/self/x", "../ledger.sqlite3", "../../etc/x"):
            assert admin.post("/v1/ledger/backup", params={"to": outside}).status_code == 403, outside
        written = admin.post("/v1/ledger/backup", params={"to": "nightly-1.sqlite3"})
    assert written.status_code == 200, written.text
    backup = daemon.home / "backups" / "nightly-1.sqlite3"
    assert written.json()["to"] == str(backup.resolve())
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert stat.S_IMODE(backup.parent.stat().st_mode) == 0o700


def test_a_lead_cannot_point_a_device_at_any_key_or_at_this_machine(host: dict[str, Any]) -> None:
    daemon, root = host["daemon"], host["root"]
    stray = root / "id_stray"
    stray.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n-----END OPENSSH PRIVATE KEY-----\n")
    keys = daemon.home / "keys"  # the operator's keys directory, made as ssh-keygen would
    keys.mkdir(mode=0o700, exist_ok=True)
    (keys / "id_lab").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n-----END OPENSSH PRIVATE KEY-----\n")
    (keys / "id_lab").chmod(0o600)
    device = {"device_id": "gpu1", "host": "gpu1.invalid", "user": "ml", "key_path": "id_lab"}
    with tenant(daemon, host["lead"]) as lena:
        _refused(lena.post("/v1/devices", json={**device, "key_path": str(stray)}), "key_path")
        _refused(lena.post("/v1/devices", json={**device, "key_path": "../admin.token"}), "key_path")
        _refused(lena.post("/v1/devices", json={**device, "known_hosts": "/etc/ssh/ssh_known_hosts"}), "known_hosts")
        mapped = ("::ffff:127.0.0.1", "::ffff:169.254.169.254", "[::ffff:127.0.0.1]", "::ffff:0.0.0.0")
        embedded = ("64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1")  # NAT64 and 6to4
        for here in ("127.0.0.1", "localhost", "169.254.169.254", "::1", *mapped, *embedded):
            _refused(lena.post("/v1/devices", json={**device, "device_id": "loop", "host": here}), "host")
        added = lena.post("/v1/devices", json=device)
        assert added.status_code == 201, added.text
        assert added.json()["record"]["key_path"] == str((keys / "id_lab").resolve())
    with tenant(daemon, host["viewer"]) as vic:
        shown = vic.get("/v1/devices/gpu1").json()
        listed = vic.get("/v1/devices").json()["devices"]
    assert shown["key_path"] == "id_lab" and all(d["key_path"] == "id_lab" for d in listed)
    assert str(keys) not in json.dumps(shown) + json.dumps(listed)


def test_the_home_is_private_whatever_the_umask(host: dict[str, Any]) -> None:
    home = host["daemon"].home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for path in [home / "ledger.sqlite3", home / "admin.token", *home.glob("ledger.sqlite3-*")]:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    for path in home.rglob("*"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"


def test_an_existing_open_home_is_closed_at_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    (home / "bashgym.toml").write_text("")
    os.chmod(home / "bashgym.toml", 0o644)
    with running_daemon(home, env=OPERATOR_DEFAULTS):
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert stat.S_IMODE((home / "bashgym.toml").stat().st_mode) == 0o600
        assert stat.S_IMODE((home / "ledger.sqlite3").stat().st_mode) == 0o600


def test_a_bundle_exported_in_one_workspace_is_out_of_another_workspaces_reach(host: dict[str, Any]) -> None:
    # Exports land in the home's exports/<workspace>/: any project of that workspace may import them (the
    # exchange README shows), and no tenant of another workspace may import, train on or read them by path.
    daemon = host["daemon"]
    weights = b"weights of the default workspace" * 8
    with daemon.client() as admin:
        admin.post("/v1/projects", json={"project_id": "shelf", "name": "Shelf"})
        assert admin.put("/v1/blobs", params={"project": "shelf"}, content=weights).status_code == 200
        files = [{"path": "model.bin", "sha256": hashlib.sha256(weights).hexdigest(), "size_bytes": len(weights)}]
        version = {"model_version_id": "shelved", "model_id": "m", "source_uri": "bashgym://models/m", "files": files}
        assert admin.post("/v1/projects/shelf/model-versions", json=version).status_code == 201
        exported = admin.post("/v1/projects/shelf/model-versions/shelved/export", json={"to": "bundle-a"})
        assert exported.status_code == 201, exported.text
    bundle = daemon.home / "exports" / "default" / "bundle-a"
    assert exported.json()["bundle"] == str(bundle) and (bundle / "manifest.json").is_file()

    mallory = issue_token(daemon, "mallory-exports", "researcher", workspace="ws3")
    with tenant(daemon, mallory) as attacker:
        where = {"workspace": "ws3"}
        attacker.post("/v1/projects", params=where, json={"project_id": "loot", "name": "Loot"})
        by_path = attacker.post("/v1/projects/loot/model-versions/import", params=where, json={"from_dir": str(bundle)})
        _refused(by_path, "from_dir")
        by_name = attacker.post("/v1/projects/loot/model-versions/import", params=where, json={"from_dir": "bundle-a"})
        assert by_name.status_code == 422 and "is not a directory" in by_name.text, by_name.text  # ws3's own: empty
        launch = {"strategy": "sft", "base_model": "org/m", "dataset_path": str(bundle / "model.bin"),
                  "tracking_context": tracking_context(workspace_id="ws3", project_id="loot")}  # fmt: skip
        _refused(attacker.post("/v1/training/plan", params=where, json=launch), "dataset_path")
    with tenant(daemon, host["researcher"]) as rita:  # another project of the same workspace
        rita.post("/v1/projects", json={"project_id": "mine", "name": "Mine"})
        imported = rita.post("/v1/projects/mine/model-versions/import", json={"from_dir": "bundle-a"})
        assert imported.status_code == 201, imported.text
