"""Secrets at rest: a secret is shown once and never stored, and the home is private.

Issue 34, findings 3 (the ledger kept every issued token for replay) and 5 (secrets at rest), and its
acceptance: known secrets planted through every write path (API, CLI and its --config file, the Discord bot,
datasets, configs, a trainer's log, sink URLs and signing secrets, idempotency keys, correlation ids) are found
nowhere the daemon writes or sends: the ledger file and its WAL, backups, logs, run directories, receipts,
campaign reports, export bundles, the posts of its console channel and of Discord, or a sink's deliveries.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.client.specs import Actor
from bashgym.daemon.notices.sinks import sign
from bashgym.ledger.store import Ledger
from bashgym.trainers.tiny import build_tiny

from tests.e2e.bot.test_discord_bot import World, running_bot, text_of, world
from tests.e2e.daemon.test_operator import Receiver
from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.discord_standin import ALICE_ID, CHANNEL_ID
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
    "sink_signing": "sk-" + "Sg7" * 10,  # the signing secret of a live sink, in the daemon's environment
    "config_file": "sk-" + "Cg3" * 10,  # hf_repo_name of a CLI --config file: refused at the door
    "model_path": "ghp_" + "Lg4" * 12,  # in a model path a trainer would print: refused at the door
}
SINK_ENV = "RECEIVER_SINK_SECRET"
# Typed into Discord: a campaign spec attached to /campaign create, and the reason of /budget amend.
TYPED = {
    "campaign_title": "sk-" + "Bt1" * 10,
    "campaign_objective": "ghp_" + "Bo2" * 12,
    "budget_reason": "nvapi-" + "Br3" * 10,
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A daemon, a tiny run trained on a dataset with a secret in it, and every other plant, done once."""
    root = tmp_path_factory.mktemp("secrets")
    tiny = build_tiny(root / "tiny")
    env = {"HF_TOKEN": HF, SINK_ENV: PLANTED["sink_signing"], "BASHGYM_LOCAL_SLOTS": "1"}
    # The console channel and a live sink on loopback are checked too.
    with receiving() as receiver, running_daemon(root / "home", "--console-notices", env=env) as daemon:
        _add_sink(daemon, receiver.url)
        tokens = _issue_tokens(daemon)
        run_id = _train(daemon, tiny, root)
        refusals = _refused_at_the_door(daemon, tiny, root)
        _wait_until_the_sink_forwards(daemon)
        _plant_through_the_api(daemon, run_id)
        bundle, receipts = _export_curate_and_back_up(daemon, root)
        _wait_for_delivery(receiver, "annotation.added")
        yield {
            "daemon": daemon, "root": root, "tokens": tokens, "bundle": bundle, "receipts": receipts,
            "receiver": receiver, "refusals": refusals,
        }  # fmt: skip


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    """A loopback HTTP endpoint that takes every batch (2xx) and keeps its bytes."""
    receiver = Receiver([])
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def _add_sink(daemon: RunningDaemon, url: str) -> None:
    """A sink of every event, signed with a secret the daemon holds only in its environment (authority.manage)."""
    with daemon.client() as admin:
        added = admin.post("/v1/sinks", json={"name": "receiver", "url": url, "secret_env": SINK_ENV})
    assert added.status_code == 201 and added.json()["secret_present"] is True, added.text


def _wait_until_the_sink_forwards(daemon: RunningDaemon, timeout_s: float = 30) -> None:
    """A new sink starts at the head once the forwarder picks it up (within its sync interval): wait for that."""
    deadline = time.monotonic() + timeout_s
    with daemon.client() as admin:
        while not admin.get("/v1/consumers/sink.receiver/cursor").json()["updated_at"]:
            assert time.monotonic() < deadline, "the forwarder never picked the sink up"
            time.sleep(0.2)


def _wait_for_delivery(receiver: Receiver, event_type: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while event_type not in receiver.delivered():
        assert time.monotonic() < deadline, receiver.received
        time.sleep(0.2)


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
    # A --config file holds no secret here (_refused_at_the_door plants one in its Hub repository).
    config = {"max_steps": 2, "batch_size": 4, "max_seq_length": 96}
    (root / "config.json").write_text(json.dumps(config))
    planned = cli(
        daemon.env(), "training", "plan", "--strategy", "sft", "--model", str(tiny), "--dataset-path", str(data),
        "--config", str(root / "config.json"), "--tracking-context", str(root / "context.json"), "--json",
    )  # fmt: skip
    assert planned.code == 0, planned.stdout + planned.stderr
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


def _refused_at_the_door(daemon: RunningDaemon, tiny: Path, root: Path) -> list[str]:
    """A --config file whose hf_repo_name holds a secret (CLI plan and start), and a request whose model path
    does (API): a run keeps its settings as sent, so each is refused before anything is written. Answers what
    each refusal said."""
    # auto_push_hf is on, as a real push would be: a repository name is read only then.
    config = {"max_steps": 2, "batch_size": 4, "max_seq_length": 96, "auto_push_hf": True,
              "hf_repo_name": f"team/{PLANTED['config_file']}"}  # fmt: skip
    (root / "secret-config.json").write_text(json.dumps(config))
    said = []
    for verb in ("plan", "start"):
        refused = cli(
            daemon.env(), "training", verb, "--strategy", "sft", "--model", str(tiny), "--dataset-path",
            str(root / "rows.jsonl"), "--config", str(root / "secret-config.json"), "--tracking-context",
            str(root / "context.json"),
        )  # fmt: skip
        assert refused.code != 0, refused.stdout
        said.append(refused.stdout + refused.stderr)
    model = root / "models" / PLANTED["model_path"] / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    with daemon.client() as admin:
        context = json.loads((root / "context.json").read_text())
        body = training_request(tiny, root / "rows.jsonl", base_model=str(model), tracking_context=context)
        for route in ("/v1/training/plan", "/v1/training/start"):
            answer = admin.post(route, json=body)
            assert answer.status_code == 422, answer.text
            said.append(answer.text)
    return said


def _plant_through_the_api(daemon: RunningDaemon, run_id: str) -> None:
    researcher = issue_token(daemon, "erin", "researcher")
    with tenant(daemon, researcher) as erin:
        note = {"text": f"seen in the logs: {PLANTED['annotation']}", "run_id": run_id}
        noted = erin.post("/v1/projects/nightly/annotations", json=note)
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


def _scan(paths: list[Path], secrets: list[str]) -> list[tuple[str, Path]]:
    """Each (secret, file) where a file under `paths` holds a secret."""
    found = []
    for top in paths:
        for path in [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]:
            data = path.read_bytes()
            found += [(name, path) for name in secrets if name.encode() in data]
    return found


def _leaks(planted: dict[str, object], secrets: list[str]) -> list[tuple[str, str]]:
    """Each (secret, where) of the secrets found at rest (home, export bundle, receipts) or sent (the console
    channel, the sink's deliveries)."""
    daemon, receiver = planted["daemon"], planted["receiver"]
    assert isinstance(daemon, RunningDaemon) and isinstance(receiver, Receiver)
    everywhere = [daemon.home, planted["bundle"], planted["receipts"]]
    found = [(name, str(path)) for name, path in _scan(everywhere, secrets)]  # type: ignore[arg-type]
    console = "\n".join(daemon.console)
    found += [(name, "the console channel") for name in secrets if name in console]
    sent = b"".join(body + json.dumps(headers).encode() for _, headers, body in receiver.received)
    return found + [(name, "the sink's deliveries") for name in secrets if name.encode() in sent]


def test_no_planted_secret_is_stored_or_posted_anywhere(planted: dict[str, object]) -> None:
    daemon = planted["daemon"]
    assert isinstance(daemon, RunningDaemon)
    home = daemon.home
    # Scanned while the daemon holds the ledger open: the WAL is there, with the latest writes not yet checkpointed.
    wal = home / "ledger.sqlite3-wal"
    assert wal.is_file() and wal.stat().st_size > 0, sorted(p.name for p in home.iterdir())
    assert list((home / "backups").iterdir()) and list((home / "logs").iterdir()), "backups and logs are scanned"
    secrets = [HF, *planted["tokens"], *PLANTED.values()]  # type: ignore[misc]
    # The dataset's own copy in the content store is the user's data, kept as uploaded; nothing else holds it.
    stored_data = [
        p for p in (home / "artifacts").rglob("*") if p.is_file() and PLANTED["dataset"].encode() in p.read_bytes()
    ]
    assert len(stored_data) == 1, stored_data
    allowed = {PLANTED["dataset"]: {str(stored_data[0])}}
    leaks = [f"{name} in {where}" for name, where in _leaks(planted, secrets) if where not in allowed.get(name, set())]
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
    exposed = _exposed(daemon.home)
    assert not exposed, exposed  # directories 0700, files 0600 (or tighter): group and others get nothing


def _exposed(home: Path) -> list[str]:
    """What in the home group or others may read, write or enter."""
    return [
        f"{path} is {oct(stat.S_IMODE(path.lstat().st_mode))}"
        for path in [home, *home.rglob("*")]
        if not path.is_symlink() and stat.S_IMODE(path.lstat().st_mode) & 0o077
    ]


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


def test_a_request_holding_a_secret_is_refused_naming_the_field_not_the_secret(planted: dict[str, object]) -> None:
    said = planted["refusals"]
    assert isinstance(said, list) and len(said) == 4
    assert all("credential-shaped" in text for text in said), said
    assert all(PLANTED["config_file"] not in text and PLANTED["model_path"] not in text for text in said)
    assert "hf_repo_name" in said[0] and "base_model" in said[2]


def test_a_refused_secret_is_stored_nowhere(planted: dict[str, object]) -> None:
    leaks = _leaks(planted, [PLANTED["config_file"], PLANTED["model_path"]])
    assert not leaks, [where for _, where in leaks]


def test_a_sink_gets_the_events_but_none_of_the_planted_secrets(planted: dict[str, object]) -> None:
    receiver, tokens = planted["receiver"], planted["tokens"]
    assert isinstance(receiver, Receiver) and isinstance(tokens, list)
    bodies = [body for status, _, body in receiver.received if status == 200]
    events = [e for body in bodies for e in json.loads(body)["events"]]
    noted = [e for e in events if e["event_type"] == "annotation.added"]
    assert len(noted) == 1 and "seen in the logs: [redacted]" in json.dumps(noted[0]), noted
    signature = receiver.received[-1][1]["X-BashGym-Signature"]
    assert signature == sign(PLANTED["sink_signing"], receiver.received[-1][2]), "signed with the planted secret"
    sent = b"".join(body + json.dumps(headers).encode() for _, headers, body in receiver.received)
    leaks = [name for name in [HF, *tokens, *PLANTED.values()] if name.encode() in sent]
    assert not leaks, leaks


def test_receipts_written_outside_the_home_are_the_users_alone(planted: dict[str, object]) -> None:
    """Receipts go to a root the user names, for the team's knowledge base: the CLI (not the daemon) makes its
    folders with the user's umask, and writes each receipt through a private temporary file, so 0600."""
    receipts = planted["receipts"]
    assert isinstance(receipts, Path)
    files = [p for p in receipts.rglob("*") if p.is_file()]
    assert files, "curate wrote receipts"
    loose = [f"{p} is {oct(stat.S_IMODE(p.stat().st_mode))}" for p in files if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert not loose, loose


@pytest.mark.anyio
@pytest.mark.timeout(180)
async def test_secrets_typed_into_discord_are_stored_reported_and_posted_nowhere(tmp_path: Path) -> None:
    """The real bot against the Discord stand-in: a campaign spec and a budget reason carry secrets; the campaign
    report (md, json, png) is drawn and posted; none of it holds a secret, nor does anything the bot sent."""
    spec = {
        "campaign_id": "bash-q4", "title": f"Better bash {TYPED['campaign_title']}",
        "objective": f"Raise pass@1 {TYPED['campaign_objective']}", "suite_id": "bash-tasks-v1",
        "starting_model_version_id": "tiny-v1", "dataset_version_ids": ["traces-v1"],
        "base_recipe": {"strategy": "sft", "max_steps": 4}, "budget": {"runs": 2}, "stop_rules": {"max_iterations": 2},
    }  # fmt: skip
    async with world(tmp_path) as w, running_bot(w):
        async with w.admin() as admin:
            assert (await admin.put("/v1/projects/nightly/channel", json={"channel_id": str(CHANNEL_ID)})).is_success
        created = await w.slash("campaign create", project="nightly", spec=("spec.json", json.dumps(spec).encode()))
        assert "Campaign created" in text_of(created), text_of(created)
        shown = await w.slash("campaign show", project="nightly", campaign="bash-q4")
        assert "Better bash [redacted]" in text_of(shown), text_of(shown)
        assert "Report" in text_of(await w.slash("campaign report", project="nightly", campaign="bash-q4"))
        await w.standin.wait_for_message(CHANNEL_ID, lambda m: "Report: Campaign bash-q4" in text_of(m), timeout_s=30)
        prompt = await w.slash("budget amend", project="nightly", reason=f"more {TYPED['budget_reason']}", runs=1)
        assert "nightly: more [redacted]" in text_of(prompt), "the prompt, posted in the channel, shows no secret"
        confirmed = await w.standin.click(prompt, "confirm", user_id=ALICE_ID)
        await w.standin.wait_until(lambda: confirmed.followup_ids or None, timeout_s=30, what="the confirmed answer")
        await w.standin.wait_for_message(CHANNEL_ID, lambda m: "Budget amended: project" in text_of(m), timeout_s=30)
        # Scanned while the daemon runs: its ledger's WAL is there.
        assert (w.daemon.home / "ledger.sqlite3-wal").is_file()
        stored = await asyncio.to_thread(_scan, [w.daemon.home], list(TYPED.values()))
        ledger = await asyncio.to_thread(_ledger_bytes, w.daemon.home)
        exposed = await asyncio.to_thread(_exposed, w.daemon.home)
        reports = await asyncio.to_thread(_report_files, w.daemon.home / "reports")
    assert {".md", ".json", ".png"} <= {Path(name).suffix for name in reports}, sorted(reports)
    assert "Better bash [redacted]" in "".join(t for n, t in reports.items() if n.endswith(".md")), "the report's title"
    assert b"more [redacted]" in ledger, "the budget reason reached the ledger, redacted"
    assert not exposed, exposed  # the reports too: directories 0700, files 0600
    leaks = [f"{name} in {path}" for name, path in stored]
    leaks += [f"{name} sent to Discord" for name in TYPED.values() if name.encode() in _sent_to_discord(w)]
    assert not leaks, leaks


def _ledger_bytes(home: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(home.glob("ledger.sqlite3*")))


def _report_files(reports: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in reports.rglob("*") if p.is_file()}


def _sent_to_discord(w: World) -> bytes:
    """Every byte the bot sent Discord: requests (messages, interaction answers, edits, files) and gateway frames."""
    sent = [json.dumps([r.path, r.query, r.json]).encode() + b"".join(part.data for part in r.parts)
            for r in w.standin.requests]  # fmt: skip
    return b"".join(sent) + json.dumps(w.standin.gateway_frames).encode()
