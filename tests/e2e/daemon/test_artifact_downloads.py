"""Downloading a run's artifacts (issue 54, item 3): `GET /v1/projects/P/runs/R/artifacts/PATH` and the web view's
link, on a real daemon. A tracked run's uploads come from the blob store, a launched run's files from its directory;
both arrive whole or by one range, with their recorded sha256 in the headers. An attacker with a viewer token of
another workspace or project, a token without ledger.read, a path that climbs or is absolute, a link out of the run's
directory and bytes changed since they were recorded all get nothing of the bytes."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from bashgym import track

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, tracking_context
from tests.support.helpers import RunningDaemon, cli, register_versions, running_daemon

PROJECT, OTHER, NAME = "nightly", "elsewhere", "Nightly SFT"
WEIGHTS = bytes(range(256)) * 4000  # 1,024,000 bytes: several chunks of the stream
ADAPTER = b"adapter weights " * 100


@dataclass
class Runs:
    daemon: RunningDaemon
    tracked: str  # a tracked run with a `model` artifact: config.json and nested/weights.bin, from blobs
    launched: str  # a run whose files lie in its directory, as a launched run's do


def route(run_id: str, path: str) -> str:
    return f"/v1/projects/{PROJECT}/runs/{run_id}/artifacts/{path}"


def record(client: httpx.Client, run_id: str, path: str, data: bytes) -> None:
    body = {
        "run_id": run_id,
        "kind": "adapter",
        "uri": f"bashgym://runs/{run_id}/{path}",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
    }
    answer = client.post(f"/v1/projects/{PROJECT}/artifacts", json=body)
    assert answer.status_code == 201, answer.text


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("downloads")
    model = root / "model"
    (model / "nested").mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 2}')
    (model / "nested" / "weights.bin").write_bytes(WEIGHTS)
    with (
        pytest.MonkeyPatch.context() as patch,
        running_daemon(root / "home") as daemon,
        daemon.client() as admin,
    ):
        patch.setenv("BASHGYM_HOME", str(root / "user"))  # the tracking client's spool; the daemon's home is its own
        for project in (PROJECT, OTHER):
            assert admin.post("/v1/projects", json={"project_id": project, "name": NAME}).status_code == 201
        register_versions(daemon, PROJECT, model, sft_data(root, rows=4))
        token = issue_token(daemon, "rita", "researcher", project=PROJECT)
        with track.start_run(project=PROJECT, model_version="tiny-v1", dataset_version="rows-v1", api=daemon.url,
                             token=token) as run:  # fmt: skip
            run.log_artifact(model, name="model")
        context = tracking_context(model_id="ctx", model_version_id="ctx-v1")  # not the tracked run's versions
        registered = admin.post("/v1/runs", json={"method": "sft", "tracking_context": context})
        assert registered.status_code == 201, registered.text
        launched = str(registered.json()["record"]["run_id"])
        final = daemon.home / "runs" / launched / "final"
        final.mkdir(parents=True)
        (final / "adapter.bin").write_bytes(ADAPTER)
        record(admin, launched, "final/adapter.bin", ADAPTER)
        yield Runs(daemon, run.run_id, launched)


def test_a_tracked_runs_upload_downloads_whole_with_its_recorded_sha256(runs: Runs) -> None:
    viewer = issue_token(runs.daemon, "vic", "viewer", project=PROJECT)
    with tenant(runs.daemon, viewer) as client:
        shown = client.get(f"/v1/projects/{PROJECT}/runs/{runs.tracked}").json()
        recorded = {a["uri"]: a for a in shown["artifacts"]}[f"bashgym://runs/{runs.tracked}/model/nested/weights.bin"]
        answer = client.get(route(runs.tracked, "model/nested/weights.bin"))
    assert answer.status_code == 200, answer.text
    assert hashlib.sha256(answer.content).hexdigest() == recorded["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert answer.headers["x-content-sha256"] == recorded["sha256"]
    assert answer.headers["etag"] == f'"{recorded["sha256"]}"'
    digest = base64.b64encode(hashlib.sha256(WEIGHTS).digest()).decode()
    assert answer.headers["repr-digest"] == f"sha-256=:{digest}:"
    assert answer.headers["content-length"] == str(len(WEIGHTS)) and answer.headers["accept-ranges"] == "bytes"
    assert answer.headers["content-type"] == "application/octet-stream"
    assert 'filename="weights.bin"' in answer.headers["content-disposition"]


def test_one_range_answers_206_with_its_bytes_and_a_range_past_the_end_416(runs: Runs) -> None:
    with runs.daemon.client() as client:
        path = route(runs.tracked, "model/nested/weights.bin")
        middle = client.get(path, headers={"Range": "bytes=1000-1999"})
        assert middle.status_code == 206, middle.text
        assert middle.content == WEIGHTS[1000:2000]
        assert middle.headers["content-range"] == f"bytes 1000-1999/{len(WEIGHTS)}"
        assert middle.headers["x-content-sha256"] == hashlib.sha256(WEIGHTS).hexdigest()  # the whole file's
        tail = client.get(path, headers={"Range": "bytes=-10"})
        assert (tail.status_code, tail.content) == (206, WEIGHTS[-10:])
        rest = client.get(path, headers={"Range": f"bytes={len(WEIGHTS) - 5}-"})
        assert (rest.status_code, rest.content) == (206, WEIGHTS[-5:])
        past = client.get(path, headers={"Range": f"bytes={len(WEIGHTS)}-"})
        assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{len(WEIGHTS)}"
        stale = client.get(path, headers={"Range": "bytes=0-9", "If-Range": '"another"'})
        assert stale.status_code == 200 and stale.content == WEIGHTS  # the file changed for that client: all of it
        cached = client.get(path, headers={"If-None-Match": f'"{hashlib.sha256(WEIGHTS).hexdigest()}"'})
        assert cached.status_code == 304 and cached.content == b""


def test_a_launched_runs_file_downloads_from_its_run_directory(runs: Runs) -> None:
    with runs.daemon.client() as client:
        answer = client.get(route(runs.launched, "final/adapter.bin"))
    assert answer.status_code == 200, answer.text
    assert answer.content == ADAPTER and answer.headers["x-content-sha256"] == hashlib.sha256(ADAPTER).hexdigest()


def test_tokens_of_another_workspace_or_project_or_without_ledger_read_get_none_of_the_bytes(runs: Runs) -> None:
    outsider = issue_token(runs.daemon, "mallory", "viewer", workspace="ws9")
    neighbour = issue_token(runs.daemon, "nina", "viewer", project=OTHER)
    launcher = issue_token(runs.daemon, "lou", "", project=PROJECT, capabilities=("training.launch",))
    for token in (outsider, neighbour, launcher):
        with tenant(runs.daemon, token) as client:
            for run_id, path in ((runs.tracked, "model/config.json"), (runs.launched, "final/adapter.bin")):
                for params in ({}, {"workspace": "ws9"}, {"workspace": "default"}):
                    answer = client.get(route(run_id, path), params=params)
                    assert answer.status_code in {401, 403, 404}, (token[:6], path, params, answer.text)
                    assert ADAPTER[:16] not in answer.content and b"layers" not in answer.content
    with tenant(runs.daemon, outsider) as client:  # the same run id asked of the outsider's own workspace's project
        mirrored = client.get(f"/v1/projects/{PROJECT}/runs/{runs.launched}/artifacts/final/adapter.bin")
        assert mirrored.status_code in {403, 404}, mirrored.text


def test_paths_that_climb_or_are_absolute_are_refused_even_when_recorded(runs: Runs) -> None:
    """A writer of the project may record any uri; a recorded `..` still reaches no other run's directory."""
    victim = runs.daemon.home / "runs" / "victim" / "final"
    victim.mkdir(parents=True)
    (victim / "secret.bin").write_bytes(b"another run's weights")
    with runs.daemon.client() as admin:
        record(admin, runs.launched, "../victim/final/secret.bin", b"another run's weights")
        climbing = ("..%2Fvictim%2Ffinal%2Fsecret.bin", "final/..%2F..%2Fvictim/final/secret.bin", "%2Fetc%2Fpasswd")
        odd = ("final/%2E/adapter.bin", "final/%2Fadapter.bin", "final%5Cadapter.bin", "final%00.bin")
        for path in (*climbing, *odd):
            answer = admin.get(f"/v1/projects/{PROJECT}/runs/{runs.launched}/artifacts/{path}")
            assert answer.status_code in {404, 422}, (path, answer.text)
            assert b"another run" not in answer.content
        unrecorded = admin.get(route(runs.launched, "training.log"))
        assert unrecorded.status_code == 404 and "recorded no artifact 'training.log'" in unrecorded.text


def test_a_link_out_of_the_run_directory_is_not_served(runs: Runs) -> None:
    outside = runs.daemon.home / "outside.bin"
    outside.write_bytes(b"a host file")
    link = runs.daemon.home / "runs" / runs.launched / "final" / "link.bin"
    link.symlink_to(outside)
    with runs.daemon.client() as admin:
        record(admin, runs.launched, "final/link.bin", b"a host file")  # even with the outside file's digest
        answer = admin.get(route(runs.launched, "final/link.bin"))
    assert answer.status_code == 409 and b"a host file" not in answer.content, answer.text
    assert "leads out of its run directory" in answer.json()["error"]["message"]


def test_bytes_changed_since_they_were_recorded_are_refused_saying_both_digests(runs: Runs) -> None:
    changed = runs.daemon.home / "runs" / runs.launched / "final" / "changed.bin"
    changed.write_bytes(b"first")
    with runs.daemon.client() as admin:
        record(admin, runs.launched, "final/changed.bin", b"first")
        assert admin.get(route(runs.launched, "final/changed.bin")).content == b"first"
        changed.write_bytes(b"other")  # the same size: only the digest tells
        answer = admin.get(route(runs.launched, "final/changed.bin"))
    assert answer.status_code == 409 and b"other" not in answer.content, answer.text
    message = answer.json()["error"]["message"]
    assert hashlib.sha256(b"first").hexdigest() in message and hashlib.sha256(b"other").hexdigest() in message
    assert "not served" in message


def test_the_run_page_links_each_artifact_to_its_download_under_the_session(runs: Runs) -> None:
    viewer = issue_token(runs.daemon, "vera", "viewer", project=PROJECT)
    with tenant(runs.daemon, viewer) as client:
        link = client.post("/v1/ui/links").json()["url"]
    with httpx.Client(base_url=runs.daemon.url, timeout=30) as browser:
        assert browser.get(link.removeprefix(runs.daemon.url)).status_code == 303
        page = browser.get(f"/ui/p/{PROJECT}/runs/{runs.tracked}")
        url = f"/ui/p/{PROJECT}/runs/{runs.tracked}/artifacts/model/nested/weights.bin"
        assert f'href="{url}"' in page.text, page.text
        answer = browser.get(url)
        assert (
            answer.status_code == 200
            and hashlib.sha256(answer.content).hexdigest() == hashlib.sha256(WEIGHTS).hexdigest()
        )
        assert answer.headers["x-content-sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
        part = browser.get(url, headers={"Range": "bytes=0-9"})
        assert (part.status_code, part.content) == (206, WEIGHTS[:10])
        other = browser.get(f"/ui/p/{OTHER}/runs/{runs.tracked}/artifacts/model/config.json")
        assert other.status_code in {403, 404} and b"layers" not in other.content
        climbing = browser.get(f"/ui/p/{PROJECT}/runs/{runs.launched}/artifacts/..%2Fvictim%2Ffinal%2Fsecret.bin")
        assert climbing.status_code in {404, 422}
    with httpx.Client(base_url=runs.daemon.url, timeout=30) as stranger:  # no session: a sign-in page, no bytes
        refused = stranger.get(url)
        assert refused.status_code == 401 and b"layers" not in refused.content


def test_the_cli_downloads_a_folder_of_artifacts_checked_and_skips_what_is_already_there(
    runs: Runs, tmp_path: Path
) -> None:
    env = runs.daemon.env()
    out = tmp_path / "out"
    args = ("run", "download", "--project", PROJECT, runs.tracked, "model/", "--out", str(out), "--json")
    first = cli(env, *args)
    assert first.code == 0, first.stderr
    summary = first.json()
    assert (summary["downloaded"], summary["unchanged"]) == (2, 0), summary
    assert (out / "model" / "nested" / "weights.bin").read_bytes() == WEIGHTS
    assert (out / "model" / "config.json").read_text() == '{"layers": 2}'
    again = cli(env, *args).json()
    assert (again["downloaded"], again["unchanged"], again["bytes"]) == (0, 2, 0), again
    (out / "model" / "config.json").write_text("edited by hand")
    repaired = cli(env, *args).json()
    assert [f["path"] for f in repaired["files"] if f["status"] == "downloaded"] == ["model/config.json"]
    assert (out / "model" / "config.json").read_text() == '{"layers": 2}'
    one = cli(env, "run", "download", "--project", PROJECT, runs.tracked, "model/config.json", "--out", str(tmp_path))
    assert one.code == 0 and "model/config.json" in one.stdout, one.stderr
    missing = cli(env, "run", "download", "--project", PROJECT, runs.tracked, "nothing/", "--out", str(tmp_path))
    assert missing.code == 5 and "recorded no artifact at or under 'nothing/'" in missing.stderr, missing.stderr
    stranger = issue_token(runs.daemon, "sid", "viewer", project=OTHER)
    taken = tmp_path / "taken"
    refused = cli({**env, "BASHGYM_TOKEN": stranger}, "run", "download", "--project", PROJECT, runs.tracked,
                  "--out", str(taken))  # fmt: skip
    assert refused.code in {4, 5} and not taken.exists(), refused.stderr
