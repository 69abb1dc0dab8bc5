"""No process the daemon starts sees a secret it does not need.

Issue 50, finding 8: local trainers inherited the daemon's whole environment (the Hub token, provider keys, the
Discord token, every secret the operator named), and so did the evaluator, the trainer-Python probe and the tools
the daemon runs. A real daemon holds planted secrets here; while a run, a run that pushes to the Hub (stand-in), a
gold evaluation, a launch plan that probes the trainer's Python and the doctor's GPU query run, the environment of
every process below the daemon is read (/proc/PID/environ), and that of each process started through the trainer
Python (or `nvidia-smi`) is recorded by a shim that then execs the real program. The sandbox's share is checked
directly: an attempt, its setup and its checks print their environment under a daemon's. The Discord bot that
`bashgym up` starts is read too.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from bashgym.trainers.environments import sandbox
from bashgym.trainers.environments.terminal_tasks import TerminalTask

from tests.e2e.bot.test_bot_process import discord_env, start_up, wait_exit, wait_for_lease, wait_gone
from tests.e2e.daemon.test_operator import Receiver
from tests.support.discord_standin import FAKE_TOKEN, discord_standin
from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import SUITE_OPERATOR_ENV, RunningDaemon, eventually, running_daemon, wait_for_run
from tests.support.hub_standin import HubStandIn

pytestmark = pytest.mark.timeout(300)

# Shaped like real credentials (none is one), each in the daemon's environment under a name the operator uses.
HUB_TOKEN = "hf_" + "Cs1" * 12
SINK_ENV = "RECEIVER_SINK_SECRET"
PLANTED = {
    "HF_TOKEN": HUB_TOKEN,  # the Hub token: only a run that pushes gets it, as HF_TOKEN
    "BASHGYM_DISCORD_TOKEN": "MTAx" + "Dc2" * 20,  # the bot's
    "OPENAI_API_KEY": "sk-" + "Op3" * 10,  # a managed provider's key (BASHGYM_PROVIDERS names it)
    "NGC_API_KEY": "nvapi-" + "Ng4" * 10,  # the NeMo lane's
    "VAULT_PASSWORD": "vault-" + "Vp5" * 10,  # a secret only BASHGYM_SECRET_ENV_VARS names
    SINK_ENV: "sk-" + "Sk6" * 10,  # a live sink's signing secret
    "BASHGYM_TOKEN": "bg_" + "Bt7" * 12,  # a CLI token left in the operator's shell
    "DATABASE_URL": "postgres://ops:" + "Db8" * 8 + "@db/ops",  # named nowhere: the allow-list keeps it out
}
TERMINAL = {"completed", "failed", "cancelled"}


@dataclass
class Seen:
    """A process below the daemon: its command line and the environment it was started with."""

    argv: list[str]
    environ: dict[str, str]
    how: str  # "live" (read from /proc while it ran) or "shim" (recorded by the shim before it exec'd)

    def holds(self) -> dict[str, str]:
        """The planted secrets whose value appears anywhere in this environment, by planted name."""
        text = "\0".join(f"{k}={v}" for k, v in self.environ.items())
        return {name: value for name, value in PLANTED.items() if value in text}

    def runs(self, *words: str) -> bool:
        return all(any(word in arg for arg in self.argv) for word in words)


@dataclass
class Children:
    daemon: RunningDaemon
    plain_run: str
    pushing_run: str
    seen: list[Seen] = field(default_factory=list)


class Watch:
    """Reads the environment of every descendant of `pid`, each once, until stopped."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.own_cmdline = self.root.cmdline()
        self.seen: dict[tuple[int, tuple[str, ...]], Seen] = {}  # a pid is read again once it has exec'd
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                children = self.root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            for child in children:
                try:
                    argv = child.cmdline()
                    # Between fork and exec a child is still the daemon (its memory, its environment): not yet
                    # a process of its own, it is read again once it has exec'd.
                    # A shim's own `cp /proc/$$/environ` copies the environment of the process it wraps (the
                    # pushing trainer's holds the Hub token): the test's instrument, not a process of the daemon.
                    ours = argv[:1] == ["cp"] and len(argv) > 1 and argv[1].startswith("/proc/")
                    if argv != self.own_cmdline and not ours and (child.pid, tuple(argv)) not in self.seen:
                        self.seen[(child.pid, tuple(argv))] = Seen(argv, child.environ(), "live")
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue  # gone before it could be read (a sandboxed `true`): the shims saw what matters
            time.sleep(0.05)

    def stop(self) -> list[Seen]:
        self._stop.set()
        self._thread.join(timeout=10)
        return list(self.seen.values())


def _shim(path: Path, records: Path, program: str) -> Path:
    """An executable that records its argv and environment under `records` (argv first: a record is read once its
    environment is there), then execs `program` in its place."""
    path.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\0" "$0" "$@" > {shlex.quote(str(records))}/$$.argv\n'
        f"cp /proc/$$/environ {shlex.quote(str(records))}/$$.environ\n"
        f'exec {program} "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _recorded(records: Path) -> list[Seen]:
    found = []
    for environ in records.glob("*.environ"):
        argv = (records / f"{environ.stem}.argv").read_bytes().split(b"\0")[:-1]
        pairs = (entry.split(b"=", 1) for entry in environ.read_bytes().split(b"\0") if b"=" in entry)
        found.append(
            Seen([a.decode() for a in argv], {k.decode(): v.decode(errors="replace") for k, v in pairs}, "shim")
        )
    return found


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory, tiny: Path) -> Iterator[Children]:
    """One daemon holding every planted secret; a run, a run that pushes, an evaluation, a probe and the doctor's
    GPU query started through it, watched until each has been seen; the runs are stopped at once."""
    root = tmp_path_factory.mktemp("children")
    records = root / "records"
    records.mkdir()
    tools = root / "bin"
    tools.mkdir()
    python = _shim(tools / "trainer-python", records, shlex.quote(sys.executable))
    _shim(tools / "nvidia-smi", records, "echo 'Stand-in GPU, 80 MiB' #")
    provider = {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "OPENAI_API_KEY"}
    env = {
        **PLANTED,
        "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', os.defpath)}",  # the doctor finds the nvidia-smi shim
        "BASHGYM_TRAINER_PYTHON": str(python),
        "BASHGYM_PROVIDERS": json.dumps({"acme": provider}),
        "BASHGYM_SECRET_ENV_VARS": "HF_TOKEN,HUGGING_FACE_HUB_TOKEN,NGC_API_KEY,BASHGYM_TOKEN,VAULT_PASSWORD",
        "BASHGYM_HF_NAMESPACES": "org",
        "BASHGYM_LOCAL_SLOTS": "2",
        "BASHGYM_GRACE_S": "2",
        "HF_HUB_DISABLE_XET": "1",
    }
    receiver = Receiver([])
    try:
        with HubStandIn() as hub, running_daemon(root / "home", env={**env, "HF_ENDPOINT": hub.url}) as daemon:
            watch = Watch(daemon.proc.pid)
            try:
                found = _start_every_kind_of_child(daemon, receiver, tiny, root, records)
            finally:
                live = watch.stop()
            found.seen = [*live, *_recorded(records)]
            yield found
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def _start_every_kind_of_child(
    daemon: RunningDaemon, receiver: Receiver, tiny: Path, root: Path, records: Path
) -> Children:
    with daemon.client() as admin:
        added = admin.post("/v1/sinks", json={"name": "receiver", "url": receiver.url, "secret_env": SINK_ENV})
        assert added.status_code == 201 and added.json()["secret_present"] is True, added.text
        data = sft_data(root)
        plain = admin.post("/v1/training/start", json=training_request(tiny, data, max_steps=100_000))
        assert plain.status_code == 201, plain.text
        pushing_request = training_request(
            tiny,
            data,
            max_steps=100_000,
            auto_push_hf=True,
            hf_repo_name="org/child-secrets",
            tracking_context=tracking_context(project_id="pushes", project_display_name="Pushes"),
        )
        pushing = admin.post("/v1/training/start", json=pushing_request)
        assert pushing.status_code == 201, pushing.text
        evaluation = admin.post("/v1/projects/nightly/evaluations", json={"gold": True, "limit_tasks": 2})
        assert evaluation.status_code == 202, evaluation.text
        # A 4-bit launch needs CUDA: the plan asks the trainer's Python what it has (it imports torch).
        plan = admin.post("/v1/training/plan", json=training_request(tiny, data, load_in_4bit=True))
        assert plan.status_code == 200, plan.text
        assert admin.get("/v1/doctor").status_code == 200
        found = Children(daemon, plain.json()["run_id"], pushing.json()["run_id"])
        runs = {found.plain_run: "nightly", found.pushing_run: "pushes"}
        # A trainer's environment is fixed when it starts: both are seen live once their processes exist.
        for run_id in runs:
            eventually(f"the trainer of {run_id}", lambda r=run_id: _alive_trainer(daemon, r), timeout_s=120)
        eventually("the evaluator and probe records", lambda: _every_kind_recorded(records), timeout_s=120)
        for run_id, project in runs.items():
            stopped = admin.post(f"/v1/projects/{project}/runs/{run_id}/stop")
            assert stopped.status_code == 200, stopped.text
        for run_id, project in runs.items():
            wait_for_run(admin, project, run_id, TERMINAL, timeout_s=60)
        job = f"/v1/projects/nightly/evaluations/{evaluation.json()['evaluation_id']}"
        ended = eventually("the evaluation's end", lambda: _ended(admin.get(job).json()), timeout_s=120)
        assert ended["status"] == "completed", ended  # the evaluator works with what it gets
    return found


def _ended(job: dict[str, object]) -> dict[str, object] | None:
    return job if job["status"] in TERMINAL else None


def _alive_trainer(daemon: RunningDaemon, run_id: str) -> bool:
    run_dir = str(daemon.home / "runs" / run_id)
    for child in psutil.Process(daemon.proc.pid).children(recursive=True):
        try:
            if "bashgym.trainers" in child.cmdline() and run_dir in child.cmdline():
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone meanwhile
    return False


def _every_kind_recorded(records: Path) -> bool:
    argvs = [" ".join(s.argv) for s in _recorded(records)]
    return all(
        any(word in argv for argv in argvs)
        for word in ("bashgym.trainers.evaluate", "torch.cuda.is_available", "nvidia-smi")
    )


def test_no_process_the_daemon_starts_sees_a_secret_it_does_not_need(children: Children) -> None:
    pushing_dir = str(children.daemon.home / "runs" / children.pushing_run)
    others = [s for s in children.seen if not s.runs(pushing_dir)]
    kinds = {
        "a trainer": [s for s in others if s.runs("bashgym.trainers", children.plain_run)],
        "the evaluator": [s for s in others if s.runs("bashgym.trainers.evaluate")],
        "the trainer-Python probe": [s for s in others if s.runs("torch.cuda.is_available")],
        "the doctor's nvidia-smi": [s for s in others if s.runs("nvidia-smi")],
    }
    for kind, seen in kinds.items():
        assert seen, f"{kind} was never seen, so its environment was not checked"
    assert any(s.how == "live" for s in kinds["a trainer"]), "the running trainer was not read from /proc"
    leaks = {" ".join(s.argv)[:160]: sorted(s.holds()) for s in others if s.holds()}
    assert not leaks, f"secrets reached the daemon's children: {leaks}"
    # What they do get: the daemon's PATH, and the Hub endpoint (a setting, not a secret).
    (trainer, *_) = kinds["a trainer"]
    assert trainer.environ.get("PATH", "").startswith(str(Path(children.daemon.home).parent / "bin"))
    assert "HF_ENDPOINT" in trainer.environ


def test_a_run_that_pushes_gets_the_upload_token_and_nothing_else(children: Children) -> None:
    pushing_dir = str(children.daemon.home / "runs" / children.pushing_run)
    trainers = [s for s in children.seen if s.runs("bashgym.trainers", pushing_dir)]
    assert trainers and any(s.how == "live" for s in trainers), "the pushing run's trainer was never seen"
    for seen in trainers:
        assert seen.environ.get("HF_TOKEN") == HUB_TOKEN, "the run that pushes must get the Hub token as HF_TOKEN"
        held = sorted(seen.holds())
        assert held == ["HF_TOKEN"], f"a pushing trainer got more than the Hub token: {held}"


@pytest.mark.parametrize("level", ["namespaces", "none"])
def test_a_sandboxed_attempt_and_its_checks_see_no_secret(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt, its setup and a check that came with the data (untrusted) or with the suite (trusted) each
    print their environment, in a process holding the daemon's secrets; under `namespaces` the attempt also reads
    its ancestors' environments, which uid 65534 cannot."""
    if level == "namespaces" and sandbox.probe_isolation().level != "namespaces":
        pytest.skip(f"no namespaces here: {sandbox.probe_isolation().detail}")
    if level == "none":
        forced = sandbox.Isolation("none", False, False, "forced for the test")
        monkeypatch.setattr(sandbox, "probe_isolation", lambda: forced)
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    dump = "env; tr '\\0' '\\n' < /proc/self/environ"
    ancestors = 'p=$$; while [ "$p" -gt 1 ]; do cat /proc/$p/environ; p=$(cut -d" " -f4 /proc/$p/stat); done'
    attempt = f"{dump}; {ancestors}" if level == "namespaces" else dump
    secrets = " ".join(f"-e {shlex.quote(value)}" for value in PLANTED.values())
    # A check passes only when its own environment holds no planted value (a failed check fails the test).
    check = f"! ( {dump} ) | grep -qF {secrets}"
    for trust in ("untrusted", "trusted"):
        task = TerminalTask(
            task_id=f"env_dump-00{1 if trust == 'untrusted' else 2}",
            task_family="env_dump",
            instruction="Print the environment.",
            files={"notes.txt": "a\n"},
            setup=f"( {dump} ) > setup.txt",
            verifier=check if trust == "untrusted" else f"{check} && grep -q PATH= $SANDBOX/setup.txt",
            fixtures={} if trust == "untrusted" else {"expected.txt": "a\n"},
            gold="true",
            verifier_trust=trust,
        )
        result = sandbox.run_attempt(task, attempt)
        assert "PATH=" in result.stdout, result.stdout  # the dump ran
        leaked = [name for name, value in PLANTED.items() if value in result.stdout]
        assert not leaked, f"the attempt read {leaked} ({trust} check, {level})"
        assert result.passed, f"the {trust} check saw a secret in its environment, or failed: {result}"


@pytest.mark.anyio
async def test_the_bot_of_bashgym_up_gets_its_discord_token_and_no_other_secret(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with discord_standin() as standin:
        env = {**os.environ, **SUITE_OPERATOR_ENV, **PLANTED, **discord_env(standin), "BASHGYM_HOME": str(home)}
        env.pop("BASHGYM_API", None)
        up = await start_up(home, env, tmp_path / "up.log")
        try:
            token = (home / "admin.token").read_text().strip()
            await wait_for_lease(up.url, token, up.bot_pid, log=tmp_path / "up.log")  # the bot works with it
            bot = Seen(psutil.Process(up.bot_pid).cmdline(), psutil.Process(up.bot_pid).environ(), "live")
        finally:
            up.proc.kill()  # its bot ends with it; a SIGTERM would wait out the bot's long-poll
            await wait_exit(up.proc)
            await wait_gone(home)
    assert bot.runs("bashgym.bot"), bot.argv
    assert bot.environ["BASHGYM_DISCORD_TOKEN"] == FAKE_TOKEN
    assert not bot.holds(), f"the bot got the daemon's other secrets: {sorted(bot.holds())}"
