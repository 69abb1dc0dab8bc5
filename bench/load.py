"""Load: many concurrent clients against one daemon on loopback, reads and writes mixed, for a fixed time;
afterwards every acknowledged write is looked up in the ledger and must be there exactly once.

Targets (issue 12): 0 errors; 0 lost and 0 duplicated writes; p99 of reads under 50 ms. The events long-poll
is timed and shown, but kept out of the read target: when nothing new has arrived, its latency is its wait.
Run: python bench/load.py [--clients 200] [--seconds 60] [--think-ms 1000] [--json]
     python bench/load.py --clients 20 --seconds 5      # a quick check, about 10 s

Each client loops: a pause (uniform over 0 to twice --think-ms; 0 makes a closed loop at full speed), then
one request drawn from MIX (70% reads: project context, runs listing, events long-poll; 30% writes: metric
batches, annotations, evaluation results). With the default pause, 200 clients offer about 190 requests/s.

The daemon is a child process with its default settings on a fresh BASHGYM_HOME (BASHGYM_* variables of this
shell pass through; the output shows the ledger's and the rate limit's). Each client is its own principal
with its own token (ledger.read + ledger.write), as a fleet of trainers and dashboards would be, so the
per-principal rate limit for changes applies to each client on its own. The clients share this process's one
event loop and one aiohttp connection pool; on a 2-core machine they compete with the daemon for the cores,
and the CPU each side used is printed with the figures.

Exit status 1 when any request failed, or any write is lost, duplicated, torn or altered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import json
import os
import platform
import random
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import history

PROJECT = "load"
METRICS = ("train.loss", "train.lr", "train.grad_norm")
BATCH_STEPS = 20  # steps per metric batch; with 3 metrics, 60 points
SUITE = "load-suite"
BACKGROUND_RUNS = 20  # finished runs beside the one under load, so listing and context have rows to show
TARGET_READ_P99_MS = 50.0
REQUEST_TIMEOUT_S = 30.0
# uvicorn closes an idle keep-alive connection after 5 s; the pool drops its own before that, or a request
# could go out on a connection the server is closing.
POOL_KEEPALIVE_S = 4.0

# (route, share of requests); reads 70%, writes 30%.
MIX: tuple[tuple[str, float], ...] = (
    ("context", 0.25),
    ("runs", 0.25),
    ("events", 0.20),
    ("metrics", 0.10),
    ("annotations", 0.10),
    ("eval-results", 0.10),
)
READS = ("context", "runs")  # the reads the p99 target covers
WRITES = ("metrics", "annotations", "eval-results")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def tracking_context() -> dict[str, str]:
    """A complete tracking context: runs registered with it are official runs of PROJECT."""
    return {
        "workspace_id": "default",
        "project_id": PROJECT,
        "project_display_name": "Load test",
        "experiment_id": "load",
        "experiment_name": "Load",
        "objective": "Many clients at once",
        "task_type": "terminal-agent",
        "model_id": "tiny",
        "model_version_id": "tiny-v1",
        "model_source_uri": "bashgym://models/tiny",
        "model_config_digest": digest("config"),
        "dataset_id": "traces",
        "dataset_version_id": "traces-v1",
        "dataset_source_uri": "bashgym://datasets/traces",
        "dataset_content_digest": digest("rows"),
        "environment_id": "cpu-local",
        "environment_runtime_digest": digest("runtime"),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_s(pid: int) -> float:
    """User plus system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU time the whole machine has spent busy (all cores, every process), from /proc/stat."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# -- the daemon ----------------------------------------------------------------------------------


@dataclass
class Daemon:
    home: Path
    proc: asyncio.subprocess.Process
    url: str = ""
    admin_token: str = ""


def announced(home: Path, pid: int) -> tuple[str, str] | None:
    """The URL in $BASHGYM_HOME/daemon.json and the admin token, once this daemon has written them."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        endpoint = json.loads((home / "daemon.json").read_text())
        if endpoint["pid"] == pid:
            return str(endpoint["url"]), (home / "admin.token").read_text().strip()
    return None


async def start_daemon(home: Path) -> Daemon:
    """`bashgym daemon --port 0` as a child; its address comes from $BASHGYM_HOME/daemon.json."""
    env = {**os.environ, "BASHGYM_HOME": str(home)}
    code = "from bashgym.cli.main import main; main()"
    # Both streams go to files: an unread pipe would fill and block the daemon (stdout carries its console
    # notices).
    await asyncio.to_thread(home.mkdir, parents=True)
    with (home / "daemon.log").open("w") as log, (home / "daemon.out").open("w") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, "daemon", "--port", "0", env=env, stdout=out, stderr=log
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.returncode is None:
        found = await asyncio.to_thread(announced, home, proc.pid)
        if found:
            return Daemon(home, proc, *found)
        await asyncio.sleep(0.05)
    await stop_daemon(Daemon(home, proc))
    log_text = await asyncio.to_thread((home / "daemon.log").read_text)
    raise RuntimeError(f"the daemon did not start: {log_text[-2000:]}")


async def stop_daemon(daemon: Daemon) -> None:
    if daemon.proc.returncode is None:
        daemon.proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(15):
            await daemon.proc.wait()
    except TimeoutError:
        daemon.proc.kill()  # a stuck daemon must not hang the benchmark
        await daemon.proc.wait()


@contextlib.asynccontextmanager
async def running_daemon(home: Path) -> AsyncIterator[Daemon]:
    daemon = await start_daemon(home)
    try:
        yield daemon
    finally:
        await stop_daemon(daemon)


# -- set-up --------------------------------------------------------------------------------------


@dataclass
class Fixture:
    """What the clients write to and read from."""

    run_id: str
    attempt_id: str
    tokens: list[str]
    head_cursor: int  # the last event before the load starts
    settings: dict[str, Any]


async def admin_call(
    session: aiohttp.ClientSession, daemon: Daemon, method: str, path: str, body: Any = None
) -> dict[str, Any]:
    """One set-up request as the admin; a 429 is waited out (set-up makes more changes than the burst allows)."""
    headers = {"Authorization": f"Bearer {daemon.admin_token}"}
    for _ in range(30):
        async with session.request(method, daemon.url + path, json=body, headers=headers) as response:
            answer = await response.json()
            if response.status != 429:
                if response.status >= 400:
                    raise RuntimeError(f"set-up {method} {path} answered {response.status}: {answer}")
                return dict(answer)
            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
    raise RuntimeError(f"set-up {method} {path} stayed rate-limited")


async def set_up(session: aiohttp.ClientSession, daemon: Daemon, clients: int) -> Fixture:
    """A project with finished runs, the running run under load, an evaluation suite, and a token per client."""
    tokens = []
    for c in range(clients):
        # Each client is another system recording its own figures: results made elsewhere need evidence.import.
        issue = {"actor_id": f"load-client-{c}", "capabilities": ["ledger.read", "ledger.write", "evidence.import"]}
        tokens.append((await admin_call(session, daemon, "POST", "/v1/auth/tokens", issue))["token"])
    context = tracking_context()
    for n in range(BACKGROUND_RUNS):
        spec = {"method": ("sft", "dpo")[n % 2], "tracking_context": context, "source_run_id": f"done-{n}"}
        done = (await admin_call(session, daemon, "POST", "/v1/runs", spec))["record"]["run_id"]
        for status in ("running", "completed"):
            path = f"/v1/projects/{PROJECT}/runs/{done}/transitions"
            await admin_call(session, daemon, "POST", path, {"status": status})
    spec = {"method": "sft", "tracking_context": context, "source_run_id": "under-load"}
    run_id = (await admin_call(session, daemon, "POST", "/v1/runs", spec))["record"]["run_id"]
    await admin_call(
        session, daemon, "POST", f"/v1/projects/{PROJECT}/runs/{run_id}/transitions", {"status": "running"}
    )
    suite = {
        "suite_id": SUITE,
        "kind": "terminal_tasks",
        "scoring_contract": {"primary_metric": "pass_at_1", "metrics": {"pass_at_1": {"direction": "maximize"}}},
        "code_digest": digest(SUITE),
    }
    await admin_call(session, daemon, "POST", f"/v1/projects/{PROJECT}/eval-suites", suite)
    page = await admin_call(session, daemon, "GET", f"/v1/projects/{PROJECT}/events?after_cursor=0&limit=1000")
    head = page["next_cursor"]
    while page["has_more"]:
        page = await admin_call(session, daemon, "GET", f"/v1/projects/{PROJECT}/events?after_cursor={head}&limit=1000")
        head = page["next_cursor"]
    health = await admin_call(session, daemon, "GET", "/v1/ledger/health")
    settings = {"ledger_synchronous": health.get("synchronous"), "journal_mode": health.get("journal_mode")}
    return Fixture(run_id, f"{run_id}.a1", tokens, head, settings)


# -- the clients ---------------------------------------------------------------------------------


@dataclass
class Sample:
    route: str
    status: int  # 0: no answer (connection error or timeout)
    latency_ms: float
    error: str = ""


@dataclass
class Write:
    """One write sent: what identifies it in the ledger, and whether the daemon acknowledged it."""

    route: str
    key: str
    acknowledged: bool
    replayed: bool = False


@dataclass
class Client:
    number: int
    token: str
    rng: random.Random
    cursor: int
    samples: list[Sample] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    fleet: int = 1  # clients in all
    sent: int = 0  # writes sent so far, for unique keys
    batches: int = 0  # metric batches sent so far


def request_for(client: Client, route: str, fixture: Fixture, wait_s: float) -> tuple[str, str, Any, str]:
    """(method, path, JSON body, ledger key of the write) of the next request on a route."""
    p = f"/v1/projects/{PROJECT}"
    n = client.sent
    match route:
        case "context":
            return "GET", f"{p}/context", None, ""
        case "runs":
            return "GET", f"{p}/runs?limit=50", None, ""
        case "events":
            return "GET", f"{p}/events?after_cursor={client.cursor}&limit=100&wait_s={wait_s:g}", None, ""
        case "metrics":
            # Clients take turns over consecutive steps, so no two share a step and the steps stay as small
            # as one real run's (far apart, they once overflowed the trend's SUM(step * step); f2918ce).
            first = (client.batches * client.fleet + client.number) * BATCH_STEPS
            client.batches += 1
            points = [
                {"metric": m, "step": first + i, "value": value_at(m, first + i)}
                for m in METRICS
                for i in range(BATCH_STEPS)
            ]
            body = {"run_id": fixture.run_id, "attempt_id": fixture.attempt_id, "points": points}
            return "POST", f"{p}/metrics", body, str(first)
        case "annotations":
            text = f"load c{client.number} n{n}"
            return "POST", f"{p}/annotations", {"text": text, "run_id": fixture.run_id}, text
        case "eval-results":
            result_id = f"load-c{client.number}-n{n}"
            body = {
                "result_id": result_id,
                "suite_id": SUITE,
                "run_id": fixture.run_id,
                "attempt_id": fixture.attempt_id,
                "metrics": {"pass_at_1": client.rng.random()},
                "sample_count": 88,
            }
            return "POST", f"{p}/eval-results", body, result_id
    raise ValueError(route)


def value_at(metric: str, step: int) -> float:
    """The value sent for a metric at a step, so verification can recompute it."""
    return round(1.0 / (1 + step % 1000) + METRICS.index(metric), 6)


async def one_request(
    session: aiohttp.ClientSession, url: str, client: Client, route: str, fixture: Fixture, wait_s: float
) -> None:
    method, path, body, key = request_for(client, route, fixture, wait_s)
    headers = {"Authorization": f"Bearer {client.token}"}
    data = None
    if method == "POST":
        # The product's clients send a fresh Idempotency-Key with every change; so does this one.
        headers["Idempotency-Key"] = f"load-{client.number}-{client.sent}"
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
        client.sent += 1
    started = time.perf_counter()
    status, payload, error = 0, b"", ""
    try:
        async with session.request(method, url + path, data=data, headers=headers) as response:
            status, payload = response.status, await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    latency_ms = (time.perf_counter() - started) * 1000
    if status >= 400:
        error = payload[:300].decode(errors="replace")
    client.samples.append(Sample(route, status, latency_ms, error))
    is_ok = 200 <= status < 300
    if method == "POST":
        replayed = is_ok and bool(json.loads(payload).get("replayed"))
        client.writes.append(Write(route, key, is_ok, replayed))
    elif route == "events" and is_ok:
        client.cursor = int(json.loads(payload)["next_cursor"])


async def run_client(
    session: aiohttp.ClientSession,
    url: str,
    client: Client,
    fixture: Fixture,
    *,
    until: float,
    think_ms: float,
    wait_s: float,
) -> None:
    routes = [route for route, _ in MIX]
    weights = [share for _, share in MIX]
    # The first pause spreads the clients' starts, so they do not all fire in the same instant.
    pause_s = client.rng.uniform(0, 2 * think_ms) / 1000
    while time.monotonic() + pause_s < until:
        await asyncio.sleep(pause_s)
        route = client.rng.choices(routes, weights)[0]
        await one_request(session, url, client, route, fixture, wait_s)
        pause_s = client.rng.uniform(0, 2 * think_ms) / 1000


# -- verification --------------------------------------------------------------------------------


async def fetch_json(session: aiohttp.ClientSession, daemon: Daemon, path: str) -> Any:
    headers = {"Authorization": f"Bearer {daemon.admin_token}"}
    async with session.get(daemon.url + path, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"verification GET {path} answered {response.status}: {await response.text()}")
        return await response.json()


async def events_after(session: aiohttp.ClientSession, daemon: Daemon, cursor: int, kind: str) -> list[Any]:
    """Every event of one type after a cursor, page by page."""
    found: list[Any] = []
    while True:
        path = f"/v1/projects/{PROJECT}/events?after_cursor={cursor}&limit=1000&type={kind}"
        page = await fetch_json(session, daemon, path)
        found += page["events"]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            return found


@dataclass
class Check:
    """One way of finding one kind of write in the ledger, and what it found."""

    acknowledged: int
    lost: set[str]  # acknowledged writes not found
    duplicated: set[str]  # writes found more than once
    unacknowledged_but_stored: int  # failed requests whose write committed anyway: allowed, and shown
    stored_but_never_sent: int
    answered_as_replay: int  # a fresh write the daemon answered as a replay of an earlier one

    def figures(self) -> dict[str, int]:
        return {
            "acknowledged": self.acknowledged,
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "unacknowledged_but_stored": self.unacknowledged_but_stored,
            "stored_but_never_sent": self.stored_but_never_sent,
            "answered_as_replay": self.answered_as_replay,
        }


def tally(writes: list[Write], stored: Counter[str]) -> Check:
    acknowledged = {w.key for w in writes if w.acknowledged}
    unacknowledged = {w.key for w in writes if not w.acknowledged}
    return Check(
        acknowledged=len(acknowledged),
        lost={key for key in acknowledged if stored[key] == 0},
        duplicated={key for key, n in stored.items() if n > 1},
        unacknowledged_but_stored=sum(1 for key in unacknowledged if stored[key] > 0),
        stored_but_never_sent=sum(1 for key in stored if key not in acknowledged | unacknowledged),
        answered_as_replay=sum(1 for w in writes if w.replayed),
    )


def batches_in_trend(batches: list[Write], steps: dict[str, Counter[int]]) -> tuple[Counter[str], int]:
    """How often each metric batch is in the trends: 1 when all its points are there once, 0 when none is,
    2 when any point is there twice; and how many batches are there only in part (a torn transaction)."""
    stored: Counter[str] = Counter()
    torn = 0
    for batch in batches:
        first = int(batch.key)
        counts = [steps[m][first + i] for m in METRICS for i in range(BATCH_STEPS)]
        if max(counts) > 1:
            stored[batch.key] = 2
        elif min(counts) == 1:
            stored[batch.key] = 1
        elif max(counts) == 1:
            torn += 1
    sent = {int(b.key) // BATCH_STEPS for b in batches}
    for m in METRICS:  # points of batches never sent (a step outside every batch)
        stray = {step // BATCH_STEPS for step in steps[m]} - sent
        stored.update({f"stray-{m}-{s * BATCH_STEPS}": 1 for s in stray})
    return stored, torn


async def verify(
    session: aiohttp.ClientSession, daemon: Daemon, fixture: Fixture, writes: list[Write]
) -> dict[str, Check | int]:
    """Look every write up where a user would: the run's trend and evaluations, and the project's events."""
    by_route = {route: [w for w in writes if w.route == route] for route in WRITES}
    base = f"/v1/projects/{PROJECT}"
    steps: dict[str, Counter[int]] = {}
    wrong_values = 0
    for metric in METRICS:
        trend = await fetch_json(session, daemon, f"{base}/trend?metric={metric}&run={fixture.run_id}")
        steps[metric] = Counter(trend["steps"])
        wrong_values += sum(v != value_at(metric, s) for s, v in zip(trend["steps"], trend["values"], strict=True))
    in_trend, torn = batches_in_trend(by_route["metrics"], steps)
    ingested = await events_after(session, daemon, fixture.head_cursor, "metrics.ingested")
    results = (await fetch_json(session, daemon, f"{base}/runs/{fixture.run_id}"))["evaluations"]
    recorded = await events_after(session, daemon, fixture.head_cursor, "eval_result.recorded")
    notes = await events_after(session, daemon, fixture.head_cursor, "annotation.added")
    return {
        "metrics: points in the run's trend": tally(by_route["metrics"], in_trend),
        "metrics: metrics.ingested events": tally(
            by_route["metrics"], Counter(str(e["payload"]["first_step"]) for e in ingested)
        ),
        "eval-results: the run's evaluations": tally(
            by_route["eval-results"], Counter(r["result_id"] for r in results)
        ),
        "eval-results: eval_result.recorded events": tally(
            by_route["eval-results"], Counter(e["payload"]["entity_id"] for e in recorded)
        ),
        "annotations: annotation.added events": tally(
            by_route["annotations"], Counter(e["payload"]["text"] for e in notes)
        ),
        "metric batches stored in part": torn,
        "metric points with another value than sent": wrong_values,
    }


# -- the whole run -------------------------------------------------------------------------------


async def bench(clients: int, seconds: float, think_ms: float, wait_s: float, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_daemon(Path(tmp) / "home") as daemon:
            connector = aiohttp.TCPConnector(limit=clients + 4, keepalive_timeout=POOL_KEEPALIVE_S)
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                set_up_started = time.perf_counter()
                fixture = await set_up(session, daemon, clients)
                set_up_s = time.perf_counter() - set_up_started
                print(
                    f"set-up {set_up_s:.1f} s; {clients} clients for {seconds:g} s; daemon pid {daemon.proc.pid}",
                    file=sys.stderr,
                )
                at_rest = await cores_at_rest(daemon)
                rngs = random.Random(seed)
                fleet = [
                    Client(c, fixture.tokens[c], random.Random(rngs.random()), fixture.head_cursor, fleet=clients)
                    for c in range(clients)
                ]
                load = await drive(session, daemon, fleet, fixture, seconds=seconds, think_ms=think_ms, wait_s=wait_s)
                verify_started = time.perf_counter()
                writes = [w for c in fleet for w in c.writes]
                checks = await verify(session, daemon, fixture, writes)
                verify_s = time.perf_counter() - verify_started
        logged = await asyncio.to_thread(logged_errors, daemon.home / "daemon.log")
    samples = [s for c in fleet for s in c.samples]
    return summarize(samples, writes, checks, load) | {
        "clients": clients,
        "seconds": seconds,
        "think_ms_mean": think_ms,
        "events_wait_s": wait_s,
        "set_up_s": round(set_up_s, 1),
        "verify_s": round(verify_s, 1),
        "daemon_settings": fixture.settings | rate_limit_settings(),
        "daemon_log_errors": logged,
        "daemon_cores_at_rest": round(at_rest, 2),
    }


async def cores_at_rest(daemon: Daemon, seconds: float = 1.0) -> float:
    """The daemon's CPU with no request in flight, just before the load: near 0 unless something spins."""
    before = cpu_s(daemon.proc.pid)
    await asyncio.sleep(seconds)
    return (cpu_s(daemon.proc.pid) - before) / seconds


def logged_errors(log: Path) -> dict[str, Any]:
    """ERROR lines in the daemon's log (a 500 leaves its traceback there), and the first of them."""
    lines = [line for line in log.read_text().splitlines() if " ERROR " in line]
    return {"count": len(lines), "first": lines[0][:300] if lines else ""}


async def drive(
    session: aiohttp.ClientSession,
    daemon: Daemon,
    fleet: list[Client],
    fixture: Fixture,
    *,
    seconds: float,
    think_ms: float,
    wait_s: float,
) -> dict[str, float]:
    """Run every client until the time is up; the CPU both processes used meanwhile."""
    ours, theirs, machine = time.process_time(), cpu_s(daemon.proc.pid), machine_busy_s()
    started = time.monotonic()
    until = started + seconds
    async with asyncio.TaskGroup() as group:
        for client in fleet:
            group.create_task(
                run_client(session, daemon.url, client, fixture, until=until, think_ms=think_ms, wait_s=wait_s)
            )
    elapsed = time.monotonic() - started
    this_process = (time.process_time() - ours) / elapsed
    in_daemon = (cpu_s(daemon.proc.pid) - theirs) / elapsed
    return {
        "elapsed_s": elapsed,
        "this_process_cores": this_process,
        "daemon_cores": in_daemon,
        "other_processes_cores": (machine_busy_s() - machine) / elapsed - this_process - in_daemon,
    }


def rate_limit_settings() -> dict[str, str]:
    """The rate limit the daemon was started with: its defaults unless this shell set BASHGYM_RATE_LIMIT_*."""
    return {
        "rate_limit_per_minute": os.environ.get("BASHGYM_RATE_LIMIT_PER_MINUTE", "600 (default)"),
        "rate_limit_burst": os.environ.get("BASHGYM_RATE_LIMIT_BURST", "120 (default)"),
    }


def route_figures(samples: list[Sample]) -> dict[str, Any]:
    latencies = [s.latency_ms for s in samples]
    return {
        "count": len(samples),
        "p50_ms": round(percentile(latencies, 0.5), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        "errors": sum(1 for s in samples if not 200 <= s.status < 300),
    }


def summarize(
    samples: list[Sample], writes: list[Write], checks: dict[str, Check | int], load: dict[str, float]
) -> dict[str, Any]:
    elapsed = load["elapsed_s"]
    routes = {route: [s for s in samples if s.route == route] for route, _ in MIX}
    failed = [s for s in samples if not 200 <= s.status < 300]
    reads = [s.latency_ms for s in samples if s.route in READS]
    acknowledged = [w for w in writes if w.acknowledged]
    found = {name: c for name, c in checks.items() if isinstance(c, Check)}
    # A write counts once however many of its checks miss it: (route, key) over every check of its route.
    lost = {(name.split(":")[0], key) for name, c in found.items() for key in c.lost}
    duplicated = {(name.split(":")[0], key) for name, c in found.items() for key in c.duplicated}
    anomalies = {name: n for name, n in checks.items() if isinstance(n, int)}
    return {
        "routes": {route: route_figures(taken) for route, taken in routes.items() if taken},
        "requests": len(samples),
        "requests_per_s": round(len(samples) / elapsed, 1),
        "writes_per_s": round(sum(1 for s in samples if s.route in WRITES) / elapsed, 1),
        "metric_points_per_s": round(
            sum(1 for w in acknowledged if w.route == "metrics") * BATCH_STEPS * len(METRICS) / elapsed
        ),
        "read_p50_ms": round(percentile(reads, 0.5), 1) if reads else None,
        "read_p99_ms": round(percentile(reads, 0.99), 1) if reads else None,
        "errors": len(failed),
        "errors_by_status": {str(k): v for k, v in Counter(s.status for s in failed).items()},
        "first_errors": [f"{s.route} {s.status}: {s.error}" for s in failed[:5]],
        "writes_acknowledged": len(acknowledged),
        "writes_acknowledged_by_route": dict(Counter(w.route for w in acknowledged)),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "stored_but_never_sent": sum(c.stored_but_never_sent for c in found.values()),
        "answered_as_replay": sum(c.answered_as_replay for c in found.values()),
        "anomalies": anomalies,
        "checks": {name: c.figures() for name, c in found.items()},
        "elapsed_s": round(elapsed, 1),
        "cores_used": {
            "daemon": round(load["daemon_cores"], 2),
            "this_process": round(load["this_process_cores"], 2),
            "other_processes": round(load["other_processes_cores"], 2),
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
    }


def is_clean(result: dict[str, Any]) -> bool:
    """No error; no write lost, duplicated, torn, altered, made up or mistaken for a replay."""
    wrong = ("errors", "lost", "duplicated", "stored_but_never_sent", "answered_as_replay")
    return not (any(result[k] for k in wrong) or any(result["anomalies"].values()))


def report(result: dict[str, Any]) -> None:
    settings = result["daemon_settings"]
    print(
        f"{result['clients']} clients for {result['seconds']:g} s against one daemon on loopback "
        f"(think time uniform 0-{2 * result['think_ms_mean']:g} ms between a client's requests; "
        f"events long-poll wait_s={result['events_wait_s']:g}); each client its own token.\n"
        f"daemon: ledger synchronous={settings['ledger_synchronous']}, journal={settings['journal_mode']}, "
        f"rate limit per principal {settings['rate_limit_per_minute']}/min, burst {settings['rate_limit_burst']}"
    )
    print(f"\n  {'route':24s} {'count':>7s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} {'errors':>7s}")
    for route, f in result["routes"].items():
        label = f"{'write' if route in WRITES else 'read'} {route}"
        if route == "events":
            label += " (long-poll)"
        print(
            f"  {label:24s} {f['count']:7d} {f['p50_ms']:8.1f} {f['p99_ms']:8.1f} {f['max_ms']:8.1f} {f['errors']:7d}"
        )
    verdict = "met" if result["read_p99_ms"] is not None and result["read_p99_ms"] < TARGET_READ_P99_MS else "MISSED"
    print(
        f"\n  reads (context, runs; the long-poll excluded): p50 {result['read_p50_ms']} ms, "
        f"p99 {result['read_p99_ms']} ms  target p99 < {TARGET_READ_P99_MS:.0f} ms: {verdict}"
    )
    print(
        f"  throughput: {result['requests_per_s']:,.1f} requests/s ({result['requests']:,} in "
        f"{result['elapsed_s']} s), {result['writes_per_s']:,.1f} writes/s, {result['metric_points_per_s']:,} "
        "metric points/s"
    )
    clean = "met" if is_clean(result) else "MISSED"
    by_status = ", ".join(f"{n} x {status}" for status, n in result["errors_by_status"].items())
    print(
        f"  errors {result['errors']}{f' ({by_status})' if by_status else ''}; writes acknowledged "
        f"{result['writes_acknowledged']:,}; lost {result['lost']}; duplicated {result['duplicated']}  "
        f"target 0 / 0 / 0: {clean}"
    )
    for line in result["first_errors"]:
        print(f"    {line}")
    for name, c in result["checks"].items():
        extra = ", ".join(f"{k} {v}" for k, v in c.items() if k not in ("acknowledged", "lost", "duplicated") and v)
        print(
            f"    {name:44s} acknowledged {c['acknowledged']:6,d}  lost {c['lost']}  duplicated {c['duplicated']}"
            + (f"  ({extra})" if extra else "")
        )
    for name, n in result["anomalies"].items():
        print(f"    {name}: {n}")
    logged = result["daemon_log_errors"]
    first = f" (first: {logged['first']})" if logged["count"] else ""
    print(f"  ERROR lines in the daemon's log: {logged['count']}{first}")
    cores, machine = result["cores_used"], result["machine"]
    print(
        f"  CPU during the load: daemon {cores['daemon']} cores (at rest before it: "
        f"{result['daemon_cores_at_rest']}), this process (the clients) "
        f"{cores['this_process']}, everything else on the machine {cores['other_processes']}; machine: "
        f"{machine['cpu_count']} CPUs, Python {machine['python']}, SQLite {machine['sqlite']}"
    )
    print(f"  set-up {result['set_up_s']} s, verification {result['verify_s']} s, whole benchmark {result['wall_s']} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--think-ms", type=float, default=1000, help="mean pause between a client's requests")
    parser.add_argument("--wait-s", type=float, default=1, help="wait_s of the events long-poll")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line")
    args = parser.parse_args()
    started, start = time.perf_counter(), history.begin()
    result = asyncio.run(bench(args.clients, args.seconds, args.think_ms, args.wait_s, args.seed))
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["targets"] = {"errors": 0, "lost": 0, "duplicated": 0, "read_p99_ms": TARGET_READ_P99_MS}
    if args.json:
        print(json.dumps(result))
    else:
        report(result)
    remember(result, settings={k: v for k, v in vars(args).items() if k != "json"}, start=start)
    sys.exit(0 if is_clean(result) else 1)


def remember(result: dict[str, Any], *, settings: dict[str, Any], start: history.Start) -> None:
    """The headline figures into bench/results.jsonl (bench/history.py)."""
    ms = functools.partial(history.Figure, unit="ms", better="lower")
    figures = {
        "read_p50_ms": ms(result["read_p50_ms"]),
        "read_p99_ms": ms(result["read_p99_ms"]),
        "requests_per_s": history.Figure(result["requests_per_s"], unit="requests/s", better="higher"),
        "errors_lost_duplicated": history.Figure(
            result["errors"] + result["lost"] + result["duplicated"], unit="count", better="lower"
        ),
    }
    for route in ("context", "runs"):
        if route in result["routes"]:
            figures[f"{route}_p50_ms"] = ms(result["routes"][route]["p50_ms"])
            figures[f"{route}_p99_ms"] = ms(result["routes"][route]["p99_ms"])
    history.record("load", {k: f for k, f in figures.items() if f.value is not None}, settings=settings,
                   start=start)  # fmt: skip


if __name__ == "__main__":
    main()
