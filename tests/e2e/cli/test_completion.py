"""Shell completion as a user meets it: the printed scripts run in real shells and offer the daemon's ids."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.factories import campaign_spec, tracking_context
from tests.support.helpers import RunningDaemon, cli

# The directory of this interpreter holds the `bashgym` console script the scripts call by name.
BIN = str(Path(sys.executable).parent)
CAMPAIGN = campaign_spec()


def shell_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}


def complete(env: dict[str, str], shell: str, *words: str) -> list[str]:
    """What `__complete` answers with the cursor on the last word."""
    answer = cli(env, "__complete", shell, str(len(words)), "--", "bashgym", *words)
    assert answer.code == 0, answer.stderr
    return answer.stdout.splitlines()


def in_bash(env: dict[str, str], words: str, cwd: Path | None = None) -> list[str]:
    """COMPREPLY of the printed bash script for `bashgym <words>`, the cursor on the last word."""
    line = (
        "source <(bashgym completion bash) && complete -p bashgym >/dev/null && "
        f"COMP_WORDS=(bashgym {words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _bashgym; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", line], env=shell_env(env), cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [reply for reply in done.stdout.splitlines() if reply]


def test_project_run_and_campaign_ids_come_from_the_daemon(daemon: RunningDaemon) -> None:
    env = daemon.env()
    assert cli(env, "project", "create", "--id", "other", "--name", "Other").code == 0
    with daemon.client() as client:
        run_id = client.post("/v1/runs", json={"method": "sft", "tracking_context": tracking_context()}).json()[
            "record"
        ]["run_id"]
        assert client.post("/v1/projects/nightly/campaigns", json=CAMPAIGN).status_code == 201

    assert complete(env, "bash", "ledger", "runs", "--project", "") == ["nightly", "other"]
    assert complete(env, "bash", "project", "show", "o") == ["other"]
    assert complete(env, "fish", "ledger", "runs", "--project=n") == ["--project=nightly\tNightly SFT"]
    assert complete(env, "bash", "ledger", "run", "--project", "nightly", "") == [run_id]
    assert complete(env, "zsh", "campaign", "show", "--project", "nightly", "") == [
        "bash-q4:draft: Better bash commands"
    ]
    # Without a project on the line there is no list to ask for.
    assert complete(env, "bash", "ledger", "run", "") == []


def test_a_daemon_that_is_down_or_refuses_gives_no_ids_quickly_and_no_error(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    refused = {**daemon.env(), "BASHGYM_TOKEN": "not-a-token"}
    assert complete(refused, "bash", "ledger", "runs", "--project", "") == []
    daemon.stop()
    started = time.monotonic()
    down = cli(daemon.env(), "__complete", "bash", "4", "--", "bashgym", "ledger", "runs", "--project", "")
    assert (down.code, down.stdout, down.stderr) == (0, "", "")
    assert time.monotonic() - started < 10  # the interpreter's start dominates; the fetch gives up within 1 s
    no_home = {**os.environ, "BASHGYM_HOME": str(tmp_path / "none"), "BASHGYM_API": daemon.url}
    assert complete(no_home, "bash", "project", "show", "") == []


def test_the_bash_script_completes_commands_ids_and_files_in_a_real_bash(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = daemon.env()
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
    assert in_bash(env, "ledger con") == ["context"]
    assert in_bash(env, "ledger context --project ''") == ["nightly"]
    assert in_bash(env, "eval run --split h") == ["holdout"]
    (tmp_path / "spec.json").write_text("{}")
    assert in_bash(env, "campaign create --project nightly --spec sp", cwd=tmp_path) == ["spec.json"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here; its script is not checked")
def test_the_zsh_script_parses() -> None:
    script = cli(dict(os.environ), "completion", "zsh")
    assert script.code == 0
    checked = subprocess.run(["zsh", "-n"], input=script.stdout, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here; its script is not checked")
def test_the_fish_script_parses_and_completes_in_a_real_fish(daemon: RunningDaemon, tmp_path: Path) -> None:
    script = cli(dict(os.environ), "completion", "fish")
    assert script.code == 0
    path = tmp_path / "bashgym.fish"
    path.write_text(script.stdout)
    checked = subprocess.run(["fish", "--no-execute", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr

    env = shell_env({**daemon.env(), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
    asked = f"source {path}; complete -C 'bashgym ledger con'; complete -C 'bashgym ledger runs --project '"
    done = subprocess.run(["fish", "--no-config", "-c", asked], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "context\thealth signals, inventory, lineage and recent activity of a project",
        "nightly\tNightly",
    ]
