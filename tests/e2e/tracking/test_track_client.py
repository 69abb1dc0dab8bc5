"""bashgym.track: a script BashGym did not launch records an official run in a project (issue 53, item 1).

The real client against a real daemon on loopback: the run is verified in the project with its params and every
point once; a raising block ends it failed; tokens that may not launch there are refused; files and directories
become the run's artifacts, digested, once per name, and an attacker's names, tokens and sizes are refused. What
happens when the daemon or the script dies: test_track_crash.py."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym import track
from bashgym.client.errors import ApiError

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, register_versions, running_daemon

PROJECT, OTHER = "nightly", "elsewhere"
MAX_UPLOAD_BYTES = 64 * 1024  # the operator's limit here (BASHGYM_MAX_UPLOAD_BYTES)
VERSIONS = {"project": PROJECT, "model_version": "tiny-v1", "dataset_version": "rows-v1"}


@contextlib.contextmanager
def workspace(root: Path, **env: str) -> Iterator[RunningDaemon]:
    """A daemon (with the settings `env` names) with projects nightly (model version tiny-v1, dataset version
    rows-v1) and elsewhere."""
    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text("{}")
    env = {"BASHGYM_MAX_UPLOAD_BYTES": str(MAX_UPLOAD_BYTES), **env}
    with running_daemon(root / "home", env=env) as running:
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
    with daemon.client() as admin:  # its tags are every run's tags: the list searches them
        found = admin.get(f"/v1/projects/{PROJECT}/runs", params={"tag": "team=nlp"}).json()
    assert [r["run_id"] for r in found] == [run.run_id]
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


def artifacts(daemon: RunningDaemon, run_id: str) -> dict[str, dict]:
    return {a["uri"].removeprefix(f"bashgym://runs/{run_id}/"): a for a in shown(daemon, run_id)["artifacts"]}


def saved_model(root: Path) -> Path:
    (root / "model" / "nested").mkdir(parents=True)
    (root / "model" / "config.json").write_text('{"layers": 2}')
    (root / "model" / "nested" / "weights.bin").write_bytes(bytes(range(256)) * 40)
    return root / "model"


def test_files_and_directories_become_the_runs_artifacts_digested_once_per_name(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    model = saved_model(tmp_path)
    with track.start_run(**VERSIONS, api=daemon.url, token=researcher(daemon, "ada")) as run:
        single = run.log_artifact(model / "config.json")
        summary = run.log_artifact(model, name="checkpoint-500")
        assert run.log_artifact(model, name="checkpoint-500") == summary  # the same files again: nothing new
        (model / "config.json").write_text('{"layers": 3}')
        with pytest.raises(ApiError) as changed:
            run.log_artifact(model / "config.json")
    assert changed.value.status == 409 and "config.json" in changed.value.message, changed.value
    assert "log the new file under another name" in changed.value.hint, changed.value
    weights = (model / "nested" / "weights.bin").read_bytes()
    expected = {
        "config.json": hashlib.sha256(b'{"layers": 2}').hexdigest(),
        "checkpoint-500/config.json": hashlib.sha256(b'{"layers": 2}').hexdigest(),
        "checkpoint-500/nested/weights.bin": hashlib.sha256(weights).hexdigest(),
    }
    recorded = artifacts(daemon, run.run_id)
    assert {name: a["sha256"] for name, a in recorded.items()} == expected, recorded
    assert recorded["checkpoint-500/config.json"]["kind"] == "checkpoint", recorded
    assert (single["uri"], single["sha256"], single["size_bytes"]) == (
        f"bashgym://runs/{run.run_id}/config.json",
        expected["config.json"],
        13,
    )
    manifest = "\n".join(
        [f"{expected['checkpoint-500/config.json']}  13  config.json",
         f"{expected['checkpoint-500/nested/weights.bin']}  {len(weights)}  nested/weights.bin"]
    )  # fmt: skip
    assert summary == {
        "name": "checkpoint-500",
        "uri": f"bashgym://runs/{run.run_id}/checkpoint-500",
        "files": 2,
        "bytes": 13 + len(weights),
        "sha256": hashlib.sha256(manifest.encode()).hexdigest(),
    }


def test_artifact_uploads_refuse_other_actors_workspaces_escaping_names_and_oversized_files(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    """A token of another actor (training.launch, not training.stop) or of another workspace reaches no run's
    artifacts; a name that leaves the run, and a file past the operator's limit, record nothing."""
    outsider = issue_token(daemon, "mallory", "researcher", workspace="ws9")
    other_researcher = researcher(daemon, "otto")  # may launch in the project, but did not open the run
    owner = researcher(daemon, "ines")
    run = track.start_run(**VERSIONS, api=daemon.url, token=owner)
    route = f"/v1/projects/{PROJECT}/tracked-runs/{run.run_id}/artifacts"
    try:
        for token in (other_researcher, outsider):
            with daemon.client(token) as client:
                answer = client.put(route, params={"name": "model.bin"}, content=b"planted")
                assert answer.status_code in {403, 404}, answer.text
                elsewhere = client.put(route, params={"name": "m.bin", "workspace": "ws9"}, content=b"planted")
                assert elsewhere.status_code in {403, 404}, elsewhere.text
        with daemon.client(owner) as client:  # the run's own token: the daemon checks what a client could skip
            for name in ("../../etc/passwd", "a/../../b", "/etc/passwd", "a\x00b", "a\\b", "a//b", "./a", ""):
                answer = client.put(route, params={"name": name}, content=b"planted")
                assert answer.status_code == 422, (name, answer.text)
        big = tmp_path / "big.bin"
        big.write_bytes(b"\1" * (MAX_UPLOAD_BYTES + 1))
        with pytest.raises(ApiError) as too_large:
            run.log_artifact(big)
        assert too_large.value.status == 413, too_large.value
    finally:
        run.end()
    assert artifacts(daemon, run.run_id) == {}
