"""Secrets at rest: a secret is shown once and never stored, and the home is private.

Issue 34, findings 3 (the ledger kept every issued token for replay) and 5 (secrets at rest), and its
acceptance: known secrets planted through every write path (API, CLI, datasets, configs, run logs, sink
URLs, idempotency keys, correlation ids) are found nowhere the daemon writes: the ledger file and its WAL,
backups, logs, run directories, receipts, reports, export bundles, or the posts of its console channel.
"""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.client.specs import Actor
from bashgym.ledger.store import Ledger
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, running_daemon, wait_for_run

# Shaped like real credentials (none is one). The first is the daemon's own HF_TOKEN.
HF = "hf_" + "Sr4" * 12
PLANTED = {
    "config": "sk-" + "Cf9" * 10,
    "context": "ghp_" + "Ct7" * 12,
    "annotation": "AKIA" + "ANNOTATE" * 2,
    "dataset": "nvapi-" + "Ds3" * 10,
    "correlation": "hf_" + "Co5" * 12,
    "idempotency": "sk-" + "Id2" * 10,
    "license": "ghp_" + "Li8" * 12,
    "report": "sk-" + "Rp6" * 10,
    "sink_password": "sink-pass-" + "Zz1" * 6,
    "sink_query": "sk-" + "Sq4" * 10,
    "sink_path": "kJ3x_9fQ-ZpLmW2vRt8yUq4sNb7cXe1aHg5dKo0iPzT6jYwLrVuEfBnMxS3QAC-hGt9Dq2",  # a Discord webhook's
    "sink_slack": "xYz9AbC1dEf2GhI3jKl4MnO5",
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A daemon, a tiny run trained on a dataset with a secret in it, and every other plant, done once."""
    root = tmp_path_factory.mktemp("secrets")
    tiny = build_tiny(root / "tiny")
    env = {"HF_TOKEN": HF, "BASHGYM_LOCAL_SLOTS": "1"}
    with running_daemon(root / "home", "--console-notices", env=env) as daemon:  # the console channel is checked too
        tokens = _issue_tokens(daemon)
        run_id = _train(daemon, tiny, root)
        _plant_through_the_api(daemon, run_id)
        bundle, receipts = _export_curate_and_back_up(daemon, root)
        yield {"daemon": daemon, "root": root, "tokens": tokens, "bundle": bundle, "receipts": receipts}


def _issue_tokens(daemon: RunningDaemon) -> list[str]:
    """Tokens issued through the CLI (a fresh Idempotency-Key each) and through the API with a secret-shaped key."""
    issued = cli(daemon.env(), "auth", "issue", "--actor", "carol", "--profile", "researcher", "--json")
    assert issued.code == 0, issued.stderr
    headers = {"Idempotency-Key": PLANTED["idempotency"]}
    with daemon.client() as admin:
        first = admin.post("/v1/auth/tokens", json={"actor_id": "dave", "profile": "viewer"}, headers=headers)
        replay = admin.post("/v1/auth/tokens", json={"actor_id": "dave", "profile": "viewer"}, headers=headers)
    assert first.status_code == 201 and first.json()["token"].startswith("bgy_")
    assert replay.headers.get("idempotent-replayed") == "true"
    shown = replay.json()
    assert shown["token"] is None and "cannot be shown again" in shown["notice"]
    assert shown["token_id"] == first.json()["token_id"] and shown["profile"] == "viewer"
    return [issued.json()["token"], first.json()["token"]]


def _train(daemon: RunningDaemon, tiny: Path, root: Path) -> str:
    """A run through the CLI: a secret in a dataset row, the config, the tracking context and the correlation id."""
    rows = [
        {"messages": [{"role": "user", "content": f"key {PLANTED['dataset']}"}, {"role": "assistant", "content": "ok"}]}
    ] * 8
    data = root / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    request = training_request(tiny, data, max_steps=2)
    context = {**request["tracking_context"], "objective": f"tune {PLANTED['context']}"}
    (root / "context.json").write_text(json.dumps(context))
    (root / "config.json").write_text(json.dumps({"max_steps": 2, "batch_size": 4, "max_seq_length": 96}))
    started = cli(
        daemon.env(), "training", "start", "--strategy", "sft", "--model", str(tiny), "--dataset-path", str(data),
        "--config", str(root / "config.json"), "--tracking-context", str(root / "context.json"),
        "--correlation-id", PLANTED["correlation"], "--json",
    )  # fmt: skip
    assert started.code == 0, started.stderr
    run_id = str(started.json()["run_id"])
    with daemon.client() as admin:
        run = wait_for_run(admin, "nightly", run_id, {"completed", "failed", "cancelled"}, timeout_s=240)
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
    return run_id


def _plant_through_the_api(daemon: RunningDaemon, run_id: str) -> None:
    researcher = issue_token(daemon, "erin", "researcher")
    with tenant(daemon, researcher) as erin:
        noted = erin.post("/v1/projects/nightly/annotations", json={"text": PLANTED["annotation"], "run_id": run_id})
        assert noted.status_code == 201, noted.text
        registered = erin.post(
            "/v1/runs",
            json={
                "method": "sft",
                "config": {"note": PLANTED["config"]},
                "tracking_context": tracking_context(experiment_id="notes"),
            },
        )
        assert registered.status_code == 201, registered.text
        report = {"report_id": "rep-secret", "kind": "note", "title": "t", "manifest": {"note": PLANTED["report"]}}
        assert erin.post("/v1/projects/nightly/reports", json=report).status_code == 201
    with daemon.client() as admin:
        for url in (
            f"https://bob:{PLANTED['sink_password']}@hooks.example.com/bashgym",
            f"https://hooks.example.com/bashgym?token={PLANTED['sink_query']}",
            f"https://discord.com/api/webhooks/1234567890123456789/{PLANTED['sink_path']}",
            f"https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/{PLANTED['sink_slack']}",
        ):
            sink = {"name": "audit", "url": url, "secret_env": "SINK_SECRET"}
            refused = admin.post("/v1/sinks", json=sink)
            assert refused.status_code == 422, refused.text
            assert not [name for name, value in PLANTED.items() if name.startswith("sink") and value in refused.text]


def _export_curate_and_back_up(daemon: RunningDaemon, root: Path) -> tuple[Path, Path]:
    with daemon.client() as admin:
        runs = admin.get("/v1/projects/nightly/runs").json()
        run = next(r for r in runs if r["status"] == "completed")
        version = {"model_version_id": "mv-secret", "model_id": "tiny", "source_uri": f"bashgym://runs/{run['run_id']}"}
        full = admin.get(f"/v1/projects/nightly/runs/{run['run_id']}").json()
        prefix = f"bashgym://runs/{run['run_id']}/"
        version["files"] = [
            {"path": a["uri"].removeprefix(prefix), "sha256": a["sha256"], "size_bytes": a["size_bytes"]}
            for a in full["artifacts"]
        ]
        assert admin.post("/v1/projects/nightly/model-versions", json=version).status_code == 201, version
        exported = admin.post(
            "/v1/projects/nightly/model-versions/mv-secret/export",
            json={"to": "bundle-secret", "license": f"custom {PLANTED['license']}"},
        )
        assert exported.status_code == 201, exported.text
        assert admin.post("/v1/ledger/backup", params={"to": "before-scan.sqlite3"}).status_code == 200
    receipts = root / "receipts"
    curated = cli(daemon.env(), "curate", "--root", str(receipts))
    assert curated.code == 0, curated.stderr
    return Path(exported.json()["bundle"]), receipts


def _scan(paths: list[Path], secrets: list[str]) -> list[str]:
    found = []
    for top in paths:
        for path in [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]:
            data = path.read_bytes()
            found += [f"{name} in {path}" for name in secrets if name.encode() in data]
    return found


def test_no_planted_secret_is_stored_or_posted_anywhere(planted: dict[str, object]) -> None:
    daemon = planted["daemon"]
    assert isinstance(daemon, RunningDaemon)
    home = daemon.home
    secrets = [HF, *planted["tokens"], *(v for k, v in PLANTED.items() if k != "dataset")]  # type: ignore[misc]
    # The dataset's own copy in the content store is the user's data, kept as uploaded; nothing else holds it.
    stored_data = [
        p for p in (home / "artifacts").rglob("*") if p.is_file() and PLANTED["dataset"].encode() in p.read_bytes()
    ]
    assert len(stored_data) == 1, stored_data
    everywhere = [home, planted["bundle"], planted["receipts"]]  # type: ignore[list-item]
    leaks = _scan(everywhere, secrets) + [
        leak for leak in _scan(everywhere, [PLANTED["dataset"]]) if not leak.endswith(str(stored_data[0]))
    ]
    console = "\n".join(daemon.console)
    leaks += [f"{name} on the console channel" for name in [*secrets, PLANTED["dataset"]] if name in console]
    assert not leaks, leaks


def test_receipts_keep_settings_and_measures_that_merely_sound_like_secrets(planted: dict[str, object]) -> None:
    receipts = planted["receipts"]
    assert isinstance(receipts, Path)
    text = "\n".join(p.read_text() for p in receipts.rglob("*.md"))
    assert "token_level_loss" in text or "tokens_per_second" in text
    assert "token_level_loss: [redacted]" not in text and "tokens_per_second: [redacted]" not in text
    assert str(planted["root"]) not in text, "local paths become [local artifact: name]"


def test_every_file_of_the_home_is_private(planted: dict[str, object]) -> None:
    daemon = planted["daemon"]
    assert isinstance(daemon, RunningDaemon)
    exposed = [
        f"{path} is {oct(stat.S_IMODE(path.lstat().st_mode))}"
        for path in [daemon.home, *daemon.home.rglob("*")]
        if not path.is_symlink() and stat.S_IMODE(path.lstat().st_mode) & 0o077
    ]
    assert not exposed, exposed  # directories 0700, files 0600 (or tighter): group and others get nothing


def test_a_viewer_never_sees_the_token_in_the_path_of_a_webhook_sink(tmp_path: Path) -> None:
    """A sink stored before path tokens were refused: the ledger keeps its URL, every viewer sees it redacted."""
    token = PLANTED["sink_path"]
    url = f"https://discord.com/api/webhooks/1234567890123456789/{token}"
    home = tmp_path / "home"
    asyncio.run(_sink_stored_before_the_rule(home / "ledger.sqlite3", url))
    with running_daemon(home) as daemon, tenant(daemon, issue_token(daemon, "vic", "viewer")) as vic:
        sinks = vic.get("/v1/sinks")
        doctor = vic.get("/v1/doctor")
    assert sinks.status_code == 200 and doctor.status_code == 200, sinks.text + doctor.text
    assert [s["url"] for s in sinks.json()["sinks"]] == [
        "https://discord.com/api/webhooks/1234567890123456789/[redacted]"
    ]
    assert "discord.com/api/webhooks" in doctor.text
    assert token not in sinks.text and token not in doctor.text


async def _sink_stored_before_the_rule(ledger_path: Path, url: str) -> None:
    async with await Ledger.open(ledger_path) as ledger:
        await ledger.add_sink(
            Actor(actor_id="system:test"),
            "default",
            name="chat",
            url=url,
            secret_env="CHAT_SINK_SECRET",
            project_id=None,
            types=[],
        )
