"""A Hugging Face Job that really trains: the Hub stand-in runs the job's command (our trainer,
`python -m bashgym.trainers.external_job`) as a local process in place of a container, with the Hub token only as a
secret. The job downloads the tiny base model and the dataset from the stand-in, trains, pushes its evidence; the
daemon imports the pushed commit, and the imported model is evaluated and gated like a local run's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import sft_data
from tests.support.helpers import running_daemon
from tests.support.hub_standin import HubStandIn, TokenInfo

pytestmark = pytest.mark.slow
TOKEN, JOB_TOKEN = "hf_daemon_secret_token", "hf_job_secret_token"
IMAGE = "ghcr.io/acme/bashgym-job@sha256:" + "0" * 64


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubStandIn]:
    tiny = build_tiny(tmp_path / "tiny")
    files = {str(p.relative_to(tiny)): p.read_bytes() for p in tiny.rglob("*") if p.is_file()}
    # The job reads the private model and data, and pushes, with its fine-grained job token only.
    grants = (("acme", ("repo.content.read", "repo.write")),)
    tokens = {
        TOKEN: TokenInfo(user="alice", orgs=("acme",)),
        JOB_TOKEN: TokenInfo("acme-bot", "fineGrained", ("acme",), scoped=grants),
    }
    # A log read of a running job ends after 0.3 s of quiet, where the Hub's client would wait out its 5 s timeout.
    with HubStandIn(tokens=tokens, job_mode="execute", stream_idle_close_s=0.3) as server:
        server.add_repo("acme/tiny", files=files, private=True)
        data = sft_data(tmp_path).read_bytes()
        server.add_repo("acme/data", repo_type="dataset", files={"train.jsonl": data}, private=True)
        yield server


def until(client: httpx.Client, path: str, done: Any, timeout_s: float = 400) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        shown = client.get(path).json()
        if done(shown):
            return dict(shown)
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)


@pytest.mark.timeout(600)  # 20 s alone; beside the demo in test-slow, its trainer and evaluator wait for cores
def test_a_job_trains_pushes_and_its_imported_model_is_evaluated_and_gated(hub: HubStandIn, tmp_path: Path) -> None:
    env = {
        "HF_TOKEN": TOKEN,
        "HF_JOB_TOKEN": JOB_TOKEN,
        "BASHGYM_HF_JOB_IMAGES": IMAGE,
        "BASHGYM_HF_READ_NAMESPACES": "acme",
        "HF_ENDPOINT": hub.url,  # the evaluator downloads the base model the adapter sits on from the same Hub
        "BASHGYM_HF_ENDPOINT": hub.url,
        "BASHGYM_HF_NAMESPACES": "acme",
        "BASHGYM_HF_JOBS_INSTALL": "true",  # the stand-in's "container" is this machine, where bashgym is installed
        "BASHGYM_EXTERNAL_POLL_S": "0.5",
    }
    request = {"method": "sft", "base_model": "acme/tiny", "max_steps": 4, "logging_steps": 1, "save_steps": 100,
               "batch_size": 2, "gradient_accumulation_steps": 1, "max_seq_length": 64}  # fmt: skip
    submission = {"request": request, "dataset": {"repo": "acme/data"}, "output_repo": "acme/tiny-sft",
                  "flavor": "cpu-basic", "timeout_s": 900}  # fmt: skip
    with running_daemon(tmp_path / "home", env=env) as daemon, daemon.client() as client:
        answer = client.post("/v1/jobs/hf", json=submission)
        assert answer.status_code == 201, answer.text
        job = answer.json()
        base = f"/v1/projects/unassigned/jobs/{job['job_id']}"
        ended = until(client, base, lambda j: j["state"] in {"completed", "failed", "cancelled"})
        logs = [o for o in client.get(f"{base}/observations").json()["observations"] if o["kind"] == "log"]
        assert ended["state"] == "completed", (ended, [line for o in logs for line in o["data"]["lines"]][-30:])
        run = client.get(f"/v1/projects/unassigned/runs/{job['run_id']}").json()
        assert run["status"] == "completed", run["attempts"]
        assert run["metric_summary"]["train.loss"]["count"] == 4
        assert {a["kind"] for a in run["artifacts"]} >= {"adapter"}
        assert ended["result"]["repo"] == "acme/tiny-sft" and ended["compute_started"]
        spec = hub.state.jobs[job["upstream_job_id"]].spec
        assert spec["secrets"] == {"HF_TOKEN": JOB_TOKEN} and TOKEN not in str(spec)
        assert JOB_TOKEN not in str(spec.get("command")) + str(spec.get("environment"))

        started = client.post(
            "/v1/projects/unassigned/evaluations", json={"run_id": job["run_id"], "limit_tasks": 2, "max_new_tokens": 4}
        )
        assert started.status_code == 202, started.text
        evaluation = until(
            client,
            f"/v1/projects/unassigned/evaluations/{started.json()['evaluation_id']}",
            lambda e: e["status"] in {"completed", "failed", "cancelled"},
        )
        assert evaluation["status"] == "completed", evaluation
        gate = client.get(f"/v1/projects/unassigned/runs/{job['run_id']}/gate").json()
        assert gate["ship"] is False and gate["blockers"], gate  # an unassigned run with one evaluation ships nothing
        assert len(hub.state.jobs) == 1
