"""Attacks on the workflows' new reach, each with the least privilege that might succeed: a GRPO run's reward model
is a model version of the run's own project (never a path, never another project's), a run's model is registered
only in its own project and as the kind its method made, a retriever trains only in a retrieval project, and a
retriever's corpus is confined like any data path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, running_daemon
from tests.support.reward_pairs import write_jsonl


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("workflows") / "home") as running:
        yield running


def grpo_request(tiny: Path, prompts: Path, project: str, reward_model: str) -> dict[str, Any]:
    digest = hashlib.sha256(prompts.read_bytes()).hexdigest()
    context = tracking_context(
        project_id=project,
        project_display_name=project,
        dataset_version_id=f"prompts-{digest[:12]}",
        dataset_content_digest=digest,
    )
    return {
        "method": "grpo",
        "base_model": str(tiny),
        "dataset_path": str(prompts),
        "max_steps": 1,
        "grpo_num_generations": 2,
        "grpo_max_completion_length": 8,
        "grpo_reward_source": "reward_model",
        "grpo_reward_model": reward_model,
        "tracking_context": context,
    }


def test_a_reward_model_is_a_version_of_the_runs_own_project_never_a_path(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "Count the lines of notes.txt"}])
    with daemon.client() as admin:
        for project in ("alpha", "beta"):
            assert admin.post("/v1/projects", json={"project_id": project, "name": project}).status_code == 201
        # beta holds a reward model (its files are the tiny model's, registered as a reward model).
        version = {
            "model_version_id": "beta-rm",
            "model_id": "rm",
            "source_uri": f"file://{tiny}",
            "kind": "reward_model",
        }
        assert admin.post("/v1/projects/beta/model-versions", json=version).status_code == 201
        causal = {"model_version_id": "alpha-lm", "model_id": "lm", "source_uri": f"file://{tiny}"}
        assert admin.post("/v1/projects/alpha/model-versions", json=causal).status_code == 201
    mallory = issue_token(daemon, "mallory", "researcher", project="alpha")
    with tenant(daemon, mallory) as client:
        for named, said in (
            ("beta-rm", "is not a model version of project 'alpha'"),  # another project's reward model
            (str(tiny), "is not a model version of project 'alpha'"),  # a host path
            ("../beta/beta-rm", "is not a model version of project 'alpha'"),
            ("alpha-lm", "is a causal_lm, not a reward model"),  # a policy is no reward model
        ):
            for route in ("/v1/training/plan", "/v1/training/start"):
                answer = client.post(route, json=grpo_request(tiny, prompts, "alpha", named))
                text = answer.text
                assert said in text, (named, route, text)
                if route.endswith("start"):
                    assert answer.status_code == 422, text
    with daemon.client() as admin:
        assert admin.get("/v1/projects/alpha/runs").json() == []  # nothing was launched


def test_a_runs_model_is_registered_in_its_own_project_as_the_kind_its_method_made(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    with daemon.client() as admin:
        assert admin.post("/v1/projects", json={"project_id": "gamma", "name": "gamma"}).status_code == 201
        context = tracking_context(project_id="gamma", project_display_name="gamma")
        run = admin.post("/v1/runs", json={"method": "sft", "tracking_context": context}).json()["record"]["run_id"]
    # A researcher of another project cannot reach gamma's run, by either route.
    mallory = issue_token(daemon, "mallory2", "researcher", project="alpha")
    with tenant(daemon, mallory) as client:
        answer = client.post(
            f"/v1/projects/gamma/runs/{run}/model-version", json={"model_version_id": "x", "model_id": "m"}
        )
        assert answer.status_code == 403, answer.text
        smuggled = {
            "model_version_id": "x",
            "model_id": "m",
            "source_uri": f"bashgym://runs/{run}",
            "kind": "causal_lm",
        }
        answer = client.post("/v1/projects/alpha/model-versions", json=smuggled)
        assert answer.status_code == 404, answer.text  # not a run of alpha
    # In its own project, an SFT run's model is a causal LM and nothing else.
    owner = issue_token(daemon, "gina", "researcher", project="gamma")
    with tenant(daemon, owner) as client:
        relabelled = {
            "model_version_id": "y",
            "model_id": "m",
            "source_uri": f"bashgym://runs/{run}",
            "kind": "reward_model",
        }
        answer = client.post("/v1/projects/gamma/model-versions", json=relabelled)
        assert answer.status_code == 422 and "its model is a causal_lm, not a reward_model" in answer.text


def test_a_retriever_trains_only_in_a_retrieval_project_and_its_corpus_is_confined(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    rows = write_jsonl(tmp_path / "queries.jsonl", [{"query": "count lines", "positive": "wc counts lines"}] * 4)
    digest = hashlib.sha256(rows.read_bytes()).hexdigest()
    context = tracking_context(dataset_version_id=f"q-{digest[:12]}", dataset_content_digest=digest)
    request = {
        "method": "embedding_retriever",
        "base_model": str(tiny),
        "dataset_path": str(rows),
        "tracking_context": context,
    }
    with daemon.client() as admin:
        refused = admin.post("/v1/training/start", json=request)
        assert refused.status_code == 422 and "profile is `embedding_retrieval`" in refused.text
        retrieval = {"project_id": "search", "name": "Search", "profile": "embedding_retrieval"}
        assert admin.post("/v1/projects", json=retrieval).status_code == 201
        sft = {
            **request,
            "method": "sft",
            "tracking_context": {**context, "project_id": "search", "project_display_name": "Search"},
        }
        refused = admin.post("/v1/training/start", json=sft)
        assert refused.status_code == 422 and "trains retrievers only" in refused.text
    viewer_plus = issue_token(daemon, "eve", "researcher", project="search")
    with tenant(daemon, viewer_plus) as client:
        outside = client.post(
            "/v1/projects/search/evaluations",
            json={"model_version_id": "none", "dataset_path": str(rows), "corpus_path": "/etc/passwd"},
        )
        assert outside.status_code in {403, 422}, outside.text
        assert "corpus_path" in outside.text
