"""An external job named by its project and registered versions is an official run there, like a local launch.

Issue 52: `POST /v1/jobs/hf` and `/v1/jobs/providers/NAME` took only a hand-written tracking context, else their run
landed in `unassigned`. Now `?project=&model_version=&dataset_version=` (and `jobs hf submit --project ...`) go
through the launch pipeline's one resolve stage: the job trains the model version's Hub repo on the dataset version's
data, recorded `verified`. The Hub stand-in takes the job and does not run it: the run's record is what is asserted."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, cli, running_daemon
from tests.support.hub_jobs import daemon_env
from tests.support.hub_standin import HubStandIn, TokenInfo

PROJECT, OTHER = "nightly", "elsewhere"
WRITE, JOB = "hf_write_secret_token", "hf_job_secret_token"
IMAGE = "ghcr.io/acme/bashgym-job@sha256:" + "0" * 64


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubStandIn]:
    tokens = {
        WRITE: TokenInfo(user="alice", role="write", orgs=("acme",)),
        JOB: TokenInfo("acme-bot", "fineGrained", ("acme",), scoped=(("acme", ("repo.content.read", "repo.write")),)),
    }
    data = sft_data(tmp_path_factory.mktemp("data"), rows=4).read_bytes()
    with HubStandIn(tokens=tokens) as server:
        server.add_repo("acme/tiny", files={"config.json": b"{}"})
        server.add_repo("acme/moving", files={"config.json": b"{}"})
        server.add_repo("acme/data", repo_type="dataset", files={"train.jsonl": data})
        yield server


@pytest.fixture(scope="module")
def daemon(hub: HubStandIn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """Project nightly holding Hub model versions (tiny-hub at acme/tiny's head, moving-v1 at acme/moving's first
    commit, since moved on), a local one (tiny-files) and the Hub dataset's rows as rows-v1."""
    root = tmp_path_factory.mktemp("official-jobs")
    env = daemon_env(hub.url, write=WRITE, job=JOB, image=IMAGE, poll_s=30)  # job states are not read here
    (root / "files").mkdir()
    (root / "files" / "config.json").write_text("{}")
    (root / "rows.jsonl").write_bytes(hub.state.repos["acme/data"].files["train.jsonl"])
    with running_daemon(root / "home", env=env) as running:
        with running.client() as admin:
            for project in (PROJECT, OTHER):
                assert admin.post("/v1/projects", json={"project_id": project, "name": project}).status_code == 201
        moving = hub.state.repos["acme/moving"].head()
        hub.add_repo("acme/moving", files={"config.json": b'{"moved": true}'})
        register = ("--project", PROJECT, "--model", "tiny")
        for args in (
            ("model", "register", *register, "--version", "tiny-hub", "--hub-id", "acme/tiny",
             "--revision", hub.state.repos["acme/tiny"].head()),
            ("model", "register", *register, "--version", "moving-v1", "--hub-id", "acme/moving", "--revision", moving),
            ("model", "register", *register, "--version", "tiny-files", "--dir", str(root / "files")),
            ("dataset", "register", "--project", PROJECT, "--dataset", "rows", "--version", "rows-v1",
             "--file", str(root / "rows.jsonl")),
        ):  # fmt: skip
            done = cli(running.env(), *args)
            assert done.code == 0, done.stderr
        yield running


def token_env(daemon: RunningDaemon, actor: str, project: str, *capabilities: str) -> dict[str, str]:
    profile = "researcher" if not capabilities else "viewer"
    token = issue_token(daemon, actor, profile, project=project, capabilities=capabilities)
    return {**daemon.env(), "BASHGYM_TOKEN": token}


def as_user(daemon: RunningDaemon, env: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=daemon.url, headers={"Authorization": f"Bearer {env['BASHGYM_TOKEN']}"}, timeout=30)


def submission(output_repo: str) -> dict[str, Any]:
    return {
        "request": {"method": "sft", "max_steps": 2},
        "dataset": {"repo": "acme/data"},
        "output_repo": output_repo,
        "flavor": "a10g-small",
        "timeout_s": 600,
    }


def named(model_version: str = "tiny-hub", dataset_version: str = "rows-v1") -> dict[str, str]:
    return {"project": PROJECT, "model_version": model_version, "dataset_version": dataset_version}


def test_a_hub_job_named_by_project_and_versions_is_a_verified_run_there(
    daemon: RunningDaemon, hub: HubStandIn
) -> None:
    rita = token_env(daemon, "rita", PROJECT)
    with as_user(daemon, rita) as client:
        answer = client.post("/v1/jobs/hf", params=named(), json=submission("acme/official-sft"))
        assert answer.status_code == 201, answer.text
        job = answer.json()
        run = client.get(f"/v1/projects/{PROJECT}/runs/{job['run_id']}").json()
    assert job["project_id"] == PROJECT and job["state"] == "submitted", job
    assert run["context_status"] == "verified", run
    assert (run["model_version_id"], run["dataset_version_id"]) == ("tiny-hub", "rows-v1"), run
    # The job trains the model version's Hub repo, at the commit it pins, on the data the dataset version names.
    assert job["lineage"]["base_model"] == {"repo": "acme/tiny", "commit": hub.state.repos["acme/tiny"].head()}
    data = hub.state.repos["acme/data"].files["train.jsonl"]
    assert job["lineage"]["dataset"]["sha256"] == hashlib.sha256(data).hexdigest()
    sent = json.loads(hub.state.jobs[job["upstream_job_id"]].spec["environment"]["BASHGYM_JOB_REQUEST"])
    assert sent["base_model"] == "acme/tiny" and sent["hf_repo_owner"] == f"default/{PROJECT}", sent


def test_the_cli_submits_a_hub_job_by_project_and_versions(daemon: RunningDaemon) -> None:
    rita = token_env(daemon, "rita-cli", PROJECT)
    flags = ("--method", "sft", "--project", PROJECT, "--model-version", "tiny-hub", "--dataset-version", "rows-v1",
             "--dataset-repo", "acme/data", "--output-repo", "acme/official-cli", "--timeout", "10m")  # fmt: skip
    submitted = cli(rita, "jobs", "hf", "submit", *flags, "--json")
    assert submitted.code == 0, submitted.stderr
    job = submitted.json()
    with as_user(daemon, rita) as client:
        run = client.get(f"/v1/projects/{PROJECT}/runs/{job['run_id']}").json()
    assert job["project_id"] == PROJECT and run["context_status"] == "verified", run

    missing = cli(rita, "jobs", "hf", "submit", *[f if f != "tiny-hub" else "tiny-v9" for f in flags])
    assert missing.code != 0 and "tiny-v9" in missing.stderr and "model register" in missing.stderr, missing.stderr
    alone = cli(rita, "jobs", "hf", "submit", *flags[:2], "--model-version", "tiny-hub", "--dataset-repo", "acme/data",
                "--output-repo", "acme/x")  # fmt: skip
    assert alone.code == 2 and "give --project too" in alone.stderr, alone.stderr


@pytest.mark.parametrize(
    ("who", "status"),
    [
        ("researcher of another project", 403),
        ("reader of the project", 403),
    ],
)
def test_a_token_that_may_not_launch_in_the_project_is_refused_and_nothing_is_recorded(
    daemon: RunningDaemon, hub: HubStandIn, who: str, status: int
) -> None:
    env = (
        token_env(daemon, "otto", OTHER)
        if who.startswith("researcher")
        else token_env(daemon, "vic", PROJECT, "ledger.read")
    )
    before = len(hub.state.jobs)
    with as_user(daemon, env) as client:
        answer = client.post("/v1/jobs/hf", params=named(), json=submission("acme/refused"))
    assert answer.status_code == status, answer.text
    assert len(hub.state.jobs) == before


@pytest.mark.parametrize(
    ("query", "status", "says"),
    [
        (named(model_version="tiny-v9"), 404, "tiny-v9"),
        (named(dataset_version="rows-v9"), 404, "rows-v9"),
        (named(model_version="tiny-files"), 422, "cannot read them"),
        (named(model_version="moving-v1"), 422, "head"),
        ({"dataset_version": "rows-v1"}, 422, "name the project and model_version too"),
    ],
)
def test_what_a_hub_job_cannot_train_is_refused_saying_why(
    daemon: RunningDaemon, hub: HubStandIn, query: dict[str, str], status: int, says: str
) -> None:
    rita = token_env(daemon, "rita-refused", PROJECT)
    before = len(hub.state.jobs)
    body = submission("acme/refused")
    if "project" not in query:
        body["request"]["base_model"] = "acme/tiny"
    with as_user(daemon, rita) as client:
        answer = client.post("/v1/jobs/hf", params=query, json=body)
    assert answer.status_code == status and says in answer.text, answer.text
    assert len(hub.state.jobs) == before
