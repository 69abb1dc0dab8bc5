"""The crash matrix (issue 12): at each phase where a crash can hurt, the daemon or its child is SIGKILLed
at exactly that point (an observed state, or a failpoint: BASHGYM_FAILPOINT), restarted, and held to the
same invariants: no acknowledged write lost, no event duplicated, `bashgym ledger verify` exits 0, every run
terminal or `unknown` with a reason, and every consumer resumes at its cursor, never behind it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.trainers.contracts.rundir import CHECKPOINT_COMPLETE
from bashgym.trainers.environments.retrieval import shipped_retrieval_split
from bashgym.trainers.retrieval.tiny import build_tiny_retriever
from bashgym.trainers.tiny import build_tiny

from tests.support.discord_standin import CHANNEL_ID, FAKE_TOKEN, GUILD_ID, discord_standin
from tests.support.factories import grpo_data, sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, cli_async, eventually, running_daemon, start_daemon
from tests.support.reward_pairs import reward_pairs, write_jsonl

TERMINAL = {"completed", "failed", "cancelled"}
CONSUMERS = ("console-notifier", "discord-notifier", "curator")
ONCE_PER_RUN = {"run.queued", "run.preparing", "run.started", "run.completed", "run.failed", "run.cancelled"}
CAMPAIGN_ENDS = {"exhausted", "completed", "blocked", "failed", "cancelled"}


# -- the invariants every phase is held to ---------------------------------------------------------


@dataclass
class Acknowledged:
    """What the ledger had answered for before the kill: its events and the consumers' cursors."""

    events: list[dict[str, Any]]
    cursors: dict[str, int]


def all_events(client: httpx.Client) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    cursor = 0
    while True:
        page = client.get("/v1/events", params={"after_cursor": cursor, "limit": 1000}).json()
        if not page["events"]:
            return events
        events += page["events"]
        cursor = int(page["next_cursor"])


def cursors(client: httpx.Client) -> dict[str, int]:
    return {name: int(client.get(f"/v1/consumers/{name}/cursor").json()["cursor"]) for name in CONSUMERS}


def acknowledged(daemon: RunningDaemon) -> Acknowledged:
    with daemon.client() as client:
        return Acknowledged(all_events(client), cursors(client))


def once_key(event: dict[str, Any]) -> tuple[str, ...] | None:
    """The identity of an event that may happen once only; None for events that may repeat."""
    kind, payload = event["event_type"], event.get("payload") or {}
    if kind in ONCE_PER_RUN:
        return kind, str(event["run_id"])
    if kind == "campaign.stage" and payload.get("stage") in {"training", "decided"}:
        return kind, str(payload["iteration_id"]), str(payload["stage"])
    if kind == "campaign.transitioned" and payload.get("status") in CAMPAIGN_ENDS:
        return kind, str(payload.get("entity_id") or payload.get("campaign_id"))
    if kind.endswith((".registered", ".recorded")) and payload.get("entity_id"):
        return kind, str(payload["entity_id"])
    return None


def check_invariants(daemon: RunningDaemon, before: Acknowledged) -> list[dict[str, Any]]:
    """Assert the crash invariants on the restarted daemon; return its events for the phase's own checks."""
    with daemon.client() as client:
        events = all_events(client)
        after_cursors = cursors(client)
        projects = client.get("/v1/projects").json()
        project_ids = [p["project_id"] for p in (projects["projects"] if isinstance(projects, dict) else projects)]
        runs = [
            client.get(f"/v1/projects/{p}/runs/{r['run_id']}").json()
            for p in project_ids
            for r in client.get(f"/v1/projects/{p}/runs", params={"limit": 200}).json()
        ]
        reserved = {p: client.get(f"/v1/projects/{p}/budget").json()["reserved"]["runs"] for p in project_ids}
    by_id = {e["event_id"]: e for e in events}
    lost = [e for e in before.events if by_id.get(e["event_id"]) != e]
    assert not lost, f"acknowledged events lost or changed: {lost[:3]}"
    repeated = [key for key, n in Counter(filter(None, map(once_key, events))).items() if n > 1]
    assert not repeated, f"events duplicated: {repeated}"
    verified = cli(daemon.env(), "ledger", "verify")
    assert verified.code == 0, verified.stdout + verified.stderr
    for run in runs:
        reason = run["attempts"][-1]["status_reason"] if run["attempts"] else ""
        assert run["status"] in TERMINAL or (run["status"] == "unknown" and reason), (run["run_id"], run["status"])
    # Every run the daemon launched holds its reservation until it ends; an end settles it in the same write.
    active = Counter(run["project_id"] for run in runs if run["status"] not in TERMINAL)
    unsettled = {p: (n, active[p]) for p, n in reserved.items() if n != active[p]}
    assert not unsettled, f"reserved runs differ from runs still active, per project: {unsettled}"
    behind = {name: (before.cursors[name], now) for name, now in after_cursors.items() if now < before.cursors[name]}
    assert not behind, f"consumer cursors went backwards: {behind}"
    return events


# -- helpers ---------------------------------------------------------------------------------------


def poll(what: str, probe: Callable[[], Any], timeout_s: float = 240) -> Any:
    return eventually(what, probe, timeout_s, every_s=0.2)


def run_of(daemon: RunningDaemon, run_id: str, project: str = "nightly") -> dict[str, Any]:
    with daemon.client() as client:
        return dict(client.get(f"/v1/projects/{project}/runs/{run_id}").json())


def wait_status(
    daemon: RunningDaemon, run_id: str, statuses: set[str], timeout_s: float = 240, project: str = "nightly"
) -> dict[str, Any]:
    return dict(
        poll(f"{run_id} in {statuses}", lambda: (r := run_of(daemon, run_id, project))["status"] in statuses and r)
    )


def start_run(daemon: RunningDaemon, request: dict[str, Any]) -> str:
    with daemon.client() as client:
        started = client.post("/v1/training/start", json=request)
    assert started.status_code == 201, started.text
    return str(started.json()["run_id"])


def sigkill(daemon: RunningDaemon) -> None:
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(timeout=10)
    daemon.close()


def is_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def trainer_pid(daemon: RunningDaemon, run_id: str) -> int:
    """The trainer's pid, once the daemon has started it (it writes trainer.pid right after the spawn)."""
    path = daemon.home / "runs" / run_id / "trainer.pid"
    return int(poll("trainer.pid", lambda: path.is_file() and path.read_text().strip()))


def events_of(events: list[dict[str, Any]], run_id: str) -> list[str]:
    return [e["event_type"] for e in events if e["run_id"] == run_id]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


# -- phases ----------------------------------------------------------------------------------------


@pytest.mark.slow  # make test-slow: the default suite keeps to its 10 minutes
@pytest.mark.timeout(300)
def test_run_queued_the_daemon_killed_while_a_run_waits_for_a_slot_starts_it_once_after_restart(
    tiny: Path, home: Path, tmp_path: Path
) -> None:
    data = sft_data(tmp_path, 16)
    first = start_daemon(home, env={"BASHGYM_LOCAL_SLOTS": "1"})
    holder = start_run(first, training_request(tiny, data, max_steps=12, save_steps=100))
    waiting = start_run(first, training_request(tiny, data, max_steps=2, save_steps=100, seed=7))
    wait_status(first, holder, {"running"})
    assert run_of(first, waiting)["status"] == "queued"
    before = acknowledged(first)
    sigkill(first)
    with running_daemon(home, env={"BASHGYM_LOCAL_SLOTS": "1"}) as second:
        for run_id in (holder, waiting):
            assert wait_status(second, run_id, TERMINAL)["status"] == "completed", run_of(second, run_id)
        events = check_invariants(second, before)
        holder_run = run_of(second, holder)
    assert events_of(events, waiting).count("run.started") == 1
    assert holder_run["metric_summary"]["train.loss"]["count"] == 12, "the holder was followed, not relaunched"


def test_run_recorded_the_daemon_killed_before_its_request_was_written_ends_failed_saying_so(
    tiny: Path, home: Path, tmp_path: Path
) -> None:
    """A launch recorded in the ledger whose trainer request was never written cannot start: after the restart
    it ends `failed` with the reason and what to do, instead of waiting `queued` for ever."""
    first = start_daemon(home, env={"BASHGYM_FAILPOINT": "training.start.registered"})
    with first.client() as client, pytest.raises(httpx.TransportError):
        client.post("/v1/training/start", json=training_request(tiny, sft_data(tmp_path), max_steps=2))
    first.proc.wait(timeout=10)
    first.close()
    with running_daemon(home) as second:
        with second.client() as client:
            runs = client.get("/v1/projects/nightly/runs").json()
        assert len(runs) == 1
        run = wait_status(second, runs[0]["run_id"], TERMINAL)
        assert cli(second.env(), "ledger", "verify").code == 0
    assert run["status"] == "failed"
    assert "before writing its trainer's request: nothing trained" in run["attempts"][-1]["status_reason"]
    assert not (home / "runs" / run["run_id"] / "request.json").exists()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "killed",
    ["daemon", pytest.param("daemon-while-the-trainer-finishes", marks=pytest.mark.slow), "trainer", "both"],
)
def test_trainer_running_a_kill_resolves_the_run_exactly_once(
    killed: str, tiny: Path, home: Path, tmp_path: Path
) -> None:
    first = start_daemon(home)
    run_id = start_run(first, training_request(tiny, sft_data(tmp_path, 16), max_steps=16, save_steps=100))
    pid = trainer_pid(first, run_id)
    if killed == "trainer":  # the daemon sees its child die of a signal nobody sent
        wait_status(first, run_id, {"running"})
        os.killpg(pid, signal.SIGKILL)
        run = wait_status(first, run_id, TERMINAL)
        assert run["status"] == "failed" and "-9" in run["attempts"][-1]["status_reason"]
        before = acknowledged(first)
        first.stop()
        with running_daemon(home) as second:
            check_invariants(second, before)
        return
    # The daemon goes while its trainer still loads (seconds), so the trainer's steps run with no daemon. Killed
    # once the run showed progress, a loaded machine let a first daemon see all 16 steps (a few hundred ms) end.
    before = acknowledged(first)
    sigkill(first)
    if killed == "both":  # the host went down: nothing is left to say how the run ended
        os.killpg(pid, signal.SIGKILL)
        poll("the trainer gone", lambda: not is_alive(pid), timeout_s=30)
    if killed == "daemon-while-the-trainer-finishes":  # no daemon follows its last steps: the next one reads them
        poll("the trainer done", lambda: not is_alive(pid), timeout_s=120)
    with running_daemon(home) as second:
        run = wait_status(second, run_id, TERMINAL | {"unknown"})
        check_invariants(second, before)
        if killed.startswith("daemon"):
            assert run["status"] == "completed", run["attempts"][-1]
            assert run["metric_summary"]["train.loss"]["count"] == 16  # every step once, nothing twice
            return
        assert run["status"] == "unknown" and "resume or stop it" in run["attempts"][-1]["status_reason"]
        stopped = cli(second.env(), "training", "stop", run_id, "--project", "nightly", "--yes", "--json")
        assert stopped.code == 0, stopped.stderr
        assert run_of(second, run_id)["status"] == "cancelled"
        check_invariants(second, before)  # the stopped run's reservation is settled too


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_grpo_run_pauses_resumes_outlives_a_daemon_kill_and_stops(tiny: Path, home: Path, tmp_path: Path) -> None:
    """The lifecycle SFT's tests walk, on GRPO: its generation step pauses and resumes, a kill -9 of the daemon
    leaves it training and followed (not relaunched), and stop ends it cancelled."""
    first = start_daemon(home)
    request = training_request(tiny, grpo_data(tmp_path), strategy="grpo", max_steps=5000, save_steps=1000)
    run_id = start_run(first, request)
    env = first.env()
    wait_status(first, run_id, {"running"})
    assert cli(env, "training", "pause", run_id, "--project", "nightly", "--json").code == 0
    wait_status(first, run_id, {"paused"})
    assert list((home / "runs" / run_id).glob("checkpoint-*")), "a paused GRPO run checkpointed"
    assert cli(env, "training", "resume", run_id, "--project", "nightly").code == 0
    wait_status(first, run_id, {"running"})
    pid = trainer_pid(first, run_id)
    before = acknowledged(first)
    sigkill(first)
    assert is_alive(pid), "the trainer outlives its daemon"
    with running_daemon(home) as second:
        assert run_of(second, run_id)["status"] == "running"
        stopped = cli(second.env(), "training", "stop", run_id, "--project", "nightly", "--yes", "--json")
        assert stopped.code == 0, stopped.stderr
        run = wait_status(second, run_id, TERMINAL)
        events = check_invariants(second, before)
    assert run["status"] == "cancelled"
    assert events_of(events, run_id).count("run.started") == 1, "followed after the restart, never relaunched"
    assert events_of(events, run_id).count("run.paused") == 1 and events_of(events, run_id).count("run.resumed") == 1
    poll("the trainer gone", lambda: not is_alive(pid), timeout_s=60)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["reward_model", "embedding_retriever"])
def test_a_workflow_run_pauses_resumes_outlives_a_daemon_kill_and_stops(
    tiny: Path, home: Path, tmp_path: Path, method: str
) -> None:
    """The workflows run under the same supervisor as the direct methods: a reward model and a retriever pause
    (checkpointed) and resume, outlive a kill -9 of their daemon (followed, never relaunched) and stop."""
    first = start_daemon(home)
    if method == "reward_model":
        data = write_jsonl(tmp_path / "pairs.jsonl", reward_pairs(seed=1, n=64))
        request = training_request(tiny, data, method=method, max_steps=5000, save_steps=1000)
    else:  # a retriever trains in a project of its own profile, from a retriever
        with first.client() as admin:
            project = {"project_id": "search", "name": "Search", "profile": "embedding_retrieval"}
            assert admin.post("/v1/projects", json=project).status_code == 201
        split = shipped_retrieval_split(tmp_path / "retrieval")
        base = tracking_context(
            project_id="search",
            project_display_name="Search",
            model_id="tiny-retriever",
            model_version_id="retriever-v1",
        )
        request = training_request(
            build_tiny_retriever(tmp_path / "retriever"),
            split.train,
            method=method,
            max_steps=5000,
            save_steps=1000,
            tracking_context=base,
        )
    run_id = start_run(first, request)
    env, project = first.env(), request["tracking_context"]["project_id"]
    wait_status(first, run_id, {"running"}, project=project)
    poll("a step", lambda: run_of(first, run_id, project)["metric_summary"])
    assert cli(env, "training", "pause", run_id, "--project", project).code == 0
    wait_status(first, run_id, {"paused"}, project=project)
    assert list((home / "runs" / run_id).glob("checkpoint-*")), f"a paused {method} run checkpointed"
    assert cli(env, "training", "resume", run_id, "--project", project).code == 0
    wait_status(first, run_id, {"running"}, project=project)
    pid = trainer_pid(first, run_id)
    before = acknowledged(first)
    sigkill(first)
    assert is_alive(pid), "the trainer outlives its daemon"
    with running_daemon(home) as second:
        assert run_of(second, run_id, project)["status"] == "running"
        stopped = cli(second.env(), "training", "stop", run_id, "--project", project, "--yes", "--json")
        assert stopped.code == 0, stopped.stderr
        run = wait_status(second, run_id, TERMINAL, project=project)
        events = check_invariants(second, before)
    assert run["status"] == "cancelled" and run["method"] == method
    assert events_of(events, run_id).count("run.started") == 1, "followed after the restart, never relaunched"
    assert events_of(events, run_id).count("run.paused") == 1 and events_of(events, run_id).count("run.resumed") == 1
    poll("the trainer gone", lambda: not is_alive(pid), timeout_s=60)


@pytest.mark.timeout(300)
def test_checkpoint_being_written_a_resume_after_the_crash_starts_from_the_last_complete_checkpoint(
    tiny: Path, home: Path, tmp_path: Path
) -> None:
    # The host goes down in two steps: the daemon first, then the trainer while it writes its second checkpoint.
    first = start_daemon(home, env={"BASHGYM_FAILPOINT": "trainer.checkpoint_written@2"})
    request = training_request(tiny, sft_data(tmp_path, 16), max_steps=15, save_steps=5, checkpoint_limit=3)
    run_id = start_run(first, request)
    pid = trainer_pid(first, run_id)
    # Killed while its trainer still loads: on a loaded machine a daemon killed after the run's first progress
    # still saw the trainer reach step 10 and die (0.3 s later), and recorded it failed.
    before = acknowledged(first)
    sigkill(first)
    poll("the trainer killed at its failpoint", lambda: not is_alive(pid), timeout_s=120)
    run_dir = home / "runs" / run_id
    assert (run_dir / "checkpoint-5" / CHECKPOINT_COMPLETE).is_file()
    assert (run_dir / "checkpoint-10").is_dir() and not (run_dir / "checkpoint-10" / CHECKPOINT_COMPLETE).exists()
    with running_daemon(home) as second:
        run = wait_status(second, run_id, TERMINAL | {"unknown"})
        assert run["status"] == "unknown" and run["attempts"][-1]["status_reason"], run["attempts"][-1]
        resumed = cli(second.env(), "training", "resume", run_id, "--project", "nightly")
        assert resumed.code == 0, resumed.stderr
        run = wait_status(second, run_id, TERMINAL)
        events = check_invariants(second, before)
        with second.client() as client:
            project_events = client.get("/v1/projects/nightly/events", params={"limit": 1000}).json()["events"]
    assert run["status"] == "completed", run["attempts"][-1]
    # The first daemon may have seen checkpoint-5 before it was killed (a race with the trainer's first steps);
    # the resumed attempt starts after it and writes the half-written checkpoint-10 again, then 15.
    resumed_id = run["attempts"][-1]["attempt_id"]
    checkpoints = [e for e in project_events if e["event_type"] == "run.checkpoint"]
    steps = [e["payload"]["step"] for e in checkpoints if e["attempt_id"] == resumed_id]
    assert steps == [10, 15], "the half-written checkpoint-10 was written again by the resumed attempt"
    assert [e["payload"]["step"] for e in checkpoints if e["attempt_id"] != resumed_id] in ([], [5])
    assert events_of(events, run_id).count("run.resumed") == 1
    # The lost trainer's steps past checkpoint-5 are redone as attempt 2; attempt 1's record stays as it was.
    lost, resumed_attempt = run["attempts"]
    assert lost["status"] == "failed" and "went on as a new attempt" in lost["status_reason"]
    assert resumed_attempt["status"] == "completed"
    assert events_of(events, run_id).count("attempt.superseded") == 1
    redone = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert redone[0] == 6 and redone[-1] == 15, "attempt 2 started after the last complete checkpoint"
    assert (run_dir / f"metrics.{lost['attempt_id']}.jsonl").is_file()
    assert run["metric_summary"]["train.loss"]["last_step"] == 15


CAMPAIGN_SPEC = {
    "campaign_id": "crash-q4", "title": "Crash matrix", "objective": "Raise pass@1.", "suite_id": "bash-tasks-v1",
    "starting_model_version_id": "tiny-v1", "dataset_version_ids": ["traces-v1"],
    "base_recipe": {"strategy": "sft", "max_steps": 2, "batch_size": 2, "max_seq_length": 96, "save_steps": 100},
    "budget": {"runs": 1}, "stop_rules": {"max_iterations": 1},
    "evaluation": {"limit_tasks": 2, "temperature": 0.0},
}  # fmt: skip
CAMPAIGN = "/v1/projects/nightly/campaigns/crash-q4"


def campaign_of(daemon: RunningDaemon) -> dict[str, Any]:
    with daemon.client() as client:
        campaign = dict(client.get(CAMPAIGN).json())
        campaign["iterations"] = client.get(f"{CAMPAIGN}/iterations").json()["iterations"]
    return campaign


@pytest.mark.slow  # 22 s: an evaluation and a campaign decision, each across a restart; CI's test-slow runs it
@pytest.mark.timeout(400)
def test_evaluation_running_and_campaign_decision_being_recorded_each_finish_once_after_a_restart(
    tiny: Path, home: Path, tmp_path: Path
) -> None:
    failpoint = {"BASHGYM_FAILPOINT": "campaign.candidate.decided"}
    first = start_daemon(home, env=failpoint)
    env = first.env()
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
    with first.client() as client:
        model = {"model_version_id": "tiny-v1", "model_id": "tiny", "source_uri": f"file://{tiny}"}
        assert client.post("/v1/projects/nightly/model-versions", json=model).status_code == 201
        assert client.post("/v1/projects/nightly/campaigns", json=CAMPAIGN_SPEC).status_code == 201
        change = {"primary_variable": "learning_rate", "value": 1e-3, "rationale": "gentler steps"}
        assert client.post(f"{CAMPAIGN}/propose", json=change).status_code == 201
    data = sft_data(tmp_path, 8)
    registered = cli(env, "dataset", "register", "--project", "nightly", "--dataset", "traces", "--version",
                     "traces-v1", "--file", str(data))  # fmt: skip
    assert registered.code == 0, registered.stderr
    assert cli(env, "campaign", "validate", "crash-q4", "--project", "nightly").code == 0
    assert cli(env, "campaign", "start", "crash-q4", "--project", "nightly").code == 0

    # Evaluation running: the baseline's evaluator has started when the daemon dies.
    poll("the baseline evaluating", lambda: campaign_of(first)["iterations"][0]["stage"] == "evaluating")
    before_evaluation = acknowledged(first)
    sigkill(first)

    # Decision being recorded: the restarted daemon kills itself once the candidate's decision is committed.
    second = start_daemon(home, env=failpoint)
    assert second.proc.wait(timeout=360) == -signal.SIGKILL, "the decision failpoint was never reached"
    second.close()
    with running_daemon(home) as third:
        before_decision = acknowledged(third)
        decided = [
            e
            for e in before_decision.events
            if e["event_type"] == "campaign.stage" and e["payload"]["stage"] == "decided"
        ]
        assert len(decided) == 2, "baseline and candidate decided before the kill"
        final = poll("the campaign ended", lambda: (c := campaign_of(third))["status"] in CAMPAIGN_ENDS and c)
        events = check_invariants(third, before_evaluation)
        check_invariants(third, before_decision)
        with third.client() as client:
            results = client.get("/v1/projects/nightly/evaluations").json()["results"]
    assert final["status"] == "exhausted" and final["status_reason"].startswith("max_iterations"), final
    assert [r["model_version_id"] for r in results].count("tiny-v1") == 1, "the baseline was recorded once"
    assert len(results) == 2
    stages = [e["payload"]["stage"] for e in events if e["event_type"] == "campaign.stage"]
    assert stages.count("evaluating") == 3, "the interrupted baseline evaluation ran again, the candidate's once"


@pytest.mark.timeout(120)
def test_curator_writing_a_kill_before_its_cursor_moved_rewrites_the_same_receipts_once(
    home: Path, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    with running_daemon(home) as daemon:
        env = daemon.env()
        assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
        for version in ("v1", "v2"):
            data = tmp_path / f"{version}.jsonl"
            data.write_text(json.dumps({"messages": [{"role": "user", "content": version}]}) + "\n")
            registered = cli(env, "dataset", "register", "--project", "nightly", "--dataset", "traces", "--version",
                             f"traces-{version}", "--file", str(data))  # fmt: skip
            assert registered.code == 0, registered.stderr
        before = acknowledged(daemon)
        killed = cli({**env, "BASHGYM_FAILPOINT": "curator.receipts_written"}, "curate", "--root", str(kb))
        assert killed.code == -signal.SIGKILL
        written = {p: p.read_bytes() for p in kb.rglob("*") if p.is_file()}
        assert written and before.cursors["curator"] == acknowledged(daemon).cursors["curator"]
        again = cli(env, "curate", "--root", str(kb), "--json")
        assert again.code == 0, again.stderr
        assert again.json()["written"] == 0, "the same receipts, byte for byte: nothing to rewrite"
        assert {p: p.read_bytes() for p in kb.rglob("*") if p.is_file()} == written, "no receipt twice, none half"
        check_invariants(daemon, before)
        head = acknowledged(daemon)
        assert head.cursors["curator"] == max(int(e["cursor"]) for e in head.events)
        assert cli(env, "budget", "amend", "--project", "nightly", "--runs", "1", "--reason", "more").code == 0
        resumed = cli(env, "curate", "--root", str(kb), "--json")
        assert resumed.code == 0 and 0 < resumed.json()["events"] <= 3, "it resumed at its cursor, not the start"
    versions = sorted(p.name for p in (kb / "datasets").rglob("*.md"))
    assert versions == ["traces-v1.md", "traces-v2.md"]


@pytest.mark.slow  # make test-slow: the default suite keeps to its 10 minutes
@pytest.mark.anyio
@pytest.mark.timeout(180)
async def test_notifier_posting_a_bot_killed_after_discord_took_a_post_shows_it_once(home: Path) -> None:
    env = {"BASHGYM_DISCORD_GUILD_IDS": str(GUILD_ID), "BASHGYM_DISCORD_TOKEN": FAKE_TOKEN}
    daemon = await asyncio.to_thread(start_daemon, home, env=env)
    try:
        async with discord_standin() as standin:
            denv = daemon.env()
            assert (await cli_async(denv, "project", "create", "--id", "nightly", "--name", "Nightly")).code == 0
            with daemon.client() as admin:
                assert admin.put("/v1/projects/nightly/channel", json={"channel_id": str(CHANNEL_ID)}).is_success
            bot_env = {
                **denv,
                **env,
                "BASHGYM_DISCORD_APPLICATION_ID": str(standin.application_id),
                "BASHGYM_DISCORD_API_BASE": f"{standin.url}/api/v10",
                "BASHGYM_DISCORD_GATEWAY": standin.ws_url,
            }

            def amended() -> list[str]:
                return [
                    str(m["embeds"][0]["title"]) for m in standin.messages(CHANNEL_ID) if "Budget amended" in str(m)
                ]

            async def started_bot() -> asyncio.subprocess.Process:
                # The bot's own process, as `bashgym bot` starts it: a kill reaches the poster itself.
                bot = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bashgym.bot",
                    env=bot_env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                await standin.wait_until(lambda: standin.commands.get(GUILD_ID), timeout_s=60, what="commands synced")
                return bot

            first = await started_bot()
            with daemon.client() as admin:  # the notifier's first start stores the head: posts follow from there
                await asyncio.to_thread(
                    poll,
                    "the notifier's cursor",
                    lambda: admin.get("/v1/consumers/discord-notifier/cursor").json()["updated_at"],
                )

            def kill_on_second_post(message: dict[str, Any]) -> None:
                if "Budget amended" in str(message) and len(amended()) == 2:
                    os.kill(first.pid, signal.SIGKILL)  # Discord has the post; its acknowledgement never comes

            standin.on_channel_post = kill_on_second_post
            with daemon.client() as admin:
                for n in range(3):
                    body = {"runs": 1, "reason": f"amend {n}"}
                    assert admin.post("/v1/projects/nightly/budget/amend", json=body).status_code == 201
            assert await asyncio.wait_for(first.wait(), 60) == -signal.SIGKILL
            standin.on_channel_post = None
            before = acknowledged(daemon)
            assert before.cursors["discord-notifier"] < max(int(e["cursor"]) for e in before.events)

            second = await started_bot()
            try:
                head = max(int(e["cursor"]) for e in before.events)
                await asyncio.to_thread(
                    poll, "the notifier at the head", lambda: acknowledged(daemon).cursors["discord-notifier"] >= head
                )
            finally:
                second.kill()
                await second.wait()
            check_invariants(daemon, before)
    finally:
        await asyncio.to_thread(daemon.stop)
    titles = amended()
    assert len(titles) == 3, titles
    posts = standin.requests_to("POST", r"/channels/\d+/messages")
    nonces = [r.json["nonce"] for r in posts if r.status == 200 and "Budget amended" in json.dumps(r.json)]
    assert len(nonces) == 4 and len(set(nonces)) == 3, "the unacknowledged post was sent again and Discord dropped it"
