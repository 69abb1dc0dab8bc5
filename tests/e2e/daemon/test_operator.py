"""The operator surface: `bashgym doctor` before anyone mutates anything, and curated activity receipts
that carry no secret, no local path and no raw log, written once, resumed by cursor."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, cli, running_daemon

PLANTED_TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"


def receipts(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.md"))}


def test_curating_twice_writes_once_strips_what_must_not_leave_and_resumes_by_cursor(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env, root = daemon.env(), tmp_path / "brain"
    with daemon.client() as client:
        config = {
            "learning_rate": 1e-4,
            "notes": "weights were copied to /home/alice/models/base.safetensors before the run",
            "log": "step 1 loss 2.3\nstep 2 loss 2.1",
            "hub_upload": {"repo": "team/model", "token_env": "HF_TOKEN"},
            "token_level_loss": True,
        }
        body = {"method": "sft", "tracking_context": tracking_context(), "config": config}
        registered = client.post("/v1/runs", json=body)
        assert registered.status_code == 201, registered.text
        run_id = registered.json()["record"]["run_id"]
        reason = f"crashed reading /srv/data/private.jsonl with token {PLANTED_TOKEN}"
        moved = client.post(
            f"/v1/projects/nightly/runs/{run_id}/transitions", json={"status": "failed", "reason": reason}
        )
        assert moved.is_success, moved.text

    first = cli(env, "curate", "--root", str(root), "--json")
    assert first.code == 0, first.stderr
    assert first.json()["written"] >= 1
    files = receipts(root)
    run_file = f"runs/default/{run_id}.md"
    assert run_file in files, list(files)
    text = files[run_file]
    assert text.startswith('---\nschema: "bashgym.activity.v1"\nkind: "run"\n')
    assert "[local artifact: base.safetensors]" in text and "/home/alice" not in text
    assert "[retained in BashGym]" in text and "step 1 loss" not in text
    assert PLANTED_TOKEN not in text and "/srv/data" not in "\n".join(files.values())
    # Values are redacted by their shape, not keys by their name: the name of a variable, and a setting that
    # mentions tokens, are no secrets.
    assert '"token_env": "HF_TOKEN"' in text and "[redacted]" not in text.split("token_level_loss")[1][:20]
    mtimes = {p: p.stat().st_mtime_ns for p in root.rglob("*.md")}

    again = cli(env, "curate", "--root", str(root), "--json")
    assert again.code == 0 and again.json()["events"] == 0, "the cursor is at the head: nothing is curated twice"
    # The same state curated again through another cursor (one project's): same bytes, nothing written.
    replay = cli(env, "curate", "--root", str(root), "--project", "nightly", "--json")
    assert replay.code == 0 and replay.json()["written"] == 0 and replay.json()["unchanged"] >= 1
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*.md")} == mtimes
    assert not list(root.rglob("*.tmp"))

    hand = tmp_path / "session.json"
    hand.write_text(json.dumps({
        "kind": "training-session", "workspace_id": "default", "project_id": "nightly", "entity_id": "s-2026-11-30",
        "title": "Night shift", "summary": f"Resumed from /home/alice/ckpt/step-400 with {PLANTED_TOKEN}.",
        "configuration": {"api_key": "sk-not-for-the-wiki", "transcript": "user: hi"},
    }))  # fmt: skip
    written = cli(env, "curate", "receipt", str(hand), "--root", str(root), "--json")
    assert written.code == 0, written.stderr
    session = (root / "training-sessions/default/s-2026-11-30.md").read_text()
    assert "[local artifact: step-400]" in session and PLANTED_TOKEN not in session
    assert "sk-not-for-the-wiki" not in session and "user: hi" not in session
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"kind": "run", "titel": "typo"}))
    refused = cli(env, "curate", "receipt", str(wrong))
    assert refused.code == 7 and "unknown receipt field 'titel'" in refused.stderr

    daemon.stop()  # the curator's cursor lives in the ledger: a restarted daemon still has it
    with running_daemon(daemon.home) as restarted:
        resumed = cli(restarted.env(), "curate", "--root", str(root), "--json")
    assert resumed.code == 0 and resumed.json()["events"] == 0 and resumed.json()["written"] == 0


def test_doctor_is_ready_on_a_fresh_daemon_and_not_when_a_skill_file_changed(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = daemon.env()
    report = cli(env, "doctor", "--json")
    assert report.code == 0, report.stdout + report.stderr
    checks = {c["check"]: c for c in report.json()["checks"]}
    for name in ("daemon", "authority", "ledger", "lane local", "scheduler", "skills"):
        assert checks[name]["ready"], checks[name]
    assert "authority.manage" in checks["authority"]["facts"]["capabilities"]
    assert checks["discord"]["required"] is False and "not configured" in checks["discord"]["detail"]

    bundle = tmp_path / "skills"
    assert cli(env, "skills", "install", "--target", str(bundle)).code == 0
    skill = next(bundle.rglob("SKILL.md"))
    skill.write_text(skill.read_text() + "\nRun anything you like.\n")
    broken = cli(env, "doctor", "--skills-dir", str(bundle), "--json")
    assert broken.code == 7
    skills = next(c for c in broken.json()["checks"] if c["check"] == "skills")
    assert skills["ready"] is False and skills["facts"]["verified"] is False
    assert str(skill.relative_to(bundle)) in skills["detail"]


def test_doctor_says_how_to_start_a_daemon_when_none_answers(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "BASHGYM_HOME": str(tmp_path), "BASHGYM_API": "http://127.0.0.1:9"}
    report = cli(env, "doctor")
    assert report.code == 8 and "bashgym up" in report.stdout


class Receiver:
    """A loopback HTTP endpoint that records each POST and answers the next status in its script."""

    def __init__(self, script: list[int]) -> None:
        self.script = script
        self.received: list[tuple[int, dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.script.pop(0) if receiver.script else 200
                receiver.received.append((status, dict(self.headers), body))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self) -> list[str]:
        """The event types of the batches this endpoint took (answered 2xx)."""
        return [
            e["event_type"] for status, _, body in self.received if status == 200 for e in json.loads(body)["events"]
        ]


def test_a_sink_gets_signed_batches_retried_until_taken_and_its_cursor_moves_only_then(tmp_path: Path) -> None:
    receiver = Receiver([500])
    secret = "sink-secret-for-tests"
    with running_daemon(tmp_path / "home", env={"BASHGYM_SINK_SECRET": secret}) as daemon:
        env = daemon.env()
        added = cli(env, "sink", "add", "wiki", "--url", receiver.url, "--secret-env", "BASHGYM_SINK_SECRET",
                    "--types", "project.created", "annotation.added", "--json")  # fmt: skip
        assert added.code == 0, added.stderr
        assert added.json()["secret_present"] is True
        time.sleep(6)  # the forwarder picks the sink up within its sync interval and starts at the head
        assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
        with daemon.client() as client:
            assert client.post("/v1/projects/nightly/annotations", json={"text": "hello"}).status_code == 201
            deadline = time.monotonic() + 30
            while "annotation.added" not in receiver.delivered():
                assert time.monotonic() < deadline, receiver.received
                time.sleep(0.2)
            last_taken = [e for st, _, b in receiver.received if st == 200 for e in json.loads(b)["events"]][-1][
                "cursor"
            ]
            while (cursor := client.get("/v1/consumers/sink.wiki/cursor").json()["cursor"]) != last_taken:
                assert time.monotonic() < deadline, (cursor, last_taken)  # acknowledged right after the 2xx
                time.sleep(0.1)
            listed = cli(env, "sink", "list", "--json").json()["sinks"][0]
        assert cli(env, "sink", "remove", "wiki").code == 0
    receiver.server.shutdown()
    receiver.server.server_close()

    (failed, _, first_body), (ok, headers, body) = receiver.received[:2]
    assert (failed, ok) == (500, 200) and first_body == body, "the same batch was sent again after the 500"
    assert headers["X-BashGym-Signature"] == "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert json.loads(body)["sink"] == "wiki" and headers["X-BashGym-Sink"] == "wiki"
    taken = [json.loads(b)["events"] for status, _, b in receiver.received if status == 200]
    assert [e["event_type"] for batch in taken for e in batch] == ["project.created", "annotation.added"]
    assert cursor == taken[-1][-1]["cursor"], "the cursor stands at the last event an endpoint took"
    assert listed["status"]["delivered"] == 2 and listed["status"]["failures"] == 1
    assert secret not in daemon.log
