"""The bad-input catalog (issue 12): one table of bad inputs per surface (API, CLI, slash commands, dataset
files, spec files). Each case names what was sent, the 4xx (or exit code) it must get and the useful part of
the message (the line, the suggested field, the limit, what to do), and leaves the ledger as it was: the row
count of every table and the last cursor are compared before and after."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.bot.app import BashGymBot
from bashgym.cli import main as bashgym_cli

from tests.support.discord_standin import (
    ALICE_ID,
    BOB_ID,
    EPHEMERAL,
    FAKE_TOKEN,
    GUILD_ID,
    DiscordStandIn,
    bot_settings_for,
    discord_standin,
    running_client,
)
from tests.support.factories import tracking_context
from tests.support.helpers import SUITE_ROOT, RunningDaemon, running_daemon, start_daemon

GUILD = "111111111111111111"
SQL = "x' OR '1'='1; DROP TABLE events;--"
MAX_BODY = 65536
ENV = {
    "BASHGYM_MAX_BODY_BYTES": str(MAX_BODY),
    "BASHGYM_RATE_LIMIT_BURST": "10000",
    "BASHGYM_RATE_LIMIT_PER_MINUTE": "10000",
    "BASHGYM_DISCORD_GUILD_IDS": GUILD,
}

# -- the ledger guard every case runs under ---------------------------------------------------------


def ledger_snapshot(daemon: RunningDaemon) -> dict[str, Any]:
    """Row counts of every table (read-only connection) and the last cursor the daemon reports."""
    uri = f"file:{daemon.home / 'ledger.sqlite3'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = {name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}
    with daemon.client() as admin:
        last_cursor = admin.get("/v1/ledger/health").json()["last_cursor"]
    return {"rows": rows, "last_cursor": last_cursor}


def settled_snapshot(daemon: RunningDaemon) -> dict[str, Any]:
    """A snapshot that holds still: the daemon's own consumers (console channel, bot notifier) may still be
    acknowledging the setup's events."""
    previous = ledger_snapshot(daemon)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.05)
        current = ledger_snapshot(daemon)
        if current == previous:
            return current
        previous = current
    return previous


@pytest.fixture
def ledger_unchanged() -> Callable[[RunningDaemon], contextlib.AbstractContextManager[None]]:
    """`with ledger_unchanged(daemon): ...` fails when the block changed a row count or the last cursor."""

    @contextlib.contextmanager
    def guard(daemon: RunningDaemon) -> Iterator[None]:
        before = settled_snapshot(daemon)
        yield
        after = ledger_snapshot(daemon)
        assert after == before, f"the ledger changed: {before} -> {after}"

    return guard


def error_of(answer: httpx.Response) -> str:
    error = answer.json()["error"]
    return f"{error['message']} {error.get('hint', '')}"


# -- API ------------------------------------------------------------------------------------------


@dataclass
class ApiWorld:
    daemon: RunningDaemon
    tmp: Path
    tokens: dict[str, str]
    run_id: str
    attempt_id: str
    blob_sha256: str
    malformed_jsonl: Path


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiWorld]:
    tmp = tmp_path_factory.mktemp("bad-api")
    home = tmp / "home"
    with running_daemon(home, env=ENV) as first, first.client() as admin:
        admin.post("/v1/projects", json={"project_id": "cat", "name": "Catalog"}).raise_for_status()
        context = tracking_context(project_id="cat", project_display_name="Catalog")
        run = admin.post("/v1/runs", json={"method": "sft", "tracking_context": context})
        run.raise_for_status()
        tokens = {}
        for name, body in {
            "lead": {"actor_id": "mallory", "profile": "lead"},
            "bot": {"actor_id": "discord-bot", "capabilities": ["delegate.discord"]},
            "revoked": {"actor_id": "gone", "profile": "viewer"},
            "expired": {"actor_id": "temp", "profile": "viewer", "expires_in_s": 3600},
        }.items():
            issued = admin.post("/v1/auth/tokens", json=body).json()
            tokens[name], tokens[f"{name}_id"] = issued["token"], issued["token_id"]
        admin.post(f"/v1/auth/tokens/{tokens['revoked_id']}/revoke").raise_for_status()
        first_write = admin.post(
            "/v1/projects/cat/annotations", json={"text": "first"}, headers={"Idempotency-Key": "k1"}
        )
        first_write.raise_for_status()
        blob = admin.put("/v1/blobs", params={"project": "cat"}, content=b'{"text": "ls"}\n').json()
        admin.post("/v1/ledger/backup", params={"to": "taken.sqlite3"}).raise_for_status()
    # Expiry is checked against the stored row; a restart drops the daemon's cache of the rows it wrote.
    with contextlib.closing(sqlite3.connect(home / "ledger.sqlite3")) as conn, conn:
        conn.execute(
            "UPDATE api_tokens SET expires_at = '2000-01-01T00:00:00Z' WHERE token_id = ?", (tokens["expired_id"],)
        )
    malformed = tmp / "data.jsonl"
    malformed.write_text('{"text": "ok"}\n{"text": "ok"}\n{"text": \n')
    with running_daemon(home, env=ENV) as daemon:
        record = run.json()["record"]
        yield ApiWorld(daemon, tmp, tokens, record["run_id"], f"{record['run_id']}.a1", blob["sha256"], malformed)


@dataclass(frozen=True)
class Api:
    """One bad request: method and path, what goes with it, the status and a fragment of the message."""

    id: str
    method: str
    path: str
    status: int
    says: str
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    token: str = "admin"  # or a key of ApiWorld.tokens, or "" for none


def jsonish(text: str) -> bytes:
    return text.encode()


def point_with(value: str, *, step: int = 1) -> bytes:
    """A metric batch of one point whose value is written as given (NaN, -Infinity, 1e400 are JSON to Python)."""
    point = f'{{"metric": "loss", "step": {step}, "value": {value}}}'
    return jsonish(f'{{"run_id": "{{run}}", "attempt_id": "{{attempt}}", "points": [{point}]}}')


P = "/v1/projects/cat"
# Inside the suite's data root (tests/support/helpers.py), and never read by a plan: the checks after it are the cases'.
PLAN = {"strategy": "sft", "base_model": "m", "dataset_path": f"{SUITE_ROOT}/bashgym-catalog/train.jsonl"}


def as_discord(user: str = "333", guild: str = GUILD) -> dict[str, str]:
    return {"X-Discord-User-Id": user, "X-Discord-Role-Ids": "", "X-Discord-Guild-Id": guild}


API_CASES = [
    # malformed JSON names the line
    Api("malformed-json-names-the-line", "POST", "/v1/projects", 422, "line 2",
        content=jsonish('{"project_id": "x",\n "name": }')),
    Api("malformed-metric-batch-names-the-line", "POST", f"{P}/metrics", 422, "line 3",
        content=jsonish('{"run_id": "r",\n\n "points": [')),
    Api("malformed-training-request-names-the-line", "POST", "/v1/training/plan", 422, "line 2",
        content=jsonish('{"strategy": "sft",\n "x": }')),
    Api("body-not-utf8-is-invalid-json", "POST", "/v1/projects", 422, "not UTF-8",
        content=b'{"project_id": "\xff\xfe"}', headers={"Content-Type": "application/json"}),
    # wrong field names come with the closest valid one
    Api("unknown-field-suggests", "POST", "/v1/projects", 422, "did you mean `name`?",
        json={"project_id": "t1", "nmae": "x", "name": "T"}),
    Api("misspelt-required-field-suggests-first", "POST", "/v1/projects", 422,
        "problems in the request: `nmae` is not a field; did you mean `name`? `name` is required.",
        json={"project_id": "t1", "nmae": "T"}),
    Api("misspelt-budget-field-suggests", "POST", f"{P}/budget/amend", 422, "did you mean `runs`?",
        json={"run": 1, "reason": "more"}),
    Api("misspelt-training-field-suggests", "POST", "/v1/training/plan", 422, "did you mean `num_epochs`?",
        json={**PLAN, "epochs": 3}),
    # wrong types and out-of-range values
    Api("wrong-type-integer", "POST", f"{P}/budget/amend", 422, "`runs`: Input should be a valid integer",
        json={"runs": "many", "reason": "more"}),
    Api("wrong-type-body-array", "POST", f"{P}/annotations", 422, "valid dictionary", json=[1, 2]),
    Api("wrong-type-training-request-array", "POST", "/v1/training/plan", 422, "is a JSON object", json=[1]),
    Api("page-limit-out-of-range", "GET", f"{P}/events", 422, "between 1 and 1000", params={"limit": 5000}),
    Api("long-poll-out-of-range", "GET", f"{P}/events", 422, "between 0 and 30", params={"wait_s": 31}),
    Api("checkpoint-limit-out-of-range", "POST", "/v1/training/plan", 422, "less than or equal to 20",
        json={**PLAN, "checkpoint_limit": 999}),
    Api("cursor-beyond-64-bits", "GET", f"{P}/events", 422, "integers must lie between",
        params={"after_cursor": 10**30}),
    Api("budget-runs-beyond-the-bound", "POST", f"{P}/budget/amend", 422, "less than or equal to 1000000",
        json={"runs": 2**70, "reason": "more"}),
    Api("consumer-cursor-past-the-end", "PUT", "/v1/consumers/catalog/cursor", 422, "is past the last event",
        json={"cursor": 10**9}),
    Api("unknown-campaign-action", "POST", f"{P}/campaigns/c1/explode", 422, "'start', 'pause', 'resume' or 'cancel'",
        json={"expected_version": 1}),
    # oversized bodies
    Api("oversized-body-is-413", "POST", f"{P}/annotations", 413, f"the limit is {MAX_BODY}",
        json={"text": "x" * 100_000}),
    # path traversal in dataset paths, artifact names, receipt roots, device work dirs
    Api("relative-dataset-path", "POST", "/v1/training/start", 403, "climbs out with `..`",
        json={**PLAN, "dataset_path": "../../etc/passwd"}),
    Api("dataset-path-outside-the-roots", "POST", "/v1/training/start", 403, "outside the directories",
        json={**PLAN, "dataset_path": "/etc/passwd"}),
    Api("dataset-version-that-climbs", "POST", "/v1/training/start", 404, "No dataset version '../x'",
        json={"strategy": "sft", "base_model": "m"}, params={"dataset_version": "../x", "dataset_project": "cat"}),
    Api("blob-file-name-with-directories", "POST", f"{P}/dataset-versions/from-blob", 422, "not a bare file name",
        json={"dataset_id": "d", "dataset_version_id": "d1", "sha256": "{blob}", "filename": "../../evil.jsonl"}),
    Api("report-file-name-that-climbs", "GET", f"{P}/reports/r1/..%2F..%2Fledger.sqlite3", 404, "No route"),
    Api("model-import-relative-dir", "POST", f"{P}/model-versions/import", 403, "climbs out with `..`",
        json={"from_dir": "../../etc"}),
    Api("model-export-relative-target", "POST", f"{P}/model-versions/nope/export", 403, "climbs out with `..`",
        json={"to": "../out"}),
    Api("model-export-of-a-missing-version", "POST", f"{P}/model-versions/nope/export", 404,
        "No model version 'nope'", json={"to": "out"}),
    Api("backup-to-relative-path", "POST", "/v1/ledger/backup", 403, "climbs out with `..`",
        params={"to": "../ledger-copy.sqlite3"}),
    Api("backup-over-the-ledger", "POST", "/v1/ledger/backup", 403, "outside the directories",
        params={"to": "{home}/ledger.sqlite3"}),
    Api("backup-over-an-earlier-backup", "POST", "/v1/ledger/backup", 422, "never overwrites",
        params={"to": "taken.sqlite3"}),
    Api("device-work-dir-climbs", "POST", "/v1/devices", 422, "climbs out with `..`",
        json={"device_id": "gpu1", "host": "gpu1.lan", "user": "u", "key_path": "/k", "work_dir": "../../etc"}),
    # device groups: ids, member counts, duplicates, unknown members, ports, addresses
    Api("device-group-id-with-control-character", "POST", "/v1/device-groups", 422, "is not a valid identifier",
        json={"group_id": "pair\x1b", "members": ["gpu1", "gpu2"]}),
    Api("device-group-id-in-path-with-newline", "GET", "/v1/device-groups/a%0Ab", 422, "is not a valid identifier"),
    Api("device-group-of-one-member", "POST", "/v1/device-groups", 422, "at least 2 items",
        json={"group_id": "pair", "members": ["gpu1"]}),
    Api("device-group-of-65-members", "POST", "/v1/device-groups", 422, "at most 64 items",
        json={"group_id": "pair", "members": [f"gpu{i}" for i in range(65)]}),
    Api("device-group-member-twice", "POST", "/v1/device-groups", 422, "device 'gpu1' is listed twice",
        json={"group_id": "pair", "members": ["gpu1", "gpu2", "gpu1"]}),
    Api("device-group-of-unknown-devices", "POST", "/v1/device-groups", 422, "bashgym device add gpu1",
        json={"group_id": "pair", "members": ["gpu1", "gpu2"]}),
    Api("device-group-port-below-1024", "POST", "/v1/device-groups", 422, "greater than or equal to 1024",
        json={"group_id": "pair", "members": ["gpu1", "gpu2"], "main_process_port": 80}),
    Api("device-group-port-above-65535", "POST", "/v1/device-groups", 422, "less than or equal to 65535",
        json={"group_id": "pair", "members": ["gpu1", "gpu2"], "main_process_port": 65536}),
    Api("device-group-address-with-shell", "POST", "/v1/device-groups", 422, "`main_process_ip`",
        json={"group_id": "pair", "members": ["gpu1", "gpu2"], "main_process_ip": "gpu1;reboot"}),
    Api("device-group-unknown-preflight", "POST", "/v1/device-groups/nope/preflight", 404,
        "No device group 'nope'"),
    # control characters and unicode tricks in identifiers
    Api("identifier-rtl-override", "POST", "/v1/projects", 422, "is not a valid identifier",
        json={"project_id": "cat\u202egpj", "name": "x"}),
    Api("identifier-fullwidth-letters", "POST", "/v1/projects", 422, "is not a valid identifier",
        json={"project_id": "\uff43\uff41\uff54", "name": "x"}),
    Api("identifier-zero-width-space", "POST", "/v1/projects", 422, "is not a valid identifier",
        json={"project_id": "cat\u200b", "name": "x"}),
    Api("identifier-nul", "POST", "/v1/projects", 422, "is not a valid identifier",
        json={"project_id": "a\x00b", "name": "x"}),
    Api("identifier-newline-in-path", "PUT", "/v1/consumers/a%0Ab/cursor", 422, "is not a valid identifier",
        json={"cursor": 1}),
    Api("workspace-with-control-character", "GET", "/v1/projects", 422, "workspace 'de\\x1bfault' is not",
        params={"workspace": "de\x1bfault"}),
    Api("idempotency-key-too-long", "POST", f"{P}/annotations", 422, "1..200 printable ASCII",
        json={"text": "x"}, headers={"Idempotency-Key": "k" * 500}),
    # SQL metacharacters in every filter
    *[
        Api(f"sql-in-{name}", "GET", path, 422, says, params=params)
        for name, path, params, says in [
            ("runs-status", f"{P}/runs", {"status": SQL}, "is not a run state"),
            ("runs-method", f"{P}/runs", {"method": SQL}, "method"),
            ("runs-experiment", f"{P}/runs", {"experiment": SQL}, "experiment"),
            ("runs-before", f"{P}/runs", {"before": SQL}, "is not an ISO 8601"),
            ("events-type", f"{P}/events", {"type": SQL}, "type"),
            ("workspace-events-type", "/v1/events", {"type": SQL}, "type"),
            ("evaluations-suite", f"{P}/evaluations", {"suite": SQL}, "suite"),
            ("trend-metric", f"{P}/trend", {"metric": SQL}, "is not a metric name"),
            ("trend-run", f"{P}/trend", {"metric": "train.loss", "run": SQL}, "run"),
            ("compare-run", f"{P}/compare", {"run": [SQL, "r2"]}, "run"),
            ("compare-suite", f"{P}/compare", {"run": ["r1", "r2"], "suite": SQL}, "suite"),
            ("audit-actor", "/v1/auth/audit", {"actor": SQL}, "actor"),
            ("audit-since", "/v1/auth/audit", {"since": SQL}, "is not an ISO 8601"),
            ("budget-scope", f"{P}/budget", {"scope": SQL}, "is not a budget scope"),
            ("workspace", "/v1/projects", {"workspace": SQL}, "is not a valid identifier"),
        ]
    ],
    # NaN and infinite metrics
    Api("metric-nan", "POST", f"{P}/metrics", 422, "finite number",
        content=point_with("NaN")),
    Api("metric-infinity", "POST", f"{P}/metrics", 422, "finite number",
        content=point_with("-Infinity")),
    Api("metric-overflowing-float", "POST", f"{P}/metrics", 422, "finite number",
        content=point_with("1e400")),
    Api("metric-step-beyond-64-bits", "POST", f"{P}/metrics", 422, "integers must lie between",
        content=point_with("1.0", step=2**70)),
    Api("eval-metric-nan", "POST", f"{P}/eval-results", 422, "must be finite",
        content=jsonish('{"suite_id": "s", "run_id": "{run}", "metrics": {"pass@1": NaN}}')),
    Api("budget-hours-nan", "POST", f"{P}/budget/amend", 422, "finite number",
        content=jsonish('{"gpu_hours": NaN, "reason": "more"}')),
    Api("learning-rate-nan", "POST", "/v1/training/plan", 422, "`learning_rate`: Input should be a finite number",
        content=jsonish('{"strategy": "sft", "base_model": "m", "dataset_path": "/d.jsonl", "learning_rate": NaN}')),
    # unknown strategies and targets
    Api("unknown-strategy", "POST", "/v1/training/plan", 422, "use one of sft, dpo, grpo",
        json={**PLAN, "strategy": "ppo"}),
    Api("target-that-is-no-lane", "POST", "/v1/training/plan", 422,
        "bashgym compute plan --engine skypilot", json={**PLAN, "compute_target": "skypilot"}),
    Api("ssh-target-of-an-unknown-device", "POST", "/v1/training/start", 422, "No device 'nowhere'",
        json={**PLAN, "compute_target": "ssh:nowhere"}),
    # scale-out settings that cannot run
    Api("group-target-of-an-unknown-group", "POST", "/v1/training/start", 422, "No device group 'nowhere'",
        json={**PLAN, "compute_target": "ssh-group:nowhere"}),
    Api("processes-that-do-not-split-over-machines", "POST", "/v1/training/plan", 422, "does not split evenly",
        json={**PLAN, "compute_target": "ssh-group:pair", "num_machines": 2, "num_processes": 3}),
    Api("several-machines-without-a-group", "POST", "/v1/training/plan", 422,
        "needs compute_target `ssh-group:<group_id>`", json={**PLAN, "num_machines": 2, "num_processes": 2}),
    Api("mixed-precision-against-bf16", "POST", "/v1/training/plan", 422, "contradicts bf16 false",
        json={**PLAN, "mixed_precision": "bf16", "bf16": False}),
    Api("fsdp-where-the-trainer-has-no-gpu", "POST", "/v1/training/start", 422, "fsdp shards over CUDA GPUs",
        json={**PLAN, "num_processes": 2, "distributed_strategy": "fsdp"}),
    # idempotency-key reuse with another body
    Api("idempotency-key-reused-with-another-body", "POST", f"{P}/annotations", 409,
        "was used with a different request",
        json={"text": "second"}, headers={"Idempotency-Key": "k1"}),
    # expired and revoked tokens, forged Discord delegation
    Api("no-token", "GET", "/v1/projects", 401, "needs a bearer token", token=""),
    Api("unknown-token", "GET", "/v1/projects", 401, "not known", token="bgy_not-a-token"),
    Api("revoked-token", "GET", "/v1/projects", 401, "revoked", token="revoked"),
    Api("expired-token", "GET", "/v1/projects", 401, "expired", token="expired"),
    Api("revoked-token-writing", "POST", "/v1/projects", 401, "revoked", json={"project_id": "r", "name": "R"},
        token="revoked"),
    Api("forged-delegation-from-a-non-bot-token", "POST", "/v1/projects", 403, "delegate.discord",
        json={"project_id": "forged", "name": "F"}, headers=as_discord(), token="lead"),
    Api("delegation-for-a-user-without-grants", "POST", "/v1/projects", 403, "discord:333 lacks the capability",
        json={"project_id": "forged", "name": "F"}, headers=as_discord(), token="bot"),
    Api("delegation-from-a-foreign-guild", "GET", "/v1/projects", 403, "guild 999",
        headers=as_discord(guild="999"), token="bot"),
    Api("delegate-capability-granted-to-a-person", "POST", "/v1/authority/grants", 422, "belongs to the bot's token",
        json={"subject_kind": "user", "subject_id": "42", "capabilities": ["delegate.discord"]}),
    Api("unknown-route-names-the-path", "GET", "/v1/no-such-thing", 404, "/v1/no-such-thing"),
]  # fmt: skip


def _filled(value: Any, world: ApiWorld) -> Any:
    """Put the world's ids into a case's text: {run}, {attempt}, {blob}, {home}."""
    if isinstance(value, str):
        return (
            value.replace("{run}", world.run_id)
            .replace("{attempt}", world.attempt_id)
            .replace("{blob}", world.blob_sha256)
            .replace("{home}", str(world.daemon.home))
        )
    if isinstance(value, dict):
        return {k: _filled(v, world) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, world) for v in value]
    return value


@pytest.mark.parametrize("case", API_CASES, ids=[c.id for c in API_CASES])
def test_api_refuses_bad_input_with_a_useful_4xx(api: ApiWorld, case: Api, ledger_unchanged: Any) -> None:
    token = {"admin": api.daemon.token, "": None}.get(case.token, api.tokens.get(case.token, case.token))
    headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **case.headers}
    if case.content is not None:
        headers.setdefault("Content-Type", "application/json")
    with ledger_unchanged(api.daemon), httpx.Client(base_url=api.daemon.url, timeout=30) as client:
        answer = client.request(
            case.method,
            case.path,
            json=_filled(case.json, api) if case.content is None else None,
            content=_filled(case.content.decode(errors="surrogateescape"), api).encode(errors="surrogateescape")
            if case.content is not None
            else None,
            params=_filled(case.params, api),
            headers=headers,
        )
    assert answer.status_code == case.status, answer.text
    assert case.says in error_of(answer), answer.text


# -- CLI, dataset files, spec files: the real `bashgym` entry point, in-process ----------------------


@dataclass
class CliWorld:
    daemon: RunningDaemon
    tmp: Path
    revoked_token: str

    def env(self) -> dict[str, str]:
        return {"BASHGYM_HOME": str(self.daemon.home), "BASHGYM_API": self.daemon.url}


@pytest.fixture(scope="module")
def cli_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliWorld]:
    tmp = tmp_path_factory.mktemp("bad-cli")
    with running_daemon(tmp / "home", env=ENV) as daemon, daemon.client() as admin:
        admin.post("/v1/projects", json={"project_id": "cat", "name": "Catalog"}).raise_for_status()
        issued = admin.post("/v1/auth/tokens", json={"actor_id": "gone", "profile": "viewer"}).json()
        admin.post(f"/v1/auth/tokens/{issued['token_id']}/revoke").raise_for_status()
        spec = {**CAMPAIGN, "campaign_id": "c1"}
        admin.post("/v1/projects/cat/campaigns", json=spec).raise_for_status()
        yield CliWorld(daemon, tmp, issued["token"])


@dataclass(frozen=True)
class Cli:
    """One bad command line: its arguments (files named {name} are written from `files` first), the exit code
    and a fragment of what it prints."""

    id: str
    argv: tuple[str, ...]
    code: int
    says: str
    files: dict[str, str | bytes] = field(default_factory=dict)


def run_cli(world: CliWorld, case: Cli, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    folder = world.tmp / case.id
    folder.mkdir(exist_ok=True)
    (folder / "train.jsonl").write_text(TRAIN_JSONL + "\n")
    for name, text in case.files.items():
        target = folder / name
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
    argv = [a.replace("{dir}", str(folder)).replace("{revoked}", world.revoked_token) for a in case.argv]
    try:
        code = bashgym_cli.run(argv, world.env())
    except SystemExit as exited:  # --help and --version exit; usage errors return 2
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def check_cli(world: CliWorld, case: Cli, capsys: pytest.CaptureFixture[str], guard: Any) -> None:
    with guard(world.daemon):
        code, printed = run_cli(world, case, capsys)
    assert code == case.code, printed
    assert case.says in printed, printed


CAMPAIGN: dict[str, Any] = {
    "campaign_id": "c2",
    "title": "Better bash",
    "objective": "Raise pass@1.",
    "suite_id": "bash-tasks-v1",
    "starting_model_version_id": "tiny-v1",
    "dataset_version_ids": ["traces-v1"],
    "base_recipe": {"strategy": "sft", "max_steps": 4},
    "budget": {"runs": 2},
    "stop_rules": {"max_iterations": 2},
}
PLAN_ARGS = ("training", "plan", "--strategy", "sft", "--model", "org/model", "--dataset-path", "{dir}/train.jsonl")
# Every case's folder holds a valid SFT file: the CLI checks and uploads --dataset-path before the daemon sees the rest.
TRAIN_JSONL = json.dumps({"messages": [{"role": "user", "content": "ls"}, {"role": "assistant", "content": "ls"}]})


def spec_file(**changes: Any) -> str:
    spec = {**CAMPAIGN, **changes}
    return json.dumps({k: v for k, v in spec.items() if v is not None}, indent=1)


CLI_CASES = [
    Cli("identifier-rtl-override", ("project", "create", "--id", "cat\u202egpj", "--name", "x"), 7,
        "is not a valid identifier"),
    Cli("identifier-that-climbs", ("project", "create", "--id", "../etc", "--name", "x"), 7,
        "is not a valid identifier"),
    Cli("unknown-strategy-is-a-usage-error", ("training", "plan", "--strategy", "ppo", "--model", "m",
        "--dataset-path", "/d.jsonl"), 2, "invalid choice: 'ppo'"),
    Cli("target-that-is-no-lane", (*PLAN_ARGS, "--compute-target", "hf-jobs"), 7, "is refused"),
    Cli("checkpoint-limit-out-of-range", (*PLAN_ARGS, "--checkpoint-limit", "99"), 7, "less than or equal to 20"),
    Cli("sql-in-run-status-filter", ("ledger", "runs", "--project", "cat", "--status", SQL), 7,
        "is not a run state"),
    Cli("sql-in-trend-metric", ("ledger", "trend", "--project", "cat", "--metric", SQL), 7, "is not a metric name"),
    Cli("page-limit-out-of-range", ("ledger", "events", "--project", "cat", "--limit", "0"), 7,
        "between 1 and 1000"),
    Cli("budget-runs-beyond-the-bound", ("budget", "amend", "--project", "cat", "--runs", str(2**70), "--reason",
        "more"), 7, "less than or equal to 1000000"),
    Cli("revoked-token", ("auth", "whoami", "--token", "{revoked}"), 3, "revoked"),
    Cli("unknown-token", ("project", "list", "--token", "bgy_not-a-token"), 3, "not known"),
    Cli("device-work-dir-climbs", ("device", "add", "gpu1", "--host", "gpu1.lan", "--user", "u", "--key-path",
        "/k", "--work-dir", "../../etc"), 7, "climbs out with `..`"),
    Cli("device-group-of-one-member", ("device", "group", "create", "pair", "--device", "gpu1"), 7,
        "at least 2 items"),
    Cli("device-group-port-out-of-range", ("device", "group", "create", "pair", "--device", "gpu1", "--device",
        "gpu2", "--main-port", "70000"), 7, "less than or equal to 65535"),
    Cli("receipt-entity-that-climbs", ("curate", "receipt", "{dir}/r.json", "--root", "{dir}/kb"), 7,
        "cannot name a receipt file",
        files={"r.json": json.dumps({"kind": "run", "workspace_id": "default", "project_id": "cat",
                                      "entity_id": "../../../etc/cron.d/x", "title": "T"})}),
    Cli("receipt-workspace-that-climbs", ("curate", "receipt", "{dir}/r.json", "--root", "{dir}/kb"), 7,
        "cannot name a receipt file",
        files={"r.json": json.dumps({"kind": "run", "workspace_id": "..", "project_id": "cat",
                                      "entity_id": "r1", "title": "T"})}),
    Cli("backup-outside-the-backup-directory", ("ledger", "backup", "--to", "{dir}/exists.sqlite3"), 4,
        "outside the directories this daemon may use", files={"exists.sqlite3": "x"}),
    Cli("model-import-from-a-file", ("model", "import", "{dir}/f", "--project", "cat"), 7, "is not a directory",
        files={"f": "x"}),
]  # fmt: skip


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_refuses_bad_input_with_a_useful_exit(
    cli_world: CliWorld, case: Cli, capsys: pytest.CaptureFixture[str], ledger_unchanged: Any
) -> None:
    check_cli(cli_world, case, capsys, ledger_unchanged)


MALFORMED_JSONL = '{"text": "ok"}\n{"text": "ok"}\n{"text": \n'
CHAT = [{"role": "user", "content": "list files"}, {"role": "assistant", "content": "ls"}]

DATASET_CASES = [
    Cli("malformed-jsonl-names-the-line", ("training", "validate", "--strategy", "sft", "--dataset",
        "{dir}/data.jsonl"), 7, "data.jsonl:3: Not valid JSON", files={"data.jsonl": MALFORMED_JSONL}),
    Cli("row-that-is-not-an-object", ("training", "validate", "--strategy", "sft", "--dataset", "{dir}/data.jsonl"),
        7, "data.jsonl:2", files={"data.jsonl": '{"text": "ok"}\n[1, 2]\n'}),
    Cli("row-that-is-not-utf8", ("training", "validate", "--strategy", "sft", "--dataset", "{dir}/data.jsonl"),
        7, "data.jsonl:2", files={"data.jsonl": b'{"text": "ok"}\n{"text": "\xff"}\n'}),
    Cli("empty-file", ("training", "validate", "--strategy", "sft", "--dataset", "{dir}/data.jsonl"), 7,
        "empty_file", files={"data.jsonl": "\n\n"}),
    Cli("misspelt-row-field", ("training", "validate", "--strategy", "sft", "--dataset", "{dir}/data.jsonl"), 7,
        "data.jsonl:1", files={"data.jsonl": json.dumps({"mesages": CHAT}) + "\n"}),
    Cli("identical-preference-pair", ("training", "validate", "--strategy", "dpo", "--dataset", "{dir}/data.jsonl"),
        7, "data.jsonl:1 rejected", files={"data.jsonl": '{"prompt": "p", "chosen": "a", "rejected": "a"}\n'}),
    Cli("nan-confidence-in-a-row", ("training", "validate", "--strategy", "session_distillation", "--dataset",
        "{dir}/data.jsonl"), 7, "data.jsonl:1",
        files={"data.jsonl": '{"record_id": "r", "reader_confidence": NaN}\n'}),
    Cli("launch-on-malformed-jsonl", ("training", "start", "--strategy", "sft", "--model", "org/model",
        "--dataset-path", "{dir}/data.jsonl"), 7, "data.jsonl:3: Not valid JSON",
        files={"data.jsonl": MALFORMED_JSONL}),
    Cli("launch-on-a-missing-file", ("training", "start", "--strategy", "sft", "--model", "org/model",
        "--dataset-path", "{dir}/missing.jsonl"), 2, "missing.jsonl"),  # a usage error: the command line is wrong
    Cli("launch-on-a-directory", ("training", "start", "--strategy", "sft", "--model", "org/model",
        "--dataset-path", "{dir}"), 2, "is a directory, not a file"),
    Cli("register-a-directory", ("dataset", "register", "--project", "cat", "--dataset", "d", "--version", "d1",
        "--file", "{dir}"), 2, "is a directory, not a file"),
    Cli("register-with-malformed-split-manifest", ("dataset", "register", "--project", "cat", "--dataset", "d",
        "--version", "d1", "--file", "{dir}/data.jsonl", "--split-manifest", "{dir}/splits.json"), 7, "line 3",
        files={"data.jsonl": '{"text": "ok"}\n', "splits.json": '{\n "train": 0.9,\n}\n'}),
    Cli("register-under-a-version-with-a-zero-width-space", ("dataset", "register", "--project", "cat", "--dataset",
        "d", "--version", "d1\u200b", "--file", "{dir}/data.jsonl"), 7, "is not a valid identifier",
        files={"data.jsonl": '{"text": "ok"}\n'}),
]  # fmt: skip


@pytest.mark.parametrize("case", DATASET_CASES, ids=[c.id for c in DATASET_CASES])
def test_dataset_files_are_refused_naming_file_and_line(
    cli_world: CliWorld, case: Cli, capsys: pytest.CaptureFixture[str], ledger_unchanged: Any
) -> None:
    check_cli(cli_world, case, capsys, ledger_unchanged)


CREATE = ("campaign", "create", "--project", "cat", "--spec", "{dir}/spec.json")
PLAN_WITH_CONFIG = (*PLAN_ARGS, "--config", "{dir}/config.json")

SPEC_CASES = [
    Cli("campaign-spec-malformed-names-the-line", CREATE, 7, "line 4, column 1",
        files={"spec.json": '{\n "campaign_id": "c3",\n "title": \n}'}),
    Cli("campaign-spec-misspelt-field-suggests", CREATE, 7, "did you mean `title`?",
        files={"spec.json": spec_file(title=None, titel="Better bash")}),
    Cli("campaign-spec-wrong-type", CREATE, 7, "`budget.runs`: Input should be a valid integer",
        files={"spec.json": spec_file(budget={"runs": "two"})}),
    Cli("campaign-spec-out-of-range", CREATE, 7, "`evaluation.samples`: Input should be less than or equal to 64",
        files={"spec.json": spec_file(evaluation={"samples": 100})}),
    Cli("campaign-spec-nan-budget", CREATE, 7, "holds NaN is not a JSON number; write a finite number",
        files={"spec.json": spec_file(budget={"runs": 1, "gpu_hours": float("nan")})}),
    Cli("campaign-spec-id-with-rtl-override", CREATE, 7, "is not a valid identifier",
        files={"spec.json": spec_file(campaign_id="c\u202e3")}),
    Cli("campaign-spec-not-an-object", CREATE, 7, "valid dictionary", files={"spec.json": "[1, 2]"}),
    Cli("campaign-spec-oversized", CREATE, 7, f"the limit is {MAX_BODY}",
        files={"spec.json": spec_file(objective="x" * 70_000)}),
    Cli("campaign-spec-over-an-existing-campaign", CREATE, 6, "already exists",
        files={"spec.json": spec_file(campaign_id="c1", title="Another title")}),
    Cli("training-config-malformed-names-the-line", PLAN_WITH_CONFIG, 7, "line 2",
        files={"config.json": '{"max_steps": 4,\n "learning_rate": }'}),
    Cli("training-config-misspelt-field-suggests", PLAN_WITH_CONFIG, 7, "did you mean `num_epochs`?",
        files={"config.json": '{"epochs": 2}'}),
    Cli("training-config-nan", PLAN_WITH_CONFIG, 7, "holds NaN is not a JSON number",
        files={"config.json": '{"learning_rate": NaN}'}),
    Cli("training-config-sets-the-strategy", PLAN_WITH_CONFIG, 7, "--config may not set strategy",
        files={"config.json": '{"strategy": "dpo"}'}),
    Cli("tracking-context-malformed-names-the-line", (*PLAN_ARGS, "--tracking-context", "{dir}/ctx.json"), 7,
        "line 2", files={"ctx.json": '{"project_id": "cat",\n}'}),
    Cli("recipe-change-of-a-pinned-field", ("campaign", "propose", "c1", "--project", "cat", "--recipe-change",
        "{dir}/change.json"), 7, "strategy",
        files={"change.json": '{"primary_variable": "strategy", "value": "dpo", "rationale": "try dpo"}'}),
    Cli("recipe-change-nan", ("campaign", "propose", "c1", "--project", "cat", "--recipe-change",
        "{dir}/change.json"), 7, "holds NaN is not a JSON number",
        files={"change.json": '{"primary_variable": "learning_rate", "value": NaN, "rationale": "r"}'}),
]  # fmt: skip


@pytest.mark.parametrize("case", SPEC_CASES, ids=[c.id for c in SPEC_CASES])
def test_spec_files_are_refused_naming_what_to_fix(
    cli_world: CliWorld, case: Cli, capsys: pytest.CaptureFixture[str], ledger_unchanged: Any
) -> None:
    check_cli(cli_world, case, capsys, ledger_unchanged)


# -- slash commands: the real bot against the Discord stand-in ------------------------------------


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module-wide, so the bot below is started once for every slash case


@dataclass
class SlashWorld:
    daemon: RunningDaemon
    standin: DiscordStandIn


@pytest.fixture(scope="module")
async def slash_world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SlashWorld]:
    tmp = tmp_path_factory.mktemp("bad-slash")
    env = {**ENV, "BASHGYM_DISCORD_GUILD_IDS": str(GUILD_ID), "BASHGYM_DISCORD_TOKEN": FAKE_TOKEN}
    daemon = await asyncio.to_thread(start_daemon, tmp / "home", env=env)
    try:
        async with httpx.AsyncClient(base_url=daemon.url, headers={"Authorization": f"Bearer {daemon.token}"}) as admin:
            (await admin.post("/v1/projects", json={"project_id": "nightly", "name": "Nightly"})).raise_for_status()
            grant = {"subject_kind": "user", "subject_id": str(ALICE_ID), "profile": "lead"}
            (await admin.post("/v1/authority/grants", json=grant)).raise_for_status()
            blob = (await admin.put("/v1/blobs", params={"project": "nightly"}, content=b'{"text": "ls"}\n')).json()
            dataset = {"dataset_id": "traces", "dataset_version_id": "traces-v1", "sha256": blob["sha256"],
                       "filename": "traces.jsonl"}  # fmt: skip
            (await admin.post("/v1/projects/nightly/dataset-versions/from-blob", json=dataset)).raise_for_status()
            model = {"model_id": "org-model", "model_version_id": "model-v1", "source_uri": "hf://org/model"}
            (await admin.post("/v1/projects/nightly/model-versions", json=model)).raise_for_status()
        async with discord_standin() as standin:
            settings = bot_settings_for(standin, daemon.url, daemon.home)
            bot = BashGymBot(settings)
            async with running_client(bot, timeout_s=30):
                await standin.wait_until(lambda: bot.synced or None, timeout_s=30, what="commands synced")
                yield SlashWorld(daemon, standin)
    finally:
        await asyncio.to_thread(daemon.stop)


@dataclass(frozen=True)
class Slash:
    id: str
    command: str
    options: dict[str, Any]
    says: str
    user: int = ALICE_ID


def attachment(text: str) -> tuple[str, bytes]:
    return ("file.json", text.encode())


RUN_START = {"project": "nightly", "method": "sft", "model": "model-v1", "dataset": "traces-v1"}

SLASH_CASES = [
    Slash("run-id-that-climbs-to-another-route", "run status", {"project": "nightly", "run": "../../../auth/whoami"},
          "'..' is not a valid id"),
    Slash("project-id-that-adds-a-query", "project context", {"project": "nightly?workspace=other"},
          "is not a valid id"),
    # `/run list status` is a choice now: Discord itself refuses any other value (tests/unit/bot/test_slash_schema.py).
    Slash("sql-in-the-trend-metric", "ledger trend", {"project": "nightly", "metric": SQL}, "is not a metric name"),
    Slash("log-of-zero-lines", "run log", {"project": "nightly", "run": "r1", "lines": 0}, "between 1 and 10000"),
    Slash("events-page-of-zero", "ledger events", {"project": "nightly", "limit": 0}, "between 1 and 1000"),
    Slash("campaign-spec-malformed-names-the-line", "campaign create",
          {"project": "nightly", "spec": attachment('{"campaign_id": "c1",\n "title": }')}, "line 2"),
    Slash("campaign-spec-misspelt-field-suggests", "campaign create",
          {"project": "nightly", "spec": attachment(spec_file(title=None, titel="Better bash"))},
          "did you mean `title`?"),
    Slash("config-that-is-not-an-object", "run start", {**RUN_START, "config": attachment("[1, 2]")},
          "must hold a JSON object"),
    Slash("config-with-nan", "run start", {**RUN_START, "config": attachment('{"learning_rate": NaN}')},
          "NaN is not a JSON number"),
    Slash("config-misspelt-field-suggests", "run start", {**RUN_START, "config": attachment('{"epochs": 2}')},
          "did you mean `num_epochs`?"),
    Slash("target-that-is-no-lane", "run start", {**RUN_START, "target": "skypilot"}, "is refused"),
    Slash("person-without-a-grant", "project list", {}, f"discord:{BOB_ID} lacks the capability ledger.read",
          user=BOB_ID),
]  # fmt: skip


def text_of(message: dict[str, Any]) -> str:
    parts = [message.get("content") or ""]
    for embed in message.get("embeds") or []:
        parts += [embed.get("title", ""), embed.get("description") or ""]
    return "\n".join(parts)


@pytest.mark.anyio
@pytest.mark.parametrize("case", SLASH_CASES, ids=[c.id for c in SLASH_CASES])
async def test_slash_commands_answer_bad_input_privately_with_what_to_fix(
    slash_world: SlashWorld, case: Slash, ledger_unchanged: Any
) -> None:
    guard = ledger_unchanged(slash_world.daemon)
    await asyncio.to_thread(guard.__enter__)
    sent = await slash_world.standin.send_slash(case.command, options=case.options, user_id=case.user)
    reply = await slash_world.standin.wait_for_reply(sent, timeout_s=30)
    await asyncio.sleep(0.3)  # a write the bot should not have made would land by now
    await asyncio.to_thread(guard.__exit__, None, None, None)
    assert reply["flags"] & EPHEMERAL, reply
    assert case.says in text_of(reply), text_of(reply)
