"""An official run from the terminal names its project and registered versions; the daemon composes the rest.

Issue 52: `bashgym training start --project demo ...` was `unknown option --project`, and an official run needed a
hand-written 17-field tracking context with sha256 digests, while `training plan` said "ready" for a launch that
would land in `unassigned`, which the gate never ships."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, register_versions

PROJECT = "nightly"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """A project holding a tiny model as tiny-v1 and 8 SFT rows as rows-v1, registered through the CLI."""
    root = tmp_path_factory.mktemp("official")
    tiny, data = build_tiny(root / "tiny"), sft_data(root, rows=8)
    with daemon_with_project(root / "home", PROJECT) as running:
        register_versions(running, PROJECT, tiny, data)
        yield running


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> dict[str, str]:
    """A researcher of the project: what a launch needs, nothing more."""
    return {**daemon.env(), "BASHGYM_TOKEN": issue_token(daemon, "rita", "researcher", project=PROJECT)}


def config(tmp: Path) -> str:
    path = tmp / "sft.json"
    path.write_text(json.dumps({"max_steps": 2, "batch_size": 4, "max_seq_length": 128}))
    return str(path)


OFFICIAL = ("--project", PROJECT, "--model-version", "tiny-v1", "--dataset-version", "rows-v1", "--method", "sft")


def test_plan_and_start_by_project_and_versions_make_a_verified_run(
    daemon: RunningDaemon, rita: dict[str, str], tmp_path: Path
) -> None:
    planned = cli(rita, "training", "plan", *OFFICIAL, "--config", config(tmp_path))
    assert planned.code == 0, planned.stdout + planned.stderr
    assert "ready: a launch would be accepted" in planned.stdout and "context verified" in planned.stdout
    started = cli(rita, "training", "start", *OFFICIAL, "--config", config(tmp_path), "--json")
    assert started.code == 0, started.stderr
    run = json.loads(started.stdout)
    assert run["project_id"] == PROJECT and run["context_status"] == "verified", run
    with daemon.client() as admin:
        record = admin.get(f"/v1/projects/{PROJECT}/runs/{run['run_id']}").json()
        admin.post(f"/v1/projects/{PROJECT}/runs/{run['run_id']}/stop")  # its record is what this test reads
    assert record["model_version_id"] == "tiny-v1" and record["dataset_version_id"] == "rows-v1", record
    assert record["config"]["model_check"] == "files", record["config"]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--project", PROJECT, "--model", "org/model", "--dataset-version", "rows-v1"), "--model-version"),
        (("--project", PROJECT, "--model-version", "tiny-v1", "--dataset-path", "DATA"), "--dataset-version"),
        (("--model-version", "tiny-v1", "--dataset-version", "rows-v1"), "give --project too"),
        (("--model", "org/model", "--experiment", "e1", "--dataset-version", "rows-v1"), "give --project too"),
    ],
)
def test_an_incomplete_official_launch_is_a_usage_error_saying_what_to_add(
    rita: dict[str, str], tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    flags = tuple(str(sft_data(tmp_path, rows=2)) if f == "DATA" else f for f in flags)
    for verb in ("plan", "start"):
        answered = cli(rita, "training", verb, "--method", "sft", *flags)
        assert answered.code == 2 and says in answered.stderr, (verb, answered.stderr)
    (tmp_path / "context.json").write_text("{}")
    with_context = cli(rita, "training", "plan", *OFFICIAL, "--tracking-context", str(tmp_path / "context.json"))
    assert with_context.code == 2 and "not both" in with_context.stderr, with_context.stderr


def test_a_plan_without_a_project_says_the_run_would_be_unofficial(
    rita: dict[str, str], daemon: RunningDaemon, tmp_path: Path
) -> None:
    data = sft_data(tmp_path, rows=8)
    admin = daemon.env()  # a run without a context goes to `unassigned`, which a project's researcher cannot reach
    planned = cli(admin, "training", "plan", "--method", "sft", "--model", "org/model", "--dataset-path", str(data))
    assert planned.code == 0, planned.stdout + planned.stderr
    assert "UNOFFICIAL" in planned.stdout and "never ships" in planned.stdout, planned.stdout
    assert "--project P --model-version MV --dataset-version DV" in planned.stdout
    assert "ready: a launch would be accepted" not in planned.stdout


def test_a_default_project_serves_every_command_that_needs_one(rita: dict[str, str], tmp_path: Path) -> None:
    user = {**rita, "BASHGYM_HOME": str(tmp_path / "me")}  # this user's own settings, not the daemon's
    unnamed = cli(user, "training", "list", "--json")
    assert unnamed.code == 2 and "--project" in unnamed.stderr, unnamed.stderr
    refused = cli(user, "project", "use", "no-such-project")
    assert refused.code in {4, 5} and not (tmp_path / "me" / "bashgym.toml").exists(), refused.stderr

    used = cli(user, "project", "use", PROJECT)
    assert used.code == 0, used.stderr
    assert (tmp_path / "me" / "bashgym.toml").read_text() == f'project = "{PROJECT}"\n'
    listed = cli(user, "training", "list", "--json")
    assert listed.code == 0 and isinstance(json.loads(listed.stdout), list), listed.stderr
    status = cli(user, "status", "--json")
    assert status.code == 0 and json.loads(status.stdout)["default_project"] == PROJECT, status.stdout
    # An official launch naming its versions is in the default project.
    planned = cli(user, "training", "plan", "--model-version", "tiny-v1", "--dataset-version", "rows-v1",
                  "--method", "sft", "--config", config(tmp_path))  # fmt: skip
    assert planned.code == 0 and "context verified" in planned.stdout, planned.stdout + planned.stderr
    # The environment wins over the file, and an explicit --project over both.
    elsewhere = cli({**user, "BASHGYM_PROJECT": "elsewhere"}, "training", "list", "--json")
    assert elsewhere.code != 0 and "elsewhere" in elsewhere.stderr, elsewhere.stderr
    named = cli({**user, "BASHGYM_PROJECT": "elsewhere"}, "training", "list", "--project", PROJECT, "--json")
    assert named.code == 0, named.stderr


def test_runs_are_one_noun_and_the_older_spellings_are_the_same_commands(rita: dict[str, str], tmp_path: Path) -> None:
    """Issue 52: runs were listed by `ledger runs` and `training list` with other columns, and `bashgym run list`
    was "did you mean runcard?"."""
    started = cli(rita, "run", "start", *OFFICIAL, "--config", config(tmp_path), "--json")
    assert started.code == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    stopped = cli(rita, "run", "stop", run_id, "--project", PROJECT, "--yes")
    assert stopped.code == 0, stopped.stderr
    listed = [cli(rita, *verb, "--project", PROJECT, "--json") for verb in (("run", "list"), ("training", "list"))]
    assert all(done.code == 0 for done in listed), [done.stderr for done in listed]
    assert listed[0].stdout == listed[1].stdout and run_id in listed[0].stdout
    shown = [
        cli(rita, *verb, run_id, "--project", PROJECT, "--json") for verb in (("run", "show"), ("training", "status"))
    ]
    assert shown[0].code == shown[1].code == 0 and shown[0].json()["run_id"] == run_id == shown[1].json()["run_id"]
    table = cli(rita, "run", "list", "--project", PROJECT)
    assert table.code == 0 and run_id in table.stdout and "verified" in table.stdout, table.stdout
