"""Notices: ledger events rendered for people. The daemon serves them to the bot by cursor and, with no
Discord configured and --console-notices, prints them on its console channel, resuming from its stored cursor after
a restart."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.helpers import RunningDaemon, cli, running_daemon


def wait_for_console(daemon: RunningDaemon, text: str, timeout_s: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(text in line for line in daemon.console):
            return list(daemon.console)
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never reached the console: {daemon.console}")


def test_the_console_channel_prints_notices_once_and_the_bot_reads_them_by_cursor(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_daemon(home, "--console-notices") as daemon:  # the console channel prints only where asked for
        env = daemon.env()
        assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
        with daemon.client() as client:
            head = client.get("/v1/consumers/probe/cursor").json()
        unrouted = cli(env, "project", "channel", "nightly")
        assert unrouted.code == 5, "no channel routed yet"
        # The hint names the project; only the channel is the user's to choose (issue 52: pasteable next actions).
        assert "bashgym project channel nightly --channel CHANNEL_ID" in unrouted.stderr, unrouted.stderr
        routed = cli(env, "project", "channel", "nightly", "--channel", "4242")
        assert routed.code == 0, routed.stderr
        assert cli(env, "project", "channel", "nightly", "--json").json()["channel_id"] == "4242"
        with daemon.client() as client:
            bad = client.put("/v1/projects/nightly/channel", json={"channel_id": "general"})
            assert bad.status_code == 422
            evaluated = client.post("/v1/projects/nightly/evaluations", json={"gold": True, "limit_tasks": 2})
            assert evaluated.status_code in {201, 202}, evaluated.text
        lines = wait_for_console(daemon, "Evaluation completed")
        with daemon.client() as client:
            page = client.get("/v1/notices", params={"after_cursor": 0, "limit": 200}).json()
            assert page["next_cursor"] >= head["cursor"]
    text = "\n".join(lines)
    assert "Notifications of project nightly now come here" in text
    assert "pass@1: 1" in text and "suite: bash-tasks-v1" in text and "corr " in text
    by_type = {n["event_type"]: n for n in page["notices"]}
    evaluation = by_type["eval_result.recorded"]
    assert evaluation["channel_id"] == "4242" and evaluation["outcome"] == "info"
    assert len(evaluation["nonce"]) == 25 and evaluation["footer"].startswith("nightly · corr ")
    assert "project.created" not in by_type, "bookkeeping events render to nothing"

    # The console resumes at its stored cursor: nothing printed twice.
    with running_daemon(home, "--console-notices") as again:
        with again.client() as client:
            assert client.put("/v1/projects/nightly/channel", json={"channel_id": "4343"}).status_code == 201
        relines = wait_for_console(again, "now come here")
    assert not any("Evaluation completed" in line for line in relines)
