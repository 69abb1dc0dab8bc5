"""Publication and launch rights: the Hub target is checked, not the flag, and a campaign launches nothing its
owner could not launch directly.

Attacks of issue 34: findings 6 (a private push commits into an existing public repo) and 7 (campaigns skip
the checks launches make), through a real daemon, a real trainer and a Hub stand-in on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, running_daemon, wait_for_run
from tests.support.hub_standin import HubStandIn, Repo

FAKE_HF_TOKEN = "hf_" + "Pb7" * 12
TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def hub() -> Iterator[HubStandIn]:
    with HubStandIn() as standin:
        standin.state.repos["org/prod"] = Repo("org/prod", private=False, files={"README.md": b"production model"})
        yield standin


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, hub: HubStandIn) -> Iterator[RunningDaemon]:
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": FAKE_HF_TOKEN,
        "HF_HUB_DISABLE_XET": "1",
        "BASHGYM_HF_NAMESPACES": "org",
        "BASHGYM_LOCAL_SLOTS": "1",
    }
    with running_daemon(tmp_path_factory.mktemp("publication") / "home", env=env) as running:
        yield running


def _launch(daemon: RunningDaemon, token: str, request: dict[str, Any], project: str) -> dict[str, Any]:
    with tenant(daemon, token) as caller:
        started = caller.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
    with daemon.client() as admin:
        return dict(wait_for_run(admin, project, started.json()["run_id"], TERMINAL, timeout_s=240))


def test_a_private_push_never_commits_into_an_existing_public_repo(
    daemon: RunningDaemon, hub: HubStandIn, tiny: Path, tmp_path: Path
) -> None:
    researcher = issue_token(daemon, "rory", "researcher")
    request = training_request(
        tiny, sft_data(tmp_path), max_steps=2, auto_push_hf=True, hf_private=True, hf_repo_name="org/prod"
    )
    run = _launch(daemon, researcher, request, "nightly")
    assert run["status"] == "failed", run["status"]
    assert "is public" in run["attempts"][-1]["error_summary"]
    prod = hub.state.repos["org/prod"]
    assert prod.files == {"README.md": b"production model"} and prod.commits == [] and not prod.private


def test_a_push_goes_only_into_an_allowed_namespace(daemon: RunningDaemon, tiny: Path, tmp_path: Path) -> None:
    lead = issue_token(daemon, "lou", "lead", capabilities=("artifact.publish_public",))
    with tenant(daemon, lead) as lou:
        for name in ("elsewhere/model", "model"):
            request = training_request(tiny, sft_data(tmp_path), auto_push_hf=True, hf_repo_name=name)
            refused = lou.post("/v1/training/plan", json=request)
            assert refused.status_code == 403, refused.text
            assert "BASHGYM_HF_NAMESPACES" in refused.json()["error"]["hint"]
        smuggled = {**training_request(tiny, sft_data(tmp_path)), "hf_repo_owner": "default/other"}
        assert lou.post("/v1/training/plan", json=smuggled).status_code == 422


def test_a_repo_created_for_one_project_takes_no_push_of_another(
    daemon: RunningDaemon, hub: HubStandIn, tiny: Path, tmp_path: Path
) -> None:
    researcher = issue_token(daemon, "remy", "researcher")
    first = training_request(tiny, sft_data(tmp_path), max_steps=2, auto_push_hf=True, hf_repo_name="org/nightly-sft")
    run = _launch(daemon, researcher, first, "nightly")
    assert run["status"] == "completed", run["attempts"][-1]["error_summary"]
    created = hub.state.repos["org/nightly-sft"]
    assert created.private and "adapter_model.safetensors" in created.files
    commits = list(created.commits)
    other = training_request(
        tiny,
        sft_data(tmp_path),
        max_steps=2,
        auto_push_hf=True,
        hf_repo_name="org/nightly-sft",
        tracking_context=tracking_context(project_id="weekly", project_display_name="Weekly"),
    )
    refused = _launch(daemon, researcher, other, "weekly")
    assert refused["status"] == "failed"
    assert "was not created for project default/weekly" in refused["attempts"][-1]["error_summary"]
    assert hub.state.repos["org/nightly-sft"].commits == commits


def test_a_campaign_is_validated_against_what_its_launches_would_reach(daemon: RunningDaemon, tiny: Path) -> None:
    scoped = issue_token(daemon, "cam", "researcher", project="loops")
    spec = {
        "campaign_id": "reach",
        "title": "Reach",
        "objective": "Raise pass@1.",
        "suite_id": "bash-tasks-v1",
        "starting_model_version_id": "tiny-v1",
        "dataset_version_ids": ["traces-v1"],
        "base_recipe": {"strategy": "sft", "max_steps": 2},
        "budget": {"runs": 1},
        "stop_rules": {"max_iterations": 1},
    }
    recipes = {
        "public": ({"auto_push_hf": True, "hf_private": False, "hf_repo_name": "org/loops"}, None),
        "namespace": ({"auto_push_hf": True, "hf_repo_name": "elsewhere/loops"}, "BASHGYM_HF_NAMESPACES"),
        "path": ({"eval_dataset_path": "/etc/shadow"}, "eval_dataset_path"),
    }
    with tenant(daemon, scoped) as cam:
        assert cam.post("/v1/projects", json={"project_id": "loops", "name": "Loops"}).status_code == 201
        for name, (change, said) in recipes.items():
            campaign = {**spec, "campaign_id": name, "base_recipe": {**spec["base_recipe"], **change}}
            assert cam.post("/v1/projects/loops/campaigns", json=campaign).status_code == 201
            checked = cam.post(f"/v1/projects/loops/campaigns/{name}/validate", json={"expected_version": 1}).json()
            if said is None:
                # The owner lacks artifact.publish_public: each launch waits for a holder to lend it.
                assert checked["waits_for"] == ["artifact.publish_public"], checked
            else:
                refusals = [f for f in checked["findings"] if f["code"] == "launch_refused"]
                assert refusals and said in refusals[0]["message"] + refusals[0]["next_action"], checked["findings"]
                assert not checked["ok"]


def test_keeping_more_than_the_adapter_needs_its_right_and_full_run_an_audit(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    """`deployable` (a serving artifact made to leave) and `full_run` (everything, for audited or promoted work)
    needed no authority: any launcher kept them."""
    viewer_plus = issue_token(daemon, "vic", "viewer", capabilities=("training.launch",))
    researcher = issue_token(daemon, "rae", "researcher")
    data = sft_data(tmp_path)
    deployable = training_request(tiny, data, max_steps=1, artifact_retention="deployable")
    full = training_request(tiny, data, max_steps=1, artifact_retention="full_run")
    with tenant(daemon, viewer_plus) as caller:
        refused = caller.post("/v1/training/plan", json=deployable)
        assert refused.status_code == 403 and "artifact.publish_private" in refused.text, refused.text
    with tenant(daemon, researcher) as caller:
        assert caller.post("/v1/training/plan", json=deployable).status_code == 200
        refused = caller.post("/v1/training/start", json=full)
        assert refused.status_code == 403 and "promotion.decide" in refused.text, refused.text
    audited = {**full["tracking_context"], "metadata": {"audit": "release review 2026-12"}}
    with daemon.client() as admin:
        unaudited = admin.post("/v1/training/plan", json=full)
        assert unaudited.status_code == 403 and "names no audit" in unaudited.text, unaudited.text
        assert admin.post("/v1/training/plan", json={**full, "tracking_context": audited}).status_code == 200
