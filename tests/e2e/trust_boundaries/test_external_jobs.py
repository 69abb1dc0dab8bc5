"""External jobs as a hostile tenant would try them: each attack with the least-privileged token that might succeed,
against a real daemon and a loopback provider. A job is seen, submitted and cancelled only as its project's grants
allow; no host path or other workspace's job is reached; the daemon's provider keys go only to the operator's
providers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, training_request
from tests.support.finetune_standin import FineTuneStandIn, provider_daemon
from tests.support.helpers import RunningDaemon

KEY = "sk-operator-provider-key"
MODEL = "gpt-4o-mini-2024-07-18"

Pair = tuple[FineTuneStandIn, RunningDaemon]


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with provider_daemon(tmp_path_factory.mktemp("external") / "home", KEY, (MODEL,)) as pair:
        yield pair


def body(tmp_path: Path, project: str) -> dict[str, Any]:
    request = training_request(tmp_path, sft_data(tmp_path, rows=4), base_model=MODEL)
    context = {**request["tracking_context"], "project_id": project}
    kept = {k: v for k, v in request.items() if k in {"method", "base_model", "dataset_path"}}
    return {"request": {**kept, "tracking_context": context}, "cost_ceiling_usd": 5.0}


def submitted(daemon: RunningDaemon, tmp_path: Path, project: str, token: str | None = None) -> dict[str, Any]:
    client = tenant(daemon, token) if token else daemon.client()
    with client:
        answer = client.post("/v1/jobs/providers/acme", json=body(tmp_path, project))
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def test_a_viewer_can_neither_submit_nor_plan_nor_cancel(standins: Pair, tmp_path: Path) -> None:
    _provider, daemon = standins
    job = submitted(daemon, tmp_path, "alpha")
    viewer = issue_token(daemon, "vera", "viewer", project="alpha")
    with tenant(daemon, viewer) as client:
        refused = client.post("/v1/jobs/providers/acme", json=body(tmp_path, "alpha"))
        assert refused.status_code == 403 and "training.launch" in refused.text
        hub = {"request": {"method": "sft", "base_model": "acme/tiny"}, "dataset": {"repo": "acme/data"},
               "output_repo": "acme/out"}  # fmt: skip
        assert client.post("/v1/jobs/hf", json=hub).status_code == 403
        plan = {"engine": "dstack", "request": body(tmp_path, "alpha")["request"]}
        assert client.post("/v1/compute/plans", json=plan).status_code == 403
        cancel = client.post(f"/v1/projects/alpha/jobs/{job['job_id']}/cancel")
        assert cancel.status_code == 403 and "training.stop" in cancel.text
        assert client.get(f"/v1/projects/alpha/jobs/{job['job_id']}").status_code == 200


def test_a_researcher_of_one_project_sees_and_reaches_no_job_of_another(standins: Pair, tmp_path: Path) -> None:
    _provider, daemon = standins
    theirs = submitted(daemon, tmp_path, "beta")
    rita = issue_token(daemon, "rita", "researcher", project="alpha")
    with tenant(daemon, rita) as client:
        listed = client.get("/v1/jobs").json()["jobs"]
        assert theirs["job_id"] not in json.dumps(listed)
        assert client.get("/v1/jobs", params={"project": "beta"}).status_code == 403
        assert client.get(f"/v1/projects/beta/jobs/{theirs['job_id']}").status_code == 403
        # Naming the job under a project the caller may read does not reach it either.
        assert client.get(f"/v1/projects/alpha/jobs/{theirs['job_id']}").status_code == 404
        assert client.get(f"/v1/projects/alpha/jobs/{theirs['job_id']}/observations").status_code == 404
        assert client.post(f"/v1/projects/beta/jobs/{theirs['job_id']}/cancel").status_code == 403
        assert client.post(f"/v1/projects/alpha/jobs/{theirs['job_id']}/cancel").status_code == 404
        launch = client.post("/v1/jobs/providers/acme", json=body(tmp_path, "beta"))
        assert launch.status_code == 403 and "beta" in launch.text


def test_a_researcher_cancels_their_own_job_but_not_a_colleagues(standins: Pair, tmp_path: Path) -> None:
    _provider, daemon = standins
    rita = issue_token(daemon, "rita2", "researcher", project="gamma")
    sam = issue_token(daemon, "sam", "researcher", project="gamma")
    own = submitted(daemon, tmp_path, "gamma", rita)
    colleague = submitted(daemon, tmp_path, "gamma", sam)
    with tenant(daemon, rita) as client:
        refused = client.post(f"/v1/projects/gamma/jobs/{colleague['job_id']}/cancel")
        assert refused.status_code == 403 and "training.stop" in refused.text
        allowed = client.post(f"/v1/projects/gamma/jobs/{own['job_id']}/cancel")
        assert allowed.status_code == 200, allowed.text
        assert allowed.json()["cancel_requested_by"] == "rita2"


def test_no_host_path_reaches_a_provider_or_a_plan(standins: Pair, tmp_path: Path) -> None:
    _provider, daemon = standins
    secret = tmp_path / "operator-only.jsonl"
    secret.write_text(sft_data(tmp_path, rows=2).read_text())
    secret.chmod(0o600)
    rita = issue_token(daemon, "rita3", "researcher", project="delta")
    with tenant(daemon, rita) as client:
        for path in ("/etc/shadow", "/root/.ssh/id_ed25519", str(daemon.home / "admin.token")):
            attack = body(tmp_path, "delta")
            attack["request"]["dataset_path"] = path
            answer = client.post("/v1/jobs/providers/acme", json=attack)
            assert answer.status_code in {403, 422}, answer.text
            plan = client.post("/v1/compute/plans", json={"engine": "skypilot", "request": attack["request"]})
            assert plan.status_code in {403, 422}, plan.text
        hub = {"request": {"method": "sft", "base_model": "acme/tiny", "dataset_path": "/etc/shadow"},
               "dataset": {"repo": "acme/data"}, "output_repo": "acme/out"}  # fmt: skip
        answer = client.post("/v1/jobs/hf", json=hub)
        assert answer.status_code == 422 and "set by the daemon" in answer.text
        # A base model named by host path would make the job's trainer read the daemon's disk: refused.
        local = {"request": {"method": "sft", "base_model": "/root/models/private"},
                 "dataset": {"repo": "acme/data"}, "output_repo": "acme/out"}  # fmt: skip
        assert client.post("/v1/jobs/hf", json=local).status_code in {403, 422}


def test_the_daemon_s_keys_never_appear_in_an_answer(standins: Pair, tmp_path: Path) -> None:
    _provider, daemon = standins
    job = submitted(daemon, tmp_path, "epsilon")
    with daemon.client() as client:
        seen = [
            client.get(f"/v1/projects/epsilon/jobs/{job['job_id']}").text,
            client.get(f"/v1/projects/epsilon/jobs/{job['job_id']}/observations").text,
            client.get("/v1/jobs/surfaces").text,
            client.get("/v1/jobs").text,
        ]
    assert not [text for text in seen if KEY in text]
    assert json.loads(seen[2])["providers"]["acme"] == {
        "base_url": json.loads(seen[2])["providers"]["acme"]["base_url"],
        "api_key_env": "ACME_KEY",
        "key_set": True,
    }
