"""A researcher's dataset carries shell checks: they run as nobody in the sandbox, never as the daemon's user.

Issue 34, finding 1: an RLVR row's `{"kind": "command", "check": ...}` ran as root outside the sandbox
and read the admin token. The attack here writes `id -u` and the token into a directory anyone may
write to, outside the sandbox; the trainer must reach its reward step, and the file must hold neither.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.environments.sandbox import probe_isolation
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import training_request
from tests.support.helpers import inprocess_daemon, running_daemon, wait_for_run

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def drop() -> Iterator[Path]:
    """Where the attack writes: anyone may, and no root-only directory sits above it."""
    path = Path(tempfile.mkdtemp(prefix="bashgym-drop-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_researchers_command_check_cannot_read_the_admin_token(tmp_path: Path, drop: Path) -> None:
    isolation = probe_isolation()
    if isolation.level != "namespaces":
        pytest.skip(f"the check runs with the attempt's isolation, here only {isolation.level}: {isolation.detail}")
    home = tmp_path / "home"
    loot = drop / "loot"
    attack = f"id -u > {loot}; cat {home / 'admin.token'} >> {loot}; true"
    verifier = {"kind": "command", "files": {"notes.txt": "a\nb\n"}, "check": attack}
    rows = [
        {"prompt": f"Count the lines in notes.txt ({i})", "verifier": {**verifier, "task_id": f"t{i}"}}
        for i in range(2)
    ]
    data = tmp_path / "rlvr.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tiny = build_tiny(tmp_path / "tiny")
    request = training_request(
        tiny, data, strategy="rlvr", max_steps=1, batch_size=2, grpo_num_generations=2, grpo_max_completion_length=8
    )
    with running_daemon(home) as daemon:
        token = issue_token(daemon, "mallory", "researcher")
        with tenant(daemon, token) as mallory:
            started = mallory.post("/v1/training/start", json=request)
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            run = wait_for_run(mallory, "nightly", run_id, {"completed", "failed", "cancelled"}, timeout_s=240)
        admin_token = daemon.token
    log = (home / "runs" / run_id / "training.log").read_text()
    # Rewards come before the first optimizer step: a step means every check of that batch ran.
    assert run["status"] in {"completed", "failed"}, run
    metrics = run["metric_summary"]
    assert metrics.get("train.loss", {}).get("count", 0) >= 1, log[-3000:]
    # Every check ran to its last word (`true`): the attack was tried, inside the sandbox.
    assert metrics["train.reward_mean"]["latest"] == 1.0, metrics
    leaked = loot.read_text() if loot.exists() else ""
    assert admin_token not in leaked
    assert not leaked.startswith("0\n"), leaked


@pytest.mark.anyio
async def test_command_checks_train_only_where_the_sandbox_isolates_them(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below `namespaces` a dataset's checks would run as the trainer host's user: refused, unless the operator
    trusts every dataset author with that user."""
    from bashgym.trainers.environments import sandbox

    monkeypatch.setattr(sandbox, "probe_isolation", lambda: sandbox.Isolation("netns", True, False, "forced"))
    rows = [{"prompt": "Count the lines", "verifier": {"kind": "command", "task_id": "t", "check": "true"}}] * 2
    data = tmp_path / "rlvr.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    request = training_request(build_tiny(tmp_path / "tiny"), data, strategy="rlvr", max_steps=1)
    async with inprocess_daemon(ledger, tmp_path / "home") as admin:
        refused = await admin.post("/v1/training/start", json=request)
        assert refused.status_code == 403, refused.text
        assert "this host gives netns" in refused.json()["error"]["message"]
        assert "BASHGYM_ALLOW_UNISOLATED_CHECKS" in refused.json()["error"]["hint"]
        # The same rows written with the kind escaped (`\u0063ommand` is JSON for "command"), or indented by a
        # pretty printer: the trainer reads a command check all the same, so launch refuses them all the same.
        disguised = json.dumps(rows[0]).replace('"command"', '"\\u0063ommand"')
        assert '"command"' not in disguised and json.loads(disguised)["verifier"]["kind"] == "command"
        data.write_text(disguised + "\n" + disguised + "\n")
        disguised_request = training_request(build_tiny(tmp_path / "t4"), data, strategy="rlvr", max_steps=1)
        escaped = await admin.post("/v1/training/start", json=disguised_request)
        assert escaped.status_code == 403 and "this host gives netns" in escaped.text, escaped.text
        safe = [{"prompt": "Say ok", "verifier": {"kind": "exact_match", "task_id": "t", "expected": "ok"}}] * 2
        # A byte-order mark before the one command row: the trainer reads the file as utf-8-sig and sees it.
        data.write_bytes(b"\xef\xbb\xbf" + (json.dumps(rows[0]) + "\n" + json.dumps(safe[0]) + "\n").encode())
        marked_request = training_request(build_tiny(tmp_path / "t5"), data, strategy="rlvr", max_steps=1)
        marked = await admin.post("/v1/training/start", json=marked_request)
        assert marked.status_code == 403 and "this host gives netns" in marked.text, marked.text
        data.write_text("".join(json.dumps(row) + "\n" for row in safe))
        planned = await admin.post(
            "/v1/training/plan", json=training_request(build_tiny(tmp_path / "t2"), data, strategy="rlvr")
        )
        assert planned.status_code == 200, planned.text
    async with inprocess_daemon(ledger, tmp_path / "trusting", allow_unisolated_checks=True) as trusting:
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        request = training_request(build_tiny(tmp_path / "t3"), data, strategy="rlvr", max_steps=1)
        allowed = await trusting.post("/v1/training/start", json=request)
        assert allowed.status_code == 201, allowed.text
