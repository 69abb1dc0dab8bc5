"""Hugging Face Jobs through the daemon's API, against the loopback Hub stand-in driven by the real huggingface_hub
client: the checks before a submission, the job the Hub receives, polling, logs as observations, the import of the
pushed commit as a model version, failures, cancellation with its actor, and a crash between the Hub taking a job and
the ledger recording it (reconciled by label, never submitted twice).

Here the test plays the job's part (the stand-in is scripted) and pushes the run as the job's own push_run does;
tests/e2e/external/test_hf_jobs_training.py runs our real trainer as the job's command."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.ledger.store import Ledger
from bashgym.trainers.external_job import push_run

from tests.support.factories import sft_data, tracking_context
from tests.support.helpers import inprocess_daemon, running_daemon, wait_for_status
from tests.support.hub_jobs import daemon_env
from tests.support.hub_standin import HubStandIn, TokenInfo

pytestmark = pytest.mark.anyio
WRITE, READ, JOB = "hf_write_secret_token", "hf_read_secret_token", "hf_job_secret_token"
TOKENS = {
    WRITE: TokenInfo(user="alice", role="write", orgs=("acme",)),
    READ: TokenInfo(user="bob", role="read"),
    JOB: TokenInfo("acme-bot", "fineGrained", ("acme",), scoped=(("acme", ("repo.content.read", "repo.write")),)),
}
IMAGE = "ghcr.io/acme/bashgym-job@sha256:" + "0" * 64


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubStandIn]:
    with HubStandIn(tokens=TOKENS, stream_idle_close_s=0.2) as server:
        server.add_repo("acme/tiny", files={"config.json": b"{}"})
        server.add_repo(
            "acme/data", repo_type="dataset", files={"train.jsonl": sft_data(tmp_path, rows=4).read_bytes()}
        )
        yield server


def settings(hub: HubStandIn) -> dict[str, Any]:
    return {
        "hf_endpoint": hub.url,
        "hf_namespaces": ["acme"],
        "hf_read_namespaces": ["acme"],
        "hf_job_images": [IMAGE],
        "external_poll_s": 0.05,
    }


@pytest.fixture
async def api(ledger: Ledger, tmp_path: Path, hub: HubStandIn) -> AsyncIterator[httpx.AsyncClient]:
    environ = {"HF_TOKEN": WRITE, "HF_JOB_TOKEN": JOB}
    async with inprocess_daemon(ledger, tmp_path / "home", environ, **settings(hub)) as client:
        yield client


def submission(hub: HubStandIn, **overrides: Any) -> dict[str, Any]:
    data = hub.state.repos["acme/data"].files["train.jsonl"]
    digest = hashlib.sha256(data).hexdigest()
    context = {**tracking_context(), "dataset_content_digest": digest, "dataset_version_id": f"traces-{digest[:12]}"}
    body = {
        "request": {"method": "sft", "base_model": "acme/tiny", "max_steps": 2, "tracking_context": context},
        "dataset": {"repo": "acme/data"},
        "output_repo": "acme/nightly-sft",
        "flavor": "a10g-small",
        "timeout_s": 3600,
    }
    return {**body, **overrides}


async def wait_job(api: httpx.AsyncClient, job: dict[str, Any], states: set[str], timeout_s: float = 30) -> Any:
    async with asyncio.timeout(timeout_s):
        while True:
            shown = (await api.get(f"/v1/projects/{job['project_id']}/jobs/{job['job_id']}")).json()
            if shown["state"] in states:
                return shown
            await asyncio.sleep(0.05)


def pushed_by_the_job(tmp_path: Path, hub: HubStandIn, job: dict[str, Any], *, request_digest: str = "") -> str:
    """What trainers/external_job.py leaves and pushes: model files with their digests, metrics, evidence."""
    run = tmp_path / "job-run"
    (run / "final").mkdir(parents=True)
    weights = b"adapter weights of the job"
    (run / "final" / "adapter_model.safetensors").write_bytes(weights)
    profile = {
        "use_lora": True,
        "files": [
            {
                "path": "final/adapter_model.safetensors",
                "sha256": hashlib.sha256(weights).hexdigest(),
                "size_bytes": len(weights),
            }
        ],
    }
    (run / "model_profile.json").write_text(json.dumps(profile))
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "metrics": {"train.loss": 2.5}}\n{"step": 2, "metrics": {"train.loss": 1.5}}\n'
    )
    (run / "training.log").write_text("step 1\nstep 2\n")
    evidence = {
        "schema": "bashgym.external-run/v1",
        "job_id": job["job_id"],
        "request_digest": request_digest or job["request_digest"],
        "dataset_sha256": "0" * 64,
        "exit_code": 0,
    }
    (run / "bashgym-run.json").write_text(json.dumps(evidence))
    env = {"HF_TOKEN": JOB, "HF_ENDPOINT": hub.url, "BASHGYM_JOB_ID": job["job_id"]}  # the job holds the job token
    pushed = push_run(run, job["request"], "acme/nightly-sft", env)
    return f"bashgym: pushed {pushed['repo_id']}@{pushed['commit_sha']}"


async def test_a_job_is_submitted_followed_and_its_pushed_model_imported_with_digests(
    api: httpx.AsyncClient, hub: HubStandIn, tmp_path: Path
) -> None:
    answer = await api.post("/v1/jobs/hf", json=submission(hub, cost_ceiling_usd=1.0))
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert job["state"] == "submitted" and job["surface"] == "hf-jobs" and job["upstream_job_id"]
    received = hub.state.jobs[job["upstream_job_id"]].spec
    # The job token travels as a secret only (never the daemon's); the request the job trains is the one whose
    # digest the ledger holds, in the operator's image.
    assert received["secrets"] == {"HF_TOKEN": JOB} and received["dockerImage"] == IMAGE
    assert JOB not in json.dumps([received.get("command"), received.get("arguments"), received.get("environment")])
    sent = received["environment"]["BASHGYM_JOB_REQUEST"]
    assert hashlib.sha256(sent.encode()).hexdigest() == job["request_digest"]
    assert received["labels"]["bashgym-job"] == job["job_id"] and received["flavor"] == "a10g-small"
    # A $1 ceiling on a10g-small ($1.05/hour in the stand-in's list) shortens the one-hour timeout to fit.
    assert job["timeout_s"] < 3600 and job["cost_ceiling_usd"] <= 1.0
    assert job["lineage"]["dataset"]["commit"] == hub.state.repos["acme/data"].head()
    assert WRITE not in json.dumps(job)
    run = (await api.get(f"/v1/projects/nightly/runs/{job['run_id']}")).json()
    assert run["status"] == "preparing" and run["config"]["compute_target"] == "hf-jobs"

    hub.advance(job["upstream_job_id"], "RUNNING")
    await wait_job(api, job, {"running"})
    assert (await api.get(f"/v1/projects/nightly/runs/{job['run_id']}")).json()["status"] == "preparing"
    hub.advance(job["upstream_job_id"], logs=["bashgym: training sft on acme/tiny", "step 1 loss 2.5"])
    await wait_for_status(api, "nightly", job["run_id"], {"running"}, timeout_s=30)

    line = pushed_by_the_job(tmp_path, hub, job)
    hub.advance(job["upstream_job_id"], "COMPLETED", logs=[line])
    done = await wait_job(api, job, {"completed"})
    run = await wait_for_status(api, "nightly", job["run_id"], {"completed", "failed"}, timeout_s=30)
    assert run["status"] == "completed", run
    assert done["result"]["repo"] == "acme/nightly-sft" and done["result"]["commit"] in line
    [artifact] = run["artifacts"]
    assert artifact["sha256"] == hashlib.sha256(b"adapter weights of the job").hexdigest()
    assert run["metric_summary"]["train.loss"]["latest"] == 1.5
    version = (await api.get(f"/v1/projects/nightly/entities/model_version/mv-{job['run_id']}")).json()
    assert version["source_uri"] == f"bashgym://runs/{job['run_id']}" and artifact["sha256"] in json.dumps(version)
    page = (await api.get(f"/v1/projects/nightly/jobs/{job['job_id']}/observations")).json()
    logs = [line for o in page["observations"] if o["kind"] == "log" for line in o["data"]["lines"]]
    assert logs[:2] == ["bashgym: training sft on acme/tiny", "step 1 loss 2.5"] and logs.count(line) == 1
    assert len(hub.state.jobs) == 1


async def test_a_push_of_another_request_is_not_imported_and_fails_the_run(
    api: httpx.AsyncClient, hub: HubStandIn, tmp_path: Path
) -> None:
    job = (await api.post("/v1/jobs/hf", json=submission(hub))).json()
    line = pushed_by_the_job(tmp_path, hub, job, request_digest="f" * 64)
    hub.advance(job["upstream_job_id"], "COMPLETED", logs=[line])
    await wait_job(api, job, {"completed"})
    run = await wait_for_status(api, "nightly", job["run_id"], {"failed"}, timeout_s=30)
    assert "another request" in json.dumps(run["attempts"])
    assert run["artifacts"] == []


async def test_a_failed_job_fails_its_run_with_the_hubs_message(api: httpx.AsyncClient, hub: HubStandIn) -> None:
    job = (await api.post("/v1/jobs/hf", json=submission(hub))).json()
    hub.advance(job["upstream_job_id"], "RUNNING", logs=["Traceback: CUDA out of memory"])
    hub.advance(job["upstream_job_id"], "ERROR", message="Job failed with exit code: 1")
    shown = await wait_job(api, job, {"failed"})
    run = await wait_for_status(api, "nightly", job["run_id"], {"failed"}, timeout_s=30)
    assert "exit code: 1" in shown["reason"] and "exit code: 1" in json.dumps(run["attempts"])


async def test_a_cancel_goes_through_the_hub_and_is_recorded_with_its_actor(
    api: httpx.AsyncClient, hub: HubStandIn
) -> None:
    job = (await api.post("/v1/jobs/hf", json=submission(hub))).json()
    hub.advance(job["upstream_job_id"], "RUNNING", logs=["started"])
    answer = await api.post(f"/v1/projects/nightly/jobs/{job['job_id']}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json()["cancel_requested_by"] == "admin"
    await wait_job(api, job, {"cancelled"})
    await wait_for_status(api, "nightly", job["run_id"], {"cancelled"}, timeout_s=30)
    assert hub.state.jobs[job["upstream_job_id"]].stage == "CANCELED"


async def test_a_hub_answering_5xx_while_polled_is_asked_again(api: httpx.AsyncClient, hub: HubStandIn) -> None:
    job = (await api.post("/v1/jobs/hf", json=submission(hub))).json()
    hub.fail_next(503, 2)
    hub.advance(job["upstream_job_id"], "RUNNING", logs=["started"])
    await wait_job(api, job, {"running"})
    assert len(hub.state.jobs) == 1


BOTH = {"HF_TOKEN": WRITE, "HF_JOB_TOKEN": JOB}


@pytest.mark.parametrize(
    ("environ", "configured", "change", "expected"),
    [
        ({}, {}, {}, "No Hugging Face token"),
        (BOTH, {"hf_job_images": []}, {}, "No container image is allowed"),
        ({"HF_TOKEN": WRITE}, {}, {}, "No job token"),
        ({"HF_TOKEN": WRITE, "HF_JOB_TOKEN": WRITE}, {}, {}, "the daemon's own token"),
        ({"HF_TOKEN": READ, "HF_JOB_TOKEN": JOB}, {}, {}, "read-only"),
        (BOTH, {}, {"flavor": "h100-imaginary"}, "Unknown flavor"),
        (BOTH, {}, {"dataset": {"repo": "acme/absent"}}, "could not read dataset"),
        (BOTH, {}, {"dataset": {"repo": "acme/data", "file": "missing.jsonl"}}, "no file"),
        (BOTH, {}, {"output_repo": "elsewhere/out"}, "may not push"),
        (BOTH, {}, {"timeout_s": 36000, "flavor": "h200x2"}, "GPU-hours"),
    ],
)
async def test_what_cannot_run_is_refused_before_anything_is_submitted_or_recorded(
    ledger: Ledger,
    tmp_path: Path,
    hub: HubStandIn,
    environ: dict[str, str],
    configured: dict[str, Any],
    change: dict[str, Any],
    expected: str,
) -> None:
    async with inprocess_daemon(ledger, tmp_path / "home", environ, **{**settings(hub), **configured}) as api:
        await api.post("/v1/projects", json={"project_id": "nightly", "name": "Nightly SFT"})
        budget = {"gpu_hours": 10.0, "runs": 5, "reason": "the month's allowance"}
        assert (await api.post("/v1/projects/nightly/budget/limit", json=budget)).status_code == 201
        # The least-privileged caller that could submit: a researcher (no budget.amend to exceed the budget).
        issued = await api.post("/v1/auth/tokens", json={"actor_id": "rita", "profile": "researcher"})
        researcher = {"Authorization": f"Bearer {issued.json()['token']}"}
        answer = await api.post("/v1/jobs/hf", json=submission(hub, **change), headers=researcher)
        assert answer.status_code in {403, 422}, answer.text
        assert expected in answer.json()["error"]["message"], answer.text
        assert (await api.get("/v1/jobs")).json()["jobs"] == []
        assert (await api.get("/v1/projects/nightly/runs")).json() == []
    assert hub.state.jobs == {}


def test_a_daemon_killed_after_the_hub_took_the_job_finds_it_by_label_and_never_submits_again(
    tmp_path: Path, hub: HubStandIn
) -> None:
    env = daemon_env(hub.url, write=WRITE, job=JOB, image=IMAGE, poll_s=0.1)
    home = tmp_path / "home"
    with running_daemon(home, env={**env, "BASHGYM_FAILPOINT": "external.submitted"}) as first:
        with first.client() as client, pytest.raises(httpx.TransportError):
            client.post("/v1/jobs/hf", json=submission(hub))
        assert first.proc.wait(timeout=30) == -9
    [upstream] = hub.state.jobs
    hub.advance(upstream, "RUNNING", logs=["bashgym: training sft on acme/tiny"])
    with running_daemon(home, env=env) as second, second.client() as client:
        [job] = client.get("/v1/jobs").json()["jobs"]
        for _ in range(300):
            job = client.get(f"/v1/projects/nightly/jobs/{job['job_id']}").json()
            if job["state"] == "running" and job["compute_started"]:
                break
            import time

            time.sleep(0.1)
        assert job["upstream_job_id"] == upstream and job["state"] == "running", job
        hub.advance(upstream, "RUNNING", logs=["step 1"])
        second.stop(signal_kill := 9)
        assert signal_kill == 9
    hub.advance(upstream, "ERROR", message="Job failed with exit code: 2")
    with running_daemon(home, env=env) as third, third.client() as client:
        for _ in range(300):
            job = client.get(f"/v1/projects/nightly/jobs/{job['job_id']}").json()
            if job["state"] == "failed":
                break
            import time

            time.sleep(0.1)
        assert job["state"] == "failed", job
        run = client.get(f"/v1/projects/nightly/runs/{job['run_id']}").json()
        assert run["status"] == "failed"
    assert list(hub.state.jobs) == [upstream], "the job was submitted once, and only asked about after"
