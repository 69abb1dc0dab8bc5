"""bashgym.track when things die (issue 53, item 1): the daemon killed (SIGKILL) mid-run of a tracked script and
restarted on its port loses and doubles no point; a script killed while the daemon was down leaves a spool that the
next run opened in its home sends exactly once; a silent run turns `unknown` and resumes when heard; async code
tracks a run as sync code does.

One daemon for the file, with a short heartbeat timeout; the crash story runs once, in the `crash` fixture, and its
outcomes are checked by the tests below. Real processes throughout: the daemon, and the scripts, which log on their
own clock and wait at a step for the test to kill the daemon under them."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bashgym import track

from tests.e2e.tracking.test_track_client import VERSIONS, points, researcher, shown, workspace
from tests.support.helpers import RunningDaemon, eventually, start_daemon

STEPS, KILLED_AT = 40, 15  # the scripts' steps, and the step at which the daemon is killed under them
HEARTBEAT_TIMEOUT_S = 2.0
SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from bashgym import track

    steps, killed_at, resume, dies = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "dies"
    run = track.start_run(project="nightly", model_version="tiny-v1", dataset_version="rows-v1",
                          interval_s=0.05, heartbeat_s=0.3, flush_timeout_s=60)
    with run:
        print("run", run.run_id, flush=True)
        for step in range(steps):
            run.log_metrics({"loss": 1 / (step + 1), "lr": 0.001 * step}, step=step)
            time.sleep(0.01)  # a training step
            if step == killed_at:
                print("waiting", flush=True)
                while not resume.exists():
                    time.sleep(0.01)
        if dies:  # once every point waits in the spool (the last step is in it)
            last = '"step": %d,' % (steps - 1)
            while not (run._sender.spool.exists() and last in run._sender.spool.read_text()):
                time.sleep(0.01)
            print("spooled", flush=True)
            time.sleep(600)  # killed here, its points in the spool
    print("ended", flush=True)
    """
)


@dataclass
class Crash:
    daemon: RunningDaemon  # restarted after the kill, on the same home and port
    home: Path  # the scripts' BASHGYM_HOME, where the spools are
    survivor: str  # the run of the script that outlived the daemon's death
    survivor_output: str
    dead: str  # the run of the script killed while the daemon was down


def script(daemon: RunningDaemon, home: Path, token: str, resume: Path, fate: str) -> subprocess.Popen[str]:
    env = {**os.environ, "BASHGYM_HOME": str(home), "BASHGYM_API": daemon.url, "BASHGYM_TOKEN": token}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(STEPS), str(KILLED_AT), str(resume), fate],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def said(proc: subprocess.Popen[str], word: str) -> str:
    """The first word of the line the script prints next; the test's timeout bounds a script that hangs."""
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line and line[0] == word, (word, line, proc.poll())
    return line[-1]


@pytest.fixture(scope="module")
def crash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crash]:
    root = tmp_path_factory.mktemp("crash")
    env = {"BASHGYM_TRACKED_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S)}
    with workspace(root, **env) as daemon:
        home, resume = root / "user", root / "resume"
        survivor = script(daemon, home, researcher(daemon, "sue"), resume, "lives")
        doomed = script(daemon, home, researcher(daemon, "dave"), resume, "dies")
        try:
            runs = [said(proc, "run") for proc in (survivor, doomed)]
            for proc in (survivor, doomed):
                said(proc, "waiting")
            daemon.stop(signal.SIGKILL)
            resume.touch()
            said(doomed, "spooled")
            doomed.kill()
            doomed.wait(timeout=10)
            restarted = start_daemon(daemon.home, "--port", daemon.url.rsplit(":", 1)[1], env=env)
            output, _ = survivor.communicate(timeout=90)
            assert survivor.returncode == 0, output
        finally:
            for proc in (survivor, doomed):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
                if proc.stdout is not None:
                    proc.stdout.close()
        try:
            yield Crash(restarted, home, runs[0], output, runs[1])
        finally:
            restarted.close()


def test_a_daemon_killed_mid_run_of_a_tracked_script_loses_and_doubles_no_point(crash: Crash) -> None:
    for metric, value in (("loss", lambda step: 1 / (step + 1)), ("lr", lambda step: 0.001 * step)):
        logged = points(crash.daemon, crash.survivor, metric)
        assert [step for step, _ in logged] == list(range(STEPS)), (metric, logged)
        assert logged == [(step, pytest.approx(value(step))) for step in range(STEPS)], metric
    assert shown(crash.daemon, crash.survivor)["status"] == "completed", crash.survivor_output
    assert "ended" in crash.survivor_output
    assert not (crash.home / "track" / f"{crash.survivor}.jsonl").exists()


def test_a_killed_scripts_spool_is_sent_once_by_the_next_run_opened_in_its_home(
    crash: Crash, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spool = crash.home / "track" / f"{crash.dead}.jsonl"
    assert spool.exists(), "the killed script's unsent points wait in its spool"
    before = points(crash.daemon, crash.dead)
    assert len(before) < STEPS, before
    eventually("the killed script's run turns unknown", lambda: shown(crash.daemon, crash.dead)["status"] == "unknown")

    monkeypatch.setenv("BASHGYM_HOME", str(crash.home))
    token = researcher(crash.daemon, "dave")
    with caplog.at_level(logging.WARNING, logger="bashgym.track"):
        track.start_run(**VERSIONS, api=crash.daemon.url, token=token).end()
        track.start_run(**VERSIONS, api=crash.daemon.url, token=token).end()  # a second one finds nothing to send
    for metric in ("loss", "lr"):
        assert [step for step, _ in points(crash.daemon, crash.dead, metric)] == list(range(STEPS)), metric
    assert not spool.exists()
    sent = [r.getMessage() for r in caplog.records if "a stopped process left" in r.getMessage()]
    assert len(sent) == 1 and f"to run {crash.dead}" in sent[0] and str(spool) in sent[0], sent
    # Its points came from another process: the run's own was not heard from, so it stays unknown.
    assert shown(crash.daemon, crash.dead)["status"] == "unknown"


def test_a_silent_run_turns_unknown_after_the_heartbeat_timeout_and_resumes_when_heard(
    crash: Crash, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BASHGYM_HOME", str(tmp_path))
    token = researcher(crash.daemon, "sid")
    with track.start_run(**VERSIONS, api=crash.daemon.url, token=token, interval_s=0.05, heartbeat_s=600) as run:
        assert shown(crash.daemon, run.run_id)["status"] == "running"
        eventually("the silent run turns unknown", lambda: shown(crash.daemon, run.run_id)["status"] == "unknown")
        run.log_metrics({"loss": 0.5}, step=1)
        eventually("the run resumes once heard", lambda: shown(crash.daemon, run.run_id)["status"] == "running")
    record = shown(crash.daemon, run.run_id)
    assert record["status"] == "completed", record
    assert points(crash.daemon, run.run_id) == [(1, 0.5)]


@pytest.mark.anyio
async def test_async_code_tracks_a_run_with_its_points_and_artifacts(
    crash: Crash, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BASHGYM_HOME", str(tmp_path))
    token = researcher(crash.daemon, "asa")
    (tmp_path / "adapter.bin").write_bytes(b"weights")
    async with await track.astart_run(**VERSIONS, api=crash.daemon.url, token=token, interval_s=0.05) as run:
        for step in range(5):
            run.log_metrics({"loss": float(step)}, step=step)
        stored = await run.alog_artifact(tmp_path / "adapter.bin", name="model/adapter.bin")
    record = shown(crash.daemon, run.run_id)
    assert record["status"] == "completed", record
    assert points(crash.daemon, run.run_id) == [(step, float(step)) for step in range(5)]
    assert (
        [a["uri"] for a in record["artifacts"]] == [stored["uri"]] == [f"bashgym://runs/{run.run_id}/model/adapter.bin"]
    )
