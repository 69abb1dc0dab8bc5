"""The sandbox of terminal-task attempts: confinement, limits, a scrubbed environment and tamper detection.

Each confinement test states the isolation it ran with; where this machine grants no namespaces the
confinement checks are skipped with that reason, and the tamper checks (which need none) still run.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.trainers.environments import sandbox
from bashgym.trainers.environments.canaries import CANARIES, run_canaries
from bashgym.trainers.environments.sandbox import Isolation, Limits, Sandbox, probe_isolation, run_attempt
from bashgym.trainers.environments.terminal_tasks import TerminalTask, default_suite
from bashgym.trainers.environments.verifiers import run_command

ISOLATION = probe_isolation()
SECRET = f"fixture-{uuid.uuid4().hex}"


def task(**overrides: object) -> TerminalTask:
    fields: dict[str, object] = {
        "task_id": "probe-001",
        "task_family": "probe",
        "instruction": "Print the word ready.",
        "files": {"notes.txt": "a\nb\n"},
        "verifier": 'grep -qx ready "$OUTPUT"',
        "fixtures": {"expected.txt": SECRET},
        "gold": "echo ready",
        "timeout_s": 5.0,
    }
    return TerminalTask.model_validate({**fields, **overrides})


def needs(filesystem: bool = False, network: bool = False) -> None:
    print(f"isolation: {ISOLATION.level} ({ISOLATION.detail})")
    if filesystem and not ISOLATION.filesystem:
        pytest.skip(f"this machine confines writes only by permissions: {ISOLATION.detail}")
    if network and not ISOLATION.network:
        pytest.skip(f"no network namespace here: {ISOLATION.detail}")


def test_the_gold_passes_and_a_wrong_answer_does_not() -> None:
    assert run_attempt(task(), "echo ready").passed
    wrong = run_attempt(task(), "echo nope")
    assert not wrong.passed and wrong.verifier_status == "ok" and wrong.reward == 0.0


def test_writes_outside_the_sandbox_do_not_land(tmp_path: Path) -> None:
    needs(filesystem=True)
    mark = uuid.uuid4().hex
    targets = [Path(f"/tmp/escape-{mark}"), Path(f"/var/tmp/escape-{mark}"), tmp_path / f"escape-{mark}"]
    command = "; ".join(f"echo x > {t}" for t in targets) + "; echo ready"
    tmp_path.chmod(0o777)  # even a directory anyone may write to stays out of reach
    result = run_attempt(task(), command)
    assert not any(t.exists() for t in targets)
    assert "Read-only file system" in result.stderr_tail or "Permission denied" in result.stderr_tail


def test_the_verifier_and_its_fixtures_cannot_be_read() -> None:
    needs(filesystem=True)
    # The private verifier is a directory in the temporary root with its files in it: the search walks every
    # path of the machine down to that depth (and one below). Walking all of / took 21 s where /tmp holds other
    # checkouts' virtual environments, none of which can hold a verifier.
    depth = len(Path(tempfile.gettempdir()).resolve().parts) + 2
    command = (
        f"cat {tempfile.gettempdir()}/bashgym-verifier-*/expected.txt;"
        f" find / -maxdepth {depth} -path '*bashgym-verifier*' -type f 2>/dev/null -exec cat {{}} +"
    )
    result = run_attempt(task(timeout_s=30.0), command)
    assert SECRET not in result.stdout


def test_the_network_is_out_of_reach() -> None:
    needs(network=True)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        result = run_attempt(task(), f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
        with pytest.raises(TimeoutError):
            server.accept()
    assert "connected" not in result.stdout and result.exit_code != 0


def test_the_environment_is_scrubbed_and_home_is_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BASHGYM_SECRET_PROBE", "do-not-leak")
    result = run_attempt(task(), "env; pwd")
    assert "do-not-leak" not in result.stdout
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["HOME"] == result.stdout.strip().splitlines()[-1]
    assert set(env) <= {"PATH", "HOME", "LANG", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD"}


def test_wall_and_output_limits_end_an_attempt() -> None:
    slow = run_attempt(task(timeout_s=1.0), "sleep 30")
    assert slow.timed_out and not slow.passed and slow.duration_s < 10
    # Output past the limit kills the writer (SIGXFSZ) long before the wall timeout.
    loud = run_attempt(
        task(verifier='[ "$(cat "$OUTPUT")" = ready ]'), "yes ready", limits=Limits(output_bytes=64 * 1024)
    )
    assert not loud.passed and not loud.timed_out and loud.exit_code != 0


def test_every_canary_ends_tampered_and_not_passed() -> None:
    report = run_canaries(default_suite().tasks[0])
    print(f"isolation: {report['isolation']}")
    assert set(report["categories"]) == set(CANARIES) and len(CANARIES) >= 4
    assert report["guard_rate"] == 1.0, report["categories"]
    assert all(not c["passed"] and c["verifier_status"] == "tampered" for c in report["categories"].values())


def test_a_changed_verifier_file_changes_the_digest_the_attempt_is_judged_by() -> None:
    with Sandbox(task(), Limits()) as box:
        before = box.private_digest()
        (box.private / "expected.txt").write_text("something else")
        assert box.private_digest() != before


# A dataset row's inline check is data, not code we wrote: it runs inside the attempt's isolation.


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory anyone may write to, outside any sandbox, and not under a root-only parent."""
    path = Path(tempfile.mkdtemp(prefix="bashgym-outside-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_inline_check_still_judges_the_attempt_by_its_files_output_and_command() -> None:
    check = 'test -f out.txt && grep -qx ready "$OUTPUT" && grep -q tee command.sh && [ "$(cat notes.txt)" = a ]'
    assert run_command("echo ready | tee out.txt", {"notes.txt": "a\n"}, check)
    assert not run_command("echo nope | tee out.txt", {"notes.txt": "a\n"}, check)


def test_an_inline_check_cannot_write_outside_the_sandbox(outside: Path) -> None:
    needs(filesystem=True)
    owned = outside / "root-owned.txt"
    owned.write_text("original\n")
    owned.chmod(0o644)
    check = f"id -u > {outside}/who; echo pwned > {owned}; echo x > /tmp/escape-{outside.name}; true"
    assert run_command("true", {}, check)  # the check ran to its end, its writes refused
    assert not (outside / "who").exists()
    assert owned.read_text() == "original\n"
    assert not Path(f"/tmp/escape-{outside.name}").exists()


def test_an_inline_check_cannot_read_root_only_files(outside: Path) -> None:
    needs(filesystem=True)
    secret = outside / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    outside.chmod(0o755)
    assert not run_command("true", {}, f"grep -qF {SECRET} {secret}")
    assert not run_command("true", {}, "id -u | grep -qx 0")  # not root, either


def test_an_inline_check_cannot_reach_the_network_or_the_daemons_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    needs(network=True)
    monkeypatch.setenv("BASHGYM_SECRET_PROBE", "do-not-leak")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        assert not run_command("true", {}, f"exec 3<>/dev/tcp/127.0.0.1/{port}")
        with pytest.raises(TimeoutError):
            server.accept()
    assert not run_command("true", {}, "env | grep -q do-not-leak")


def test_an_untrusted_check_cannot_change_what_the_attempt_recorded() -> None:
    untrusted = task(fixtures={}, verifier_trust="untrusted", verifier='echo forged > "$OUTPUT"; echo x >&2; exit 3')
    result = run_attempt(untrusted, "echo ready")
    print(f"isolation: {result.isolation}")
    assert result.stdout == "ready\n" and result.stderr_tail == ""
    assert not result.passed and result.verifier_status == "ok" and result.isolation == ISOLATION.level


def test_an_untrusted_verifier_has_no_private_fixtures() -> None:
    with pytest.raises(ValueError, match="fixtures"):
        task(verifier_trust="untrusted")


@pytest.mark.parametrize("level", ["namespaces", "netns", "none"])
def test_an_inline_check_judges_alike_at_each_isolation_level(monkeypatch: pytest.MonkeyPatch, level: str) -> None:
    # A weaker level than this machine's, forced, so the paths of other hosts stay exercised here.
    strength = ["none", "netns", "namespaces"]
    if strength.index(level) > strength.index(ISOLATION.level):
        pytest.skip(f"this machine grants {ISOLATION.level}, below {level}: {ISOLATION.detail}")
    monkeypatch.setattr(sandbox, "probe_isolation", lambda: Isolation(level, False, False, "forced by the test"))
    check = 'grep -qx ready "$OUTPUT" && test -f out.txt && grep -q tee command.sh && [ "$PWD" = "$SANDBOX" ]'
    assert run_command("echo ready | tee out.txt", {}, check)
    assert not run_command("echo nope | tee out.txt", {}, check)
