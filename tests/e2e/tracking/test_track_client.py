"""bashgym.track: a script BashGym did not launch records an official run in a project (issue 53, item 1).

The real client against a real daemon on loopback: the run is verified in the project with its params and every
point once; a raising block ends it failed; tokens that may not launch there are refused; and a daemon stopped
mid-run and restarted on the same port loses and doubles nothing (spool + idempotency keys)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym import track
from bashgym.client.errors import ApiError

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, eventually, register_versions, running_daemon, start_daemon

PROJECT, OTHER = "nightly", "elsewhere"
VERSIONS = {"project": PROJECT, "model_version": "tiny-v1", "dataset_version": "rows-v1"}


@contextlib.contextmanager
def workspace(root: Path) -> Iterator[RunningDaemon]:
    """A daemon with projects nightly (model version tiny-v1, dataset version rows-v1) and elsewhere."""
    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text("{}")
    with running_daemon(root / "home") as running:
        with running.client() as admin:
            for project in (PROJECT, OTHER):
                assert admin.post("/v1/projects", json={"project_id": project, "name": project}).status_code == 201
        register_versions(running, PROJECT, root / "model", sft_data(root, rows=4))
        yield running


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with workspace(tmp_path_factory.mktemp("track")) as running:
        yield running


@pytest.fixture(autouse=True)
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BASHGYM_HOME", str(tmp_path))  # the user's home here; the daemon's is its own
    return tmp_path / "track"


def researcher(daemon: RunningDaemon, actor: str, project: str = PROJECT) -> str:
    return issue_token(daemon, actor, "researcher", project=project)


def shown(daemon: RunningDaemon, run_id: str) -> dict:
    with daemon.client() as admin:
        answer = admin.get(f"/v1/projects/{PROJECT}/tracked-runs/{run_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()


def points(daemon: RunningDaemon, run_id: str, metric: str = "loss") -> list[tuple[int, float]]:
    with daemon.client() as admin:
        answer = admin.get(f"/v1/projects/{PROJECT}/trend", params={"metric": metric, "run": run_id})
        assert answer.status_code == 200, answer.text
    trend = answer.json()
    return list(zip(trend["steps"], trend["values"], strict=True))


def test_a_run_opened_by_project_and_versions_is_verified_with_its_params_and_every_point_once(
    daemon: RunningDaemon,
) -> None:
    token = researcher(daemon, "rita")
    with track.start_run(**VERSIONS, api=daemon.url, token=token, params={"lr": 0.001}, interval_s=0.05) as run:
        for step in range(50):
            run.log_metrics({"loss": step / 4}, step=step)
        run.log_params({"warmup": 10})
        run.set_tags({"team": "nlp"})
    record = shown(daemon, run.run_id)
    assert (record["status"], record["context_status"]) == ("completed", "verified"), record
    assert (record["model_version_id"], record["dataset_version_id"]) == ("tiny-v1", "rows-v1"), record
    assert (record["lane"], record["surface"], record["config"]["compute_target"]) == (
        "external",
        "tracked",
        "external:tracked",
    )
    assert record["params"] == {"lr": 0.001, "warmup": 10} and record["tags"] == {"team": "nlp"}, record
    assert points(daemon, run.run_id) == [(step, step / 4) for step in range(50)]


def test_a_block_that_raises_ends_the_run_failed_with_the_exceptions_summary(daemon: RunningDaemon) -> None:
    token = researcher(daemon, "fay")
    with pytest.raises(RuntimeError), track.start_run(**VERSIONS, api=daemon.url, token=token) as run:
        run.log_metrics({"loss": 2.0}, step=0)
        raise RuntimeError("CUDA out of memory at step 1")
    record = shown(daemon, run.run_id)
    assert record["status"] == "failed", record
    assert "RuntimeError: CUDA out of memory at step 1" in record["attempts"][-1]["error_summary"], record
    assert points(daemon, run.run_id) == [(0, 2.0)]


def test_tokens_that_may_not_launch_in_the_project_are_refused(daemon: RunningDaemon) -> None:
    viewer = issue_token(daemon, "vic", "viewer", project=PROJECT)
    stranger = researcher(daemon, "sam", OTHER)
    for token in (viewer, stranger):
        with pytest.raises(ApiError) as refused:
            track.start_run(**VERSIONS, api=daemon.url, token=token)
        assert refused.value.status in {403, 404}, refused.value

    owner = researcher(daemon, "olga")
    run = track.start_run(**VERSIONS, api=daemon.url, token=owner)
    try:
        other_researcher = researcher(daemon, "oscar")  # may launch in the project, but did not open this run
        for token in (viewer, stranger, other_researcher):
            with daemon.client(token) as client:
                body = {"points": [{"metric": "loss", "step": 1, "value": 9.0}]}
                answer = client.post(f"/v1/projects/{PROJECT}/tracked-runs/{run.run_id}/metrics", json=body)
                assert answer.status_code in {403, 404}, answer.text
                ended = client.post(
                    f"/v1/projects/{PROJECT}/tracked-runs/{run.run_id}/end", json={"status": "completed"}
                )
                assert ended.status_code in {403, 404}, ended.text
    finally:
        run.end()
    assert points(daemon, run.run_id) == [] and shown(daemon, run.run_id)["status"] == "completed"


def test_points_logged_while_the_daemon_is_down_arrive_exactly_once(tmp_path: Path, spool: Path) -> None:
    with workspace(tmp_path / "own") as daemon:  # its own: the module's daemon stays up for the other tests
        stopped_and_restarted(daemon, spool)


def stopped_and_restarted(daemon: RunningDaemon, spool: Path) -> None:
    token = researcher(daemon, "dana")
    port = daemon.url.rsplit(":", 1)[1]
    run = track.start_run(**VERSIONS, api=daemon.url, token=token, interval_s=0.05, flush_timeout_s=30)
    for step in range(10):
        run.log_metrics({"loss": float(step)}, step=step)
    daemon.stop()
    for step in range(10, 30):
        run.log_metrics({"loss": float(step)}, step=step)
    eventually("the batches sent to a stopped daemon are spooled", lambda: any(spool.glob("*.jsonl")))
    restarted = start_daemon(daemon.home, "--port", port)
    try:
        run.end()
        assert points(restarted, run.run_id) == [(step, float(step)) for step in range(30)]
        assert shown(restarted, run.run_id)["status"] == "completed"
    finally:
        restarted.close()
    assert not any(spool.glob("*.jsonl")), "the spool is emptied once everything arrived"
