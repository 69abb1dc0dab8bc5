"""Model sources and digests: what a launch resolves reaches the host only inside the roots, and bytes only through
a project that holds them.

Attacks of issue 50: finding 4 (a model version registered with `source_uri: hf:///<host dir>` trained a run on an
operator's 0700 directory: `hf://` was taken for a path, and a version's source skipped the confinement a typed path
gets) and finding 5 (a dataset version registered by reference with another workspace's digest was trained on: the
training route and the campaign runner asked the blob store whether it had the bytes, not whether the project held
them). The daemon runs with an operator's defaults (no data roots beyond its home's), in a working directory where
`acme/shadow` is a model directory: a hub id its trainers would load from disk. What an older daemon let in is
written to the ledger before the daemon starts, as that daemon would have left it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.client.models import BLOB_URI
from bashgym.client.specs import Actor, DatasetVersionSpec, ModelVersionSpec, ProjectSpec
from bashgym.daemon.blobs import BlobStore
from bashgym.ledger.campaign_specs import CampaignSpec
from bashgym.ledger.store import Ledger

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.e2e.trust_boundaries.test_host_paths import OPERATOR_DEFAULTS
from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, eventually, start_daemon

SHADOWED = "acme/shadow"  # a Hub id that names a model directory where the daemon's trainers start


def sft_rows(subject: str) -> str:
    """Chat rows an SFT run takes; `subject` makes each file's bytes (and digest) its own."""
    return "".join(
        json.dumps(
            {"messages": [{"role": "user", "content": f"{subject} {i}"}, {"role": "assistant", "content": "ok"}]}
        )
        + "\n"
        for i in range(4)
    )


MINE_ROWS = sft_rows("rows of project mine")
A_ROWS = sft_rows("workspace A's private rows")  # uploaded by workspace A (default) for its project pa
A_DIGEST = hashlib.sha256(A_ROWS.encode()).hexdigest()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, tiny: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("sources")
    operator = root / "operator-models"  # the operator's own models, 0700, outside every root
    shutil.copytree(tiny, operator / "tiny")
    operator.chmod(0o700)
    workdir = root / "workdir"
    shutil.copytree(tiny, workdir / SHADOWED)
    home = root / "home"
    asyncio.run(_as_an_older_daemon_left_it(home, operator / "tiny"))
    daemon = _started_in(workdir, home)
    try:
        yield {
            "daemon": daemon,
            "operator": operator / "tiny",
            "rita": issue_token(daemon, "rita", "researcher", project="mine"),
            "bea": issue_token(daemon, "bea", "researcher", workspace="wsb", project="pb"),
        }
    finally:
        daemon.close()


def _started_in(workdir: Path, home: Path) -> RunningDaemon:
    """The daemon, started in `workdir` (its trainers and evaluators start where it does)."""
    previous = os.getcwd()
    os.chdir(workdir)
    try:
        return start_daemon(home, env=OPERATOR_DEFAULTS)
    finally:
        os.chdir(previous)


async def _as_an_older_daemon_left_it(home: Path, operator_model: Path) -> None:
    """Records an older daemon accepted: versions whose source is a host path, dataset versions by another
    workspace's digest, and a cascade on each, paused by its owner after its baseline was decided."""
    home.mkdir(mode=0o700)
    blobs = BlobStore(home / "artifacts")
    rita, bea, alice = Actor(actor_id="rita"), Actor(actor_id="bea"), Actor(actor_id="alice")
    async with await Ledger.open(home / "ledger.sqlite3") as ledger:
        await ledger.create_project(rita, "default", ProjectSpec(project_id="mine", name="Mine"))
        for version, source, kind in (
            ("stolen", f"hf://{operator_model}", "causal_lm"),  # hf:///<dir>
            ("bare", str(operator_model), "causal_lm"),  # no scheme at all
            ("stolen-rm", f"hf://{operator_model}", "reward_model"),
            ("shadow", f"hf://{SHADOWED}", "causal_lm"),
            ("hub-m", "hf://org/m", "causal_lm"),
        ):
            old = ModelVersionSpec.model_construct(
                model_version_id=version, model_id="m", source_uri=source, source_revision="", config_digest=None,
                parent_version_id=None, files=[], kind=kind,
            )  # fmt: skip
            await ledger.register_model_version(rita, "default", "mine", old)
        await _register_held(ledger, blobs, rita, "default", "mine", MINE_ROWS, version="rows-v1")
        await _paused_cascade(ledger, rita, "default", "mine", "old-hub", model="stolen", data="rows-v1")

        await ledger.create_project(alice, "default", ProjectSpec(project_id="pa", name="A's"))
        await _register_held(ledger, blobs, alice, "default", "pa", A_ROWS, version="a-rows")
        await ledger.create_project(bea, "wsb", ProjectSpec(project_id="pb", name="B's"))
        hub = ModelVersionSpec(model_version_id="base-b", model_id="m", source_uri="hf://org/m")
        await ledger.register_model_version(bea, "wsb", "pb", hub)
        by_digest = DatasetVersionSpec(
            dataset_version_id="old-theirs", dataset_id="rows", source_uri="s3://a/rows.jsonl", content_digest=A_DIGEST
        )
        await ledger.register_dataset_version(bea, "wsb", "pb", by_digest)
        await _paused_cascade(ledger, bea, "wsb", "pb", "old-digest", model="base-b", data="old-theirs")


async def _register_held(
    ledger: Ledger, blobs: BlobStore, actor: Actor, ws: str, project: str, rows: str, *, version: str
) -> None:
    """An upload for `project` (PUT /v1/blobs) registered as a dataset version."""
    path = blobs.root / f"{version}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rows)
    sha, size = await blobs.put_file(path)
    path.unlink()
    await ledger.hold_blob(actor, ws, project, sha, size)
    spec = DatasetVersionSpec(
        dataset_version_id=version, dataset_id="rows", source_uri=BLOB_URI + sha, content_digest=sha
    )
    await ledger.register_dataset_version(actor, ws, project, spec)


async def _paused_cascade(
    ledger: Ledger, owner: Actor, ws: str, project: str, cid: str, *, model: str, data: str
) -> None:
    """A two-stage cascade from `model` on `data`, validated, started and paused once its baseline was decided."""
    stages = [
        {"name": f"s{n}", "recipe": {"method": "sft", "max_steps": 1, "max_seq_length": 64}, "dataset_version_id": data}
        for n in (1, 2)
    ]
    spec = CampaignSpec.model_validate(
        {"campaign_id": cid, "title": cid, "objective": "o", "suite_id": "bash-tasks-v1", "kind": "cascade",
         "starting_model_version_id": model, "dataset_version_ids": [data], "stages": stages, "budget": {"runs": 2}}
    )  # fmt: skip
    await ledger.create_campaign(owner, ws, project, spec)
    for version, status in enumerate(("ready", "active"), start=1):
        await ledger.transition_campaign(owner, ws, project, cid, status, expected_version=version, reason=status)
    baseline = (await ledger.add_baseline(owner, ws, project, cid)).record["iteration_id"]
    await ledger.update_iteration(owner, ws, project, cid, baseline, "decided", decision="baseline", reason_code="x")
    await ledger.transition_campaign(owner, ws, project, cid, "paused", expected_version=3, reason="paused")


def _first_stage_once_resumed(client: Any, base: str, params: dict[str, str] | None = None) -> dict[str, Any]:
    """Resume a paused cascade (its owner may), and its first stage once the runner moved it."""
    resumed = client.post(f"{base}/resume", params=params, json={"expected_version": 4})
    assert resumed.status_code == 201, resumed.text

    def moved() -> dict[str, Any] | None:
        iterations = client.get(f"{base}/iterations", params=params).json()["iterations"]
        first = next((i for i in iterations if i["kind"] == "stage"), None)  # stages are written once it runs
        return first if first is not None and first["stage"] != "queued" else None

    return dict(eventually(f"the first stage of {base} to move", moved, timeout_s=60))


def _status_once_ended(client: Any, base: str, params: dict[str, str] | None = None) -> str:
    def ended() -> str | None:
        status = str(client.get(base, params=params).json()["status"])
        return None if status == "active" else status

    return str(eventually(f"{base} to end", ended))


def test_a_hub_source_names_a_hub_repo_never_a_path_at_registration(host: dict[str, Any]) -> None:
    daemon, operator = host["daemon"], host["operator"]
    with tenant(daemon, host["rita"]) as rita:
        for source in (
            f"hf://{operator}",  # hf:///<dir>
            f"hf://{operator.parent}/../{operator.parent.name}/tiny",
            "hf://../../etc",
            "hf://./tiny",
            "hf://~/models",
            "hf://~root/.ssh",
            "hf://org/../../etc",
            "hf://org/name/extra",
            "hf://org",
            "hf://",
            f"hf://{SHADOWED}",  # a directory where the daemon's trainers start
            str(operator),  # no scheme at all
            f"s3://bucket{operator}",
        ):
            version = {"model_version_id": "x", "model_id": "m", "source_uri": source}
            answer = rita.post("/v1/projects/mine/model-versions", json=version)
            assert answer.status_code == 422, (source, answer.text)
            message = answer.json()["error"]["message"]
            assert "source_uri" in message and "hf://ORG/NAME" in message, (source, message)
        hub = {"model_version_id": "hub", "model_id": "m", "source_uri": "hf://org/model-1b", "source_revision": "a"}
        assert rita.post("/v1/projects/mine/model-versions", json=hub).status_code == 201


def test_a_typed_hub_id_that_names_a_directory_where_trainers_start_is_refused(host: dict[str, Any]) -> None:
    daemon = host["daemon"]
    with tenant(daemon, host["rita"]) as rita:
        sha = rita.put("/v1/blobs", params={"project": "mine"}, content=MINE_ROWS.encode()).json()["sha256"]
        launch = {
            "method": "sft",
            "base_model": SHADOWED,
            "dataset_path": BLOB_URI + sha,
            "max_steps": 1,
            "tracking_context": tracking_context(project_id="mine", dataset_content_digest=sha),
        }
        planned = rita.post("/v1/training/plan", json=launch).json()
        assert not planned["ready"] and SHADOWED in " ".join(planned["reasons"]), planned
        started = rita.post("/v1/training/start", json=launch)
        assert started.status_code == 422 and SHADOWED in started.text, started.text
        distill = {**launch, "method": "distillation", "base_model": "org/student", "teacher_model": SHADOWED}
        planned = rita.post("/v1/training/plan", json=distill).json()
        assert not planned["ready"] and "teacher_model" in " ".join(planned["reasons"]), planned
        assert rita.get("/v1/projects/mine/runs").json() == []


def test_a_version_made_before_the_rule_is_refused_wherever_it_resolves(host: dict[str, Any]) -> None:
    daemon = host["daemon"]
    with tenant(daemon, host["rita"]) as rita:
        for version in ("stolen", "bare", "shadow"):
            named = {"project": "mine", "model_version": version, "dataset_version": "rows-v1"}
            for route in ("/v1/training/plan", "/v1/training/start"):
                answer = rita.post(route, params=named, json={"method": "sft", "max_steps": 1})
                assert answer.status_code in {403, 422} and "source_uri" in answer.text, (version, route, answer.text)
        rewarded = {
            "method": "grpo",
            "grpo_reward_source": "reward_model",
            "grpo_reward_model": "stolen-rm",
            "max_steps": 1,
        }
        named = {"project": "mine", "model_version": "hub-m", "dataset_version": "rows-v1"}
        planned = rita.post("/v1/training/plan", params=named, json=rewarded).json()
        assert not planned["ready"] and "stolen-rm" in " ".join(planned["reasons"]), planned
        for version in ("stolen", "bare"):
            evaluated = rita.post("/v1/projects/mine/evaluations", json={"model_version_id": version, "limit_tasks": 2})
            assert evaluated.status_code in {403, 422}, evaluated.text
            exported = rita.post(f"/v1/projects/mine/model-versions/{version}/export", json={"to": f"out-{version}"})
            assert exported.status_code in {403, 422}, exported.text
        assert not list((daemon.home / "exports").rglob("out-*"))

        draft = {"campaign_id": "new-hub", "title": "t", "objective": "o", "suite_id": "bash-tasks-v1",
                 "starting_model_version_id": "stolen", "dataset_version_ids": ["rows-v1"],
                 "base_recipe": {"method": "sft", "max_steps": 1}, "budget": {"runs": 1}}  # fmt: skip
        assert rita.post("/v1/projects/mine/campaigns", json=draft).status_code == 201
        checked = rita.post("/v1/projects/mine/campaigns/new-hub/validate", json={"expected_version": 1}).json()
        assert not checked["ok"] and checked["campaign"]["status"] == "draft", checked
        assert any("source_uri" in f["message"] for f in checked["findings"]), checked["findings"]

        base = "/v1/projects/mine/campaigns/old-hub"
        first = _first_stage_once_resumed(rita, base)
        assert (first["run_id"], first["reason_code"]) == (None, "launch_refused"), first
        assert _status_once_ended(rita, base) == "failed"
        assert rita.get("/v1/projects/mine/runs").json() == []  # nothing trained on the operator's directory


def test_a_digest_known_from_another_workspace_trains_nothing_until_the_project_uploads_it(
    host: dict[str, Any],
) -> None:
    daemon = host["daemon"]
    in_b = {"workspace": "wsb"}
    with tenant(daemon, host["bea"]) as bea:
        by_digest = {"dataset_version_id": "theirs", "dataset_id": "rows", "source_uri": "s3://a/rows.jsonl",
                     "content_digest": A_DIGEST}  # fmt: skip
        assert bea.post("/v1/projects/pb/dataset-versions", params=in_b, json=by_digest).status_code == 201
        named = {**in_b, "project": "pb", "model_version": "base-b", "dataset_version": "theirs"}
        typed = {**in_b, "dataset_version": "theirs", "dataset_project": "pb"}
        context = tracking_context(workspace_id="wsb", project_id="pb", dataset_content_digest=A_DIGEST)
        for params, body in (
            (named, {"method": "sft", "max_steps": 1}),
            (typed, {"method": "sft", "max_steps": 1, "base_model": "org/m", "tracking_context": context}),
        ):
            for route in ("/v1/training/plan", "/v1/training/start"):
                answer = bea.post(route, params=params, json=body)
                assert answer.status_code == 404 and A_DIGEST[:12] in answer.text, (route, answer.text)
                assert "PUT /v1/blobs?project=pb" in answer.json()["error"]["hint"], answer.text

        base = "/v1/projects/pb/campaigns/old-digest"
        first = _first_stage_once_resumed(bea, base, in_b)
        assert (first["run_id"], first["reason_code"]) == (None, "launch_refused"), first
        assert _status_once_ended(bea, base, in_b) == "failed"
        assert bea.get("/v1/projects/pb/runs", params=in_b).json() == []  # nothing trained on A's rows

        # The same bytes uploaded for its own project are its own to train on.
        own = bea.put("/v1/blobs", params={**in_b, "project": "pb"}, content=A_ROWS.encode())
        assert own.status_code == 200 and own.json()["sha256"] == A_DIGEST, own.text
        planned = bea.post("/v1/training/plan", params=named, json={"method": "sft", "max_steps": 1})
        assert planned.status_code == 200 and planned.json()["ready"], planned.text
        assert planned.json()["request"]["dataset_path"].endswith(A_DIGEST[2:])
