"""Hugging Face Jobs as a hostile researcher would use them, against a real daemon and the Hub stand-in with known
tokens: code the caller chooses never receives the operator's secrets, and the daemon's token reads nothing the
operator did not allow for the caller's project.

Issue 50, finding 2: `POST /v1/jobs/hf` ran the caller's image with the daemon's write token as its secret. The
image now comes from the operator's digest-pinned allow-list, the job gets a separate fine-grained job token whose
grants stay inside the allowed namespaces (never the daemon's own token, never a classic one), and a dataset with
command checks does not run where that token is readable. Finding 7: a dataset or base model in a namespace outside
the operator's read namespaces was downloaded with the daemon's token, and a wrong context digest was answered with
the first hex digits of the private file's sha256.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, running_daemon
from tests.support.hub_standin import HubStandIn, TokenInfo

DAEMON_TOKEN = "hf_daemon_" + "Dq7" * 10
JOB_TOKEN = "hf_job_" + "Jb4" * 10
IMAGE = "ghcr.io/acme/bashgym-job@sha256:" + "a1" * 32
JOB_GRANTS = (("acme", ("repo.content.read", "repo.write")),)
WIDER_GRANTS = (*JOB_GRANTS, ("secret", ("repo.write",)))
SCOPED_JOB_TOKEN = TokenInfo("acme-bot", "fineGrained", ("acme",), scoped=JOB_GRANTS)
SFT_ROWS = "".join(
    json.dumps({"messages": [{"role": "user", "content": f"Count notes{i}"}, {"role": "assistant", "content": "wc"}]})
    + "\n"
    for i in range(4)
).encode()
COMMAND_ROW = {"prompt": "Count the lines", "verifier": {"kind": "command", "task_id": "t", "check": "true"}}
EXACT_ROW = {"prompt": "Say ok", "verifier": {"kind": "exact_match", "task_id": "t", "expected": "ok"}}
# The trainer reads each of these as a command check: plain, the kind escaped as JSON allows, a BOM before it.
CHECKS = {
    "plain.jsonl": (json.dumps(COMMAND_ROW) + "\n" + json.dumps(EXACT_ROW) + "\n").encode(),
    "escaped.jsonl": (
        json.dumps(EXACT_ROW) + "\n" + json.dumps(COMMAND_ROW).replace('"command"', '"\\u0063ommand"')
    ).encode(),
    "bom.jsonl": b"\xef\xbb\xbf" + (json.dumps(COMMAND_ROW) + "\n" + json.dumps(EXACT_ROW) + "\n").encode(),
}


@pytest.fixture(scope="module")
def hub() -> Iterator[HubStandIn]:
    tokens = {DAEMON_TOKEN: TokenInfo("alice", "write", ("acme", "secret")), JOB_TOKEN: SCOPED_JOB_TOKEN}
    with HubStandIn(tokens=tokens) as standin:
        standin.add_repo("acme/tiny", files={"config.json": b"{}"}, private=True)
        standin.add_repo("acme/data", repo_type="dataset", files={"train.jsonl": SFT_ROWS}, private=True)
        standin.add_repo("acme/checks", repo_type="dataset", files=CHECKS, private=True)
        # The daemon's token reads these (alice is in org secret), but no project may read namespace `secret`.
        standin.add_repo("secret/data", repo_type="dataset", files={"train.jsonl": SFT_ROWS + b"\n"}, private=True)
        standin.add_repo("secret/base", files={"config.json": b'{"private": true}'}, private=True)
        standin.add_repo("opencorp/tiny", files={"config.json": b"{}"})  # public, outside every read namespace
        yield standin


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, hub: HubStandIn) -> Iterator[RunningDaemon]:
    env = {
        "HF_TOKEN": DAEMON_TOKEN,
        "HF_JOB_TOKEN": JOB_TOKEN,
        "BASHGYM_HF_ENDPOINT": hub.url,
        "BASHGYM_HF_NAMESPACES": "acme",
        "BASHGYM_HF_JOB_IMAGES": IMAGE,
        "BASHGYM_HF_READ_NAMESPACES": "default/alpha:acme",
        "BASHGYM_EXTERNAL_POLL_S": "2",
    }
    with running_daemon(tmp_path_factory.mktemp("hf-job-secrets") / "home", env=env) as running:
        yield running


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    """A researcher of project alpha: the least privilege that submits a Hugging Face Job there."""
    return issue_token(daemon, "rita", "researcher", project="alpha")


@pytest.fixture
def job_token_as(hub: HubStandIn) -> Iterator[Any]:
    """Make the Hub say the job token is another kind of token, as the operator might have configured it."""

    def replace(info: TokenInfo) -> None:
        assert hub.state.tokens is not None
        hub.state.tokens[JOB_TOKEN] = info

    yield replace
    replace(SCOPED_JOB_TOKEN)


def submission(
    *, repo: str = "acme/data", file: str = "train.jsonl", data: bytes = SFT_ROWS, **request: Any
) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    version = f"rows-{digest[:12]}"
    context = tracking_context(project_id="alpha", dataset_content_digest=digest, dataset_version_id=version)
    return {
        "request": {"method": "sft", "base_model": "acme/tiny", "max_steps": 2, "tracking_context": context, **request},
        "dataset": {"repo": repo, "file": file},
        "output_repo": "acme/alpha-out",
        "flavor": "cpu-basic",
        "timeout_s": 600,
    }


def refused(daemon: RunningDaemon, hub: HubStandIn, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """Submit `body` as `token`; it must be refused with nothing recorded and nothing sent to the Hub's jobs."""
    jobs_before = set(hub.state.jobs)
    with tenant(daemon, token) as caller:
        before = caller.get("/v1/jobs").json()["jobs"]
        answer = caller.post("/v1/jobs/hf", json=body)
        assert answer.status_code in {403, 422}, answer.text
        assert caller.get("/v1/jobs").json()["jobs"] == before
    assert set(hub.state.jobs) == jobs_before
    return dict(answer.json()["error"])


def submitted(daemon: RunningDaemon, hub: HubStandIn, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """Submit `body` as `token`; answer the job spec the Hub received."""
    with tenant(daemon, token) as caller:
        answer = caller.post("/v1/jobs/hf", json=body)
    assert answer.status_code == 201, answer.text
    return dict(hub.state.jobs[answer.json()["upstream_job_id"]].spec)


def test_a_caller_chosen_image_is_refused(daemon: RunningDaemon, hub: HubStandIn, rita: str) -> None:
    for image in ("attacker/steal-token:latest", "ghcr.io/acme/bashgym-job:latest", IMAGE.replace("a1", "b2", 1)):
        error = refused(daemon, hub, rita, {**submission(), "image": image})
        assert IMAGE in error["message"] and "BASHGYM_HF_JOB_IMAGES" in error["hint"], error


def test_the_job_gets_the_job_token_as_its_only_secret(daemon: RunningDaemon, hub: HubStandIn, rita: str) -> None:
    for body in (submission(), {**submission(), "image": IMAGE}):
        spec = submitted(daemon, hub, rita, body)
        assert spec["dockerImage"] == IMAGE
        assert spec["secrets"] == {"HF_TOKEN": JOB_TOKEN}
        visible = json.dumps([spec.get("command"), spec.get("arguments"), spec.get("environment")])
        assert JOB_TOKEN not in visible and DAEMON_TOKEN not in json.dumps(spec)


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (TokenInfo("acme-bot", "write", ("acme",)), "classic write token"),
        (TokenInfo("acme-bot", "read", ("acme",)), "classic read token"),
        (TokenInfo("acme-bot", "fineGrained", ("acme", "secret"), scoped=WIDER_GRANTS), "secret"),
        (TokenInfo("acme-bot", "fineGrained", ("acme",), scoped=(("acme", ("repo.content.read",)),)), "cannot write"),
    ],
)
def test_a_job_token_that_can_do_more_than_the_job_needs_is_refused(
    daemon: RunningDaemon, hub: HubStandIn, rita: str, job_token_as: Any, info: TokenInfo, expected: str
) -> None:
    job_token_as(info)
    error = refused(daemon, hub, rita, submission())
    assert expected in error["message"] and "fine-grained" in error["hint"], error
    assert JOB_TOKEN not in json.dumps(error) and DAEMON_TOKEN not in json.dumps(error)


@pytest.mark.parametrize(("method", "file"), [("rlvr", name) for name in CHECKS] + [("grpo", "plain.jsonl")])
def test_a_dataset_with_command_checks_does_not_run_in_a_job(
    daemon: RunningDaemon, hub: HubStandIn, rita: str, method: str, file: str
) -> None:
    body = submission(repo="acme/checks", file=file, data=CHECKS[file], method=method)
    error = refused(daemon, hub, rita, body)
    assert "command check" in error["message"] and "token" in error["message"], error
    assert "local" in error["hint"], error


def test_a_repo_outside_the_projects_read_namespaces_is_not_read_with_the_daemons_token(
    daemon: RunningDaemon, hub: HubStandIn, rita: str
) -> None:
    beta = issue_token(daemon, "bo", "researcher", project="beta")
    beta_body = submission(base_model="opencorp/tiny")  # public: only the dataset is beyond project beta's reach
    beta_body["request"]["tracking_context"]["project_id"] = "beta"
    attempts = [
        (rita, submission(repo="secret/data", data=SFT_ROWS + b"\n"), "secret/data"),
        (rita, submission(base_model="secret/base"), "secret/base"),
        (beta, beta_body, "acme/data"),  # acme is readable for project alpha only
    ]
    for token, body, repo in attempts:
        seen = len(hub.state.calls)
        error = refused(daemon, hub, token, body)
        assert repo in error["message"] and "BASHGYM_HF_READ_NAMESPACES" in error["hint"], error
        calls = hub.state.calls[seen:]
        assert not [c for c in calls if "/resolve/" in c[1]], "nothing was downloaded"
        assert not [c for c in calls if c[2] is not None and repo in c[1]], "the daemon's token never asked about it"


def test_a_public_repo_outside_the_read_namespaces_is_read_without_a_token(
    daemon: RunningDaemon, hub: HubStandIn, rita: str
) -> None:
    seen = len(hub.state.calls)
    submitted(daemon, hub, rita, submission(base_model="opencorp/tiny"))
    asked = [c for c in hub.state.calls[seen:] if "opencorp/tiny" in c[1]]
    assert asked and all(token is None for _method, _path, token in asked), asked


def test_a_wrong_context_digest_is_answered_without_the_files_digest(
    daemon: RunningDaemon, hub: HubStandIn, rita: str
) -> None:
    actual = hashlib.sha256(SFT_ROWS).hexdigest()
    claimed = "c0ffee" * 10 + "c0ff"
    body = submission()
    body["request"]["tracking_context"].update(dataset_content_digest=claimed, dataset_version_id="rows-claimed")
    error = refused(daemon, hub, rita, body)
    text = json.dumps(error)
    assert not [actual[i : i + 8] for i in range(len(actual) - 7) if actual[i : i + 8] in text], error
    assert claimed in error["message"], error


# -- the same rule for SkyPilot and dstack plans the daemon launches --------------------------------------------------


@pytest.mark.parametrize("file", sorted(CHECKS))
def test_a_plan_with_command_checks_is_not_launched(daemon: RunningDaemon, rita: str, file: str) -> None:
    with tenant(daemon, rita) as caller:
        uploaded = caller.put("/v1/blobs", params={"project": "alpha"}, content=CHECKS[file]).json()["sha256"]
        request = {
            "method": "grpo",
            "base_model": "acme/tiny",
            "dataset_path": f"bashgym://artifacts/sha256/{uploaded}",
            "tracking_context": tracking_context(project_id="alpha"),
        }
        before = caller.get("/v1/jobs").json()["jobs"]
        answer = caller.post("/v1/compute/plans", json={"engine": "dstack", "request": request, "launch": True})
        assert answer.status_code == 403, answer.text
        assert "the dstack task" in answer.json()["error"]["message"]
        assert caller.get("/v1/jobs").json()["jobs"] == before


def test_a_launched_plan_gets_the_job_token_never_the_daemons(tmp_path_factory: pytest.TempPathFactory) -> None:
    from bashgym.daemon.external.service import ExternalJobs
    from bashgym.daemon.settings import load_settings

    settings = load_settings({}, home=str(tmp_path_factory.mktemp("plan-home")))
    environ = {"HF_TOKEN": DAEMON_TOKEN, "HF_JOB_TOKEN": JOB_TOKEN}
    assert ExternalJobs(settings, None, environ).plan_secrets() == {"HF_TOKEN": JOB_TOKEN}  # type: ignore[arg-type]
    alone = ExternalJobs(settings, None, {"HF_TOKEN": DAEMON_TOKEN})  # type: ignore[arg-type]
    assert alone.plan_secrets() == {}, "no job token: the launch is refused, never handed the daemon's own"
