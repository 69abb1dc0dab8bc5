"""The Hub stand-in answers the real huggingface_hub client: Jobs (scripted and executed), downloads, token roles,
private repos and injected faults."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, JobStage, hf_hub_download, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from tests.support.hub_jobs import hardware
from tests.support.hub_standin import HubStandIn, TokenInfo

pytestmark = pytest.mark.timeout(60)

ALICE = "hf_alice_write"  # alice, member of the org "team"
READER = "hf_alice_read"
BOB = "hf_bob_write"
SCOPED = "hf_alice_fine_grained"  # reads one repo of team, writes alice's own namespace
GRANTS = (("team/rows", ("repo.content.read",)), ("alice", ("repo.write",)))
TOKENS = {
    ALICE: TokenInfo("alice", "write", ("team",)),
    READER: TokenInfo("alice", "read", ("team",), display_name="read-only"),
    BOB: TokenInfo("bob", "write"),
    SCOPED: TokenInfo("alice", "fineGrained", ("team",), scoped=GRANTS, global_permissions=("discussion.write",)),
}
SECRET = "s3cret-" + "Qx7" * 8
PY = "python"  # the stand-in puts the test venv's directory first on an executed job's PATH


@pytest.fixture
def hub() -> Iterator[HubStandIn]:
    with HubStandIn(tokens=TOKENS) as standin:
        yield standin


@pytest.fixture
def executing() -> Iterator[HubStandIn]:
    with HubStandIn(tokens=TOKENS, job_mode="execute") as standin:
        yield standin


def api(hub: HubStandIn, token: str | bool = ALICE) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)


def run(hub: HubStandIn, code: str, **kwargs: object) -> str:
    return api(hub).run_job(image="python:3.12", command=[PY, "-c", code], **kwargs).id  # type: ignore[arg-type]


def finished(hub: HubStandIn, job_id: str, timeout: float = 15) -> str:
    job = api(hub).wait_for_job(job_id, poll_interval=0.05, timeout=timeout)
    return str(job.status.stage)


# -- scripted jobs ------------------------------------------------------------------------------------------------


def test_run_job_keeps_secret_values_out_of_every_answer(hub: HubStandIn) -> None:
    job = api(hub).run_job(
        image="python:3.12",
        command=["python", "train.py"],
        env={"MODE": "sft"},
        secrets={"HF_TOKEN": SECRET},
        flavor="a10g-small",
        timeout="5m",
        labels={"team": "ml"},
    )
    assert (job.status.stage, job.owner.name, job.flavor, job.docker_image) == (
        "SCHEDULING",
        "alice",
        "a10g-small",
        "python:3.12",
    )
    assert job.secrets == {"HF_TOKEN": None} and job.environment == {"MODE": "sft"}
    assert job.labels is not None and job.labels["team"] == "ml" and "name" in job.labels  # the client names it
    inspected = api(hub).inspect_job(job_id=job.id)
    assert inspected.status.stage == JobStage.SCHEDULING and inspected.secrets == {"HF_TOKEN": None}
    assert not hasattr(inspected, "timeout")  # JobInfo drops timeoutSeconds
    raw = httpx.get(f"{hub.url}/api/jobs/alice", headers={"Authorization": f"Bearer {ALICE}"})
    assert raw.json()[0]["timeoutSeconds"] == 300 and SECRET not in raw.text
    kept = hub.state.jobs[job.id]
    assert kept.spec["secrets"] == {"HF_TOKEN": SECRET}
    assert SECRET not in json.dumps([kept.spec["command"], kept.spec["arguments"], kept.spec["environment"]])


def test_scripted_job_logs_metrics_and_completion() -> None:
    with HubStandIn(tokens=TOKENS, stream_idle_close_s=0.3) as hub:  # no-follow reads of a running job end quickly
        scripted_job_lifecycle(hub)


def scripted_job_lifecycle(hub: HubStandIn) -> None:
    job_id = run(hub, "pass")
    sample = {"cpu_usage_pct": 12, "memory_used_bytes": 1024, "gpus": {}}
    hub.advance(job_id, "RUNNING", logs=["step 1", "step 2"], metrics=[{"cpu_usage_pct": 1}, sample])
    client = api(hub)
    assert client.inspect_job(job_id=job_id).status.stage == "RUNNING"
    started = time.monotonic()
    assert list(client.fetch_job_logs(job_id=job_id)) == ["step 1", "step 2"]
    assert list(client.fetch_job_metrics(job_id=job_id)) == [sample]  # the current sample only
    assert time.monotonic() - started < 3, "with stream_idle_close_s, no-follow reads end when the stream goes quiet"
    hub.advance(job_id, "COMPLETED", logs=["done"])
    assert list(client.fetch_job_logs(job_id=job_id, follow=True)) == ["step 1", "step 2", "done"]
    assert list(client.fetch_job_logs(job_id=job_id, tail=1)) == ["done"]
    assert list(client.fetch_job_metrics(job_id=job_id)) == []  # 406 once over, which the client swallows
    done = client.inspect_job(job_id=job_id)
    assert done.status.stage == "COMPLETED" and done.started_at and done.finished_at
    hub.advance(run(hub, "pass"), "ERROR", message="CUDA out of memory")
    assert [j.status.message for j in client.list_jobs(status="ERROR", namespace="alice")] == ["CUDA out of memory"]


def test_following_logs_across_quiet_spells(hub: HubStandIn) -> None:
    """As on the Hub, a running job's stream stays open through quiet spells, so a follower sees every line."""
    job_id = run(hub, "pass")
    hub.advance(job_id, "RUNNING", logs=["first"])
    later = threading.Timer(1.0, lambda: hub.advance(job_id, "COMPLETED", logs=["second"]))
    later.start()
    try:
        assert list(api(hub).fetch_job_logs(job_id=job_id, follow=True)) == ["first", "second"]
    finally:
        later.join()
    assert [path for _, path in hub.state.requests].count(f"/api/jobs/alice/{job_id}/logs") == 1


def test_cancel_and_list_with_filters(hub: HubStandIn) -> None:
    client = api(hub)
    first = client.run_job(image="python:3.12", command=["true"], labels={"team": "ml"}).id
    second = client.run_job(image="python:3.12", command=["true"], labels={"team": "infra"}).id
    client.cancel_job(job_id=first)
    assert client.inspect_job(job_id=first).status.stage == "CANCELED"
    assert [j.id for j in client.list_jobs(namespace="alice")] == [first, second]
    assert [j.id for j in client.list_jobs(status="CANCELED", namespace="alice")] == [first]
    assert [j.id for j in client.list_jobs(labels={"team": "infra"}, namespace="alice")] == [second]
    assert [
        j.id for j in client.list_jobs(status=["SCHEDULING", "RUNNING"], labels={"team": "ml"}, namespace="alice")
    ] == []
    assert list(api(hub, BOB).list_jobs(namespace="bob")) == []  # bob's namespace holds none of alice's jobs


def test_hardware_list_default_and_override(hub: HubStandIn) -> None:
    listed = {h.name: h for h in api(hub).list_jobs_hardware()}
    assert {"cpu-basic", "t4-small", "a10g-small", "a100-large", "h200", "h200x2"} <= set(listed)
    assert listed["cpu-basic"].accelerator is None and listed["cpu-basic"].unit_cost_usd == 0.000167
    assert listed["cpu-basic"].unit_label == "minute"
    a10g = listed["a10g-small"].accelerator
    assert a10g is not None and (a10g.model, a10g.quantity, a10g.vram) == ("A10G", "1", "24 GB")
    assert listed["h200x2"].accelerator is not None and listed["h200x2"].accelerator.quantity == "2"
    only = [hardware("l4x1", "Nvidia L4", "8 vCPU", "30 GB", 13333, ("L4", 1, "24 GB"))]
    with HubStandIn(hardware=only) as custom:
        assert [h.name for h in HfApi(endpoint=custom.url, token="any").list_jobs_hardware()] == ["l4x1"]
        with pytest.raises(HfHubHTTPError) as refused:
            run(custom, "pass", flavor="h200")
        assert refused.value.response.status_code == 400


# -- tokens and private repos ---------------------------------------------------------------------------------------


def test_token_roles(hub: HubStandIn) -> None:
    me = api(hub, READER).whoami()
    assert me["name"] == "alice" and [o["name"] for o in me["orgs"]] == ["team"]
    assert me["auth"] == {"type": "access_token", "accessToken": {"displayName": "read-only", "role": "read"}}
    with pytest.raises(HfHubHTTPError) as refused:
        api(hub, READER).run_job(image="python:3.12", command=["true"])
    assert refused.value.response.status_code == 403 and "write role" in refused.value.response.json()["error"]
    with pytest.raises(HfHubHTTPError) as unknown:
        api(hub, "hf_nobody").whoami()
    assert unknown.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as elsewhere:
        api(hub, BOB).run_job(image="python:3.12", command=["true"], namespace="team")
    assert elsewhere.value.response.status_code == 403
    with pytest.raises(HfHubHTTPError) as read_create:
        api(hub, READER).create_repo("alice/new")
    assert read_create.value.response.status_code == 403
    assert hub.state.jobs == {} and hub.state.repos == {}
    api(hub).create_repo("team/new", private=True)
    assert hub.state.repos["team/new"].private


def test_a_fine_grained_token_does_only_what_its_grants_say(hub: HubStandIn) -> None:
    hub.add_repo("team/rows", repo_type="dataset", files={"a.jsonl": b"{}\n"}, private=True)
    hub.add_repo("team/other", repo_type="dataset", files={"b.jsonl": b"{}\n"}, private=True)
    scoped = api(hub, SCOPED)
    token = scoped.whoami()["auth"]["accessToken"]
    assert token["role"] == "fineGrained" and token["fineGrained"]["global"] == ["discussion.write"]
    entities = [(g["entity"]["type"], g["entity"]["name"], g["permissions"]) for g in token["fineGrained"]["scoped"]]
    assert entities == [("model", "team/rows", ["repo.content.read"]), ("user", "alice", ["repo.write"])]
    assert scoped.dataset_info("team/rows").id == "team/rows"
    with pytest.raises(RepositoryNotFoundError):
        scoped.dataset_info("team/other")  # alice may read it, this token may not
    scoped.create_repo("alice/new", private=True)
    assert api(hub).model_info("alice/new").private
    for refused in (
        lambda: scoped.create_repo("team/new"),
        lambda: scoped.run_job(image="python:3.12", command=["true"], namespace="alice"),  # no job.write
    ):
        with pytest.raises(HfHubHTTPError) as answer:
            refused()
        assert answer.value.response.status_code == 403
    assert "team/new" not in hub.state.repos and hub.state.jobs == {}


def test_private_repo_is_not_found_outside_its_namespace(hub: HubStandIn) -> None:
    hub.add_repo("bob/secret-model", files={"config.json": b"{}"}, private=True)
    hub.add_repo("team/rows", repo_type="dataset", files={"a.jsonl": b"{}\n"}, private=True)
    hub.add_repo("bob/open-model", files={"config.json": b"{}"})
    with pytest.raises(RepositoryNotFoundError):
        api(hub).model_info("bob/secret-model")
    assert api(hub, BOB).model_info("bob/secret-model").private
    assert not api(hub).file_exists("bob/secret-model", "config.json")
    assert api(hub, READER).dataset_info("team/rows").id == "team/rows"  # alice is in team
    with pytest.raises(RepositoryNotFoundError):
        api(hub, BOB).dataset_info("team/rows")
    anonymous = api(hub, False)
    assert anonymous.model_info("bob/open-model").sha == hub.state.repos["bob/open-model"].commits[-1]
    with pytest.raises(RepositoryNotFoundError):
        anonymous.model_info("bob/secret-model")
    with pytest.raises(HfHubHTTPError) as foreign:
        api(hub).upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="bob/open-model")
    assert foreign.value.response.status_code == 403


# -- downloads ----------------------------------------------------------------------------------------------------


def test_downloads_of_datasets_and_models(hub: HubStandIn, tmp_path: Path) -> None:
    rows = b'{"prompt": "hi", "completion": "hello"}\n'
    hub.add_repo("team/rows", repo_type="dataset", files={"data/train.jsonl": rows, "README.md": b"# rows"})
    first = hub.add_repo("alice/tiny", files={"config.json": b'{"v": 1}', "weights/model.bin": b"\0" * 4096})
    second = hub.add_repo("alice/tiny", files={"config.json": b'{"v": 2}'})
    cache = tmp_path / "cache"
    got = hf_hub_download(
        "team/rows", "data/train.jsonl", repo_type="dataset", endpoint=hub.url, token=ALICE, cache_dir=cache
    )
    assert Path(got).read_bytes() == rows
    assert Path(got).parent.parent.name == hub.state.repos["team/rows"].commits[-1]  # snapshots/<X-Repo-Commit>/
    folder = Path(snapshot_download("alice/tiny", endpoint=hub.url, token=ALICE, cache_dir=cache))
    assert folder.name == second and (folder / "config.json").read_bytes() == b'{"v": 2}'
    assert (folder / "weights/model.bin").read_bytes() == b"\0" * 4096
    old = Path(snapshot_download("alice/tiny", revision=first, endpoint=hub.url, token=ALICE, cache_dir=cache))
    assert (old / "config.json").read_bytes() == b'{"v": 1}'
    local = tmp_path / "rows"
    snapshot_download("team/rows", repo_type="dataset", endpoint=hub.url, token=False, local_dir=local)
    assert (local / "data/train.jsonl").read_bytes() == rows and (local / "README.md").read_bytes() == b"# rows"
    client = api(hub)
    assert client.file_exists("alice/tiny", "weights/model.bin") and not client.file_exists("alice/tiny", "nope.bin")
    info = client.model_info("alice/tiny", files_metadata=True)
    assert info.sha == second and client.repo_info("alice/tiny", revision=first).sha == first
    assert {s.rfilename: s.size for s in info.siblings or []} == {"config.json": 8, "weights/model.bin": 4096}
    listed = client.dataset_info("team/rows").siblings or []
    assert [s.rfilename for s in listed] == ["README.md", "data/train.jsonl"] and listed[0].size is None  # no blobs=


# -- executed jobs ------------------------------------------------------------------------------------------------


def test_execute_mode_runs_the_command(executing: HubStandIn) -> None:
    code = "print('hello'); import os; print(os.environ['HF_TOKEN'] == 'x'); print(os.environ['MODE'])"
    job_id = run(executing, code, env={"MODE": "sft"}, secrets={"HF_TOKEN": "x"})
    assert finished(executing, job_id) == "COMPLETED"
    assert list(api(executing).fetch_job_logs(job_id=job_id)) == ["hello", "True", "sft"]
    failing = run(executing, "import sys; print('bad', file=sys.stderr); sys.exit(3)")
    assert finished(executing, failing) == "ERROR"
    job = api(executing).inspect_job(job_id=failing)
    assert job.status.message is not None and "3" in job.status.message
    assert executing.state.jobs[failing].logs == ["bad"] and executing.state.jobs[failing].returncode == 3


def test_execute_mode_job_reaches_the_stand_in_and_streams(executing: HubStandIn) -> None:
    code = (
        "import time\n"
        "from huggingface_hub import HfApi\n"
        "print('as', HfApi().whoami()['name'])\n"
        "for i in range(3):\n"
        "    print('tick', i); time.sleep(0.2)\n"
    )
    job_id = run(executing, code, secrets={"HF_TOKEN": ALICE})
    lines = list(api(executing).fetch_job_logs(job_id=job_id, follow=True))
    assert lines == ["as alice", "tick 0", "tick 1", "tick 2"]
    assert api(executing).inspect_job(job_id=job_id).status.stage == "COMPLETED"


def test_execute_mode_cancel_and_timeout(executing: HubStandIn) -> None:
    client = api(executing)
    job_id = run(executing, "import time; print('sleeping'); time.sleep(60)")
    running = client.wait_for_job(job_id, poll_interval=0.05, timeout=10, stages=[JobStage.RUNNING])
    assert running.status.stage == "RUNNING"
    process = executing.state.jobs[job_id].process
    assert process is not None
    client.cancel_job(job_id=job_id)
    assert client.inspect_job(job_id=job_id).status.stage == "CANCELED"
    process.wait(timeout=5)
    timed = run(executing, "import time; time.sleep(30)", timeout=1)
    assert finished(executing, timed) == "ERROR"
    assert "timed out" in (client.inspect_job(job_id=timed).status.message or "")
    assert client.inspect_job(job_id=job_id).status.stage == "CANCELED"  # its process's end changed nothing


def test_leaving_the_stand_in_kills_running_jobs() -> None:
    with HubStandIn(job_mode="execute") as hub:
        job_id = run(hub, "import time; time.sleep(60)")
        HfApi(endpoint=hub.url, token="any").wait_for_job(
            job_id, poll_interval=0.05, timeout=10, stages=[JobStage.RUNNING]
        )
        process = hub.state.jobs[job_id].process
    assert process is not None and process.poll() is not None
    assert hub.state.jobs[job_id].stage == "ERROR"


# -- faults -------------------------------------------------------------------------------------------------------


def test_fail_next_then_success(hub: HubStandIn) -> None:
    run(hub, "pass")
    hub.fail_next(429, retry_after=0)
    started = time.monotonic()
    assert len(list(api(hub).list_jobs(namespace="alice"))) == 1  # http_backoff waits Retry-After + 1 s, retries
    assert time.monotonic() - started < 5
    listings = [request for request in hub.state.requests if request[1].startswith("/api/jobs/alice")]
    assert listings[-2:] == [("GET", "/api/jobs/alice"), ("GET", "/api/jobs/alice")]  # refused, then answered
    hub.fail_next(503, 2)
    answers = [httpx.get(f"{hub.url}/api/jobs/hardware").status_code for _ in range(3)]
    assert answers == [503, 503, 200]
