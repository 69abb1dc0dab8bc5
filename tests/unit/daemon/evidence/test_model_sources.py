"""A model version's files on this host: stored ones are materialised once from the blobs its project holds, a
hub id stays a hub id (and never a path), every other source is confined as a typed path, and a version whose
content is gone says how to bring it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bashgym.client.errors import InvalidInput, NotFound, RuleRejected
from bashgym.client.specs import Actor, ProjectSpec, RunRegistration
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.evidence.sources import COMPLETE, hub_models_loaded, run_model_spec
from bashgym.daemon.host_paths import PathRefused
from bashgym.daemon.launch.confine import Reach, base_model_of, model_files
from bashgym.daemon.settings import Settings
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.evaluation import EvalRequest

pytestmark = pytest.mark.anyio
ACTOR = Actor(actor_id="system:test")


async def stored_version(tmp_path: Path, ledger: Ledger) -> tuple[Reach, dict[str, object]]:
    """A version of project nightly whose files were uploaded for it."""
    settings = Settings(home=tmp_path / "home", data_roots=[tmp_path / "roots"])
    reach = Reach(settings, ledger, BlobStore(settings.artifacts_dir), "default")
    await ledger.create_project(ACTOR, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    source = tmp_path / "model"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text('{"hidden_size": 8}')
    (source / "sub" / "weights.bin").write_bytes(b"\x00\x01" * 100)
    files = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        sha, size = await reach.blobs.put_file(path)
        await ledger.hold_blob(ACTOR, "default", "nightly", sha, size)
        files.append({"path": str(path.relative_to(source)), "sha256": sha, "size_bytes": size})
    record = {"model_version_id": "tiny-v1", "source_uri": "bashgym://models/tiny", "files": files}
    return reach, record


async def test_a_stored_version_is_materialised_once_with_its_exact_bytes(tmp_path: Path, ledger: Ledger) -> None:
    reach, record = await stored_version(tmp_path, ledger)
    directory = await model_files(reach, "nightly", record)
    assert directory == reach.settings.home / "models" / "default" / "nightly" / "tiny-v1"
    assert directory is not None and (directory / COMPLETE).is_file()
    assert (directory / "sub" / "weights.bin").read_bytes() == b"\x00\x01" * 100
    assert (directory / "config.json").read_text() == '{"hidden_size": 8}'
    (directory / "config.json").unlink()  # not rebuilt while its completion mark stands: built once
    assert await model_files(reach, "nightly", record) == directory
    assert not (directory / "config.json").exists()


async def test_an_interrupted_build_is_rebuilt(tmp_path: Path, ledger: Ledger) -> None:
    reach, record = await stored_version(tmp_path, ledger)
    partial = reach.settings.home / "models" / "default" / "nightly" / "tiny-v1"
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("half")
    directory = await model_files(reach, "nightly", record)
    assert directory is not None and (directory / "config.json").read_text() == '{"hidden_size": 8}'


async def test_missing_content_says_how_to_bring_it_back(tmp_path: Path, ledger: Ledger) -> None:
    reach, record = await stored_version(tmp_path, ledger)
    files = record["files"]
    assert isinstance(files, list)
    reach.blobs.path_for(files[0]["sha256"]).unlink()
    with pytest.raises(NotFound, match=rf"holds no uploaded file with sha256 {files[0]['sha256'][:12]}") as refused:
        await model_files(reach, "nightly", record)
    assert "PUT /v1/blobs?project=nightly" in refused.value.hint
    assert not (reach.settings.home / "models" / "default" / "nightly" / "tiny-v1").exists()


async def test_stored_files_another_project_holds_are_not_this_ones(tmp_path: Path, ledger: Ledger) -> None:
    reach, record = await stored_version(tmp_path, ledger)
    await ledger.create_project(ACTOR, "default", ProjectSpec(project_id="other", name="Other"))
    with pytest.raises(NotFound, match="Project 'other' holds no uploaded file"):
        await model_files(reach, "other", record)
    assert not (reach.settings.home / "models" / "default" / "other").exists()


async def test_directories_runs_and_hub_ids(tmp_path: Path, ledger: Ledger) -> None:
    reach, _ = await stored_version(tmp_path, ledger)
    run = (await ledger.register_run(ACTOR, "default", RunRegistration(method="sft"))).record["run_id"]

    async def where(uri: str, project: str = "unassigned") -> str:
        return await base_model_of(reach, project, {"model_version_id": "v", "source_uri": uri})

    assert await where(f"file://{tmp_path}/roots/tiny") == str(tmp_path / "roots" / "tiny")
    assert await where("hf://org/model-1b") == "org/model-1b"
    assert await where(f"bashgym://runs/{run}") == str(reach.settings.runs_dir / run / "final")
    (reach.settings.runs_dir / run / "merged").mkdir(parents=True)
    assert await where(f"bashgym://runs/{run}") == str(reach.settings.runs_dir / run / "merged")
    with pytest.raises(NotFound):
        await where(f"bashgym://runs/{run}", "nightly")  # a run of another project
    with pytest.raises(PathRefused):
        await where("file:///models/tiny")  # outside every root


@pytest.mark.parametrize(
    "uri",
    ["hf:///models/tiny", "hf://../x", "hf://./x", "hf://~/x", "hf://org/../../x", "hf://org/a/b", "hf://org--x/y",
     "hf://org", "/models/tiny", "models/tiny", "s3://bucket/tiny", "https://huggingface.co/org/m"],
)  # fmt: skip
async def test_a_source_in_no_accepted_form_is_refused(tmp_path: Path, ledger: Ledger, uri: str) -> None:
    reach, _ = await stored_version(tmp_path, ledger)
    with pytest.raises(InvalidInput, match=r"`source_uri`.*hf://ORG/NAME") as refused:
        await base_model_of(reach, "nightly", {"model_version_id": "v", "source_uri": uri})
    assert refused.value.details == {"field": "source_uri"}


async def test_an_evaluator_loads_by_hub_id_only_an_adapters_hub_base_and_a_hub_reference(tmp_path: Path) -> None:
    adapter = tmp_path / "final"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "acme/tiny"}))
    assert hub_models_loaded(EvalRequest(model=str(adapter))) == ["acme/tiny"]
    assert hub_models_loaded(EvalRequest(model=str(adapter), reference_model="acme/base")) == ["acme/base", "acme/tiny"]
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path)}))
    assert hub_models_loaded(EvalRequest(model=str(adapter))) == [], "a base given by path is no Hub id"
    assert hub_models_loaded(EvalRequest(model=str(tmp_path / "merged"))) == [], "full weights name no base"
    assert hub_models_loaded(EvalRequest(model="gold")) == []


def completed_run(source_system: str, method: str, paths: list[str]) -> dict[str, object]:
    """A completed run record of project nightly, trained from tiny-v1, with an artifact at each path."""
    artifacts = [
        {"uri": f"bashgym://runs/r1/{path}", "sha256": f"{i:064x}", "size_bytes": i} for i, path in enumerate(paths)
    ]
    return {
        "run_id": "r1",
        "project_id": "nightly",
        "status": "completed",
        "method": method,
        "source_system": source_system,
        "model_version_id": "tiny-v1",
        "artifacts": artifacts,
    }


def test_a_tracked_runs_model_is_its_model_artifact_of_the_kind_given_from_the_version_it_trained_from() -> None:
    run = completed_run("tracked", "custom", ["checkpoint-2/model.safetensors", "model/config.json", "model/w.bin"])
    spec = run_model_spec(run, version_id="v2", model_id="tiny", kind="reward_model")
    assert [f.path for f in spec.files] == ["model/config.json", "model/w.bin"], "a checkpoint is no part of it"
    assert (spec.kind, spec.parent_version_id, spec.source_uri) == ("reward_model", "tiny-v1", "bashgym://runs/r1")
    assert spec.config_digest == f"{1:064x}", "its config.json's sha256, as a --dir version records it"
    assert run_model_spec(run, version_id="v2", model_id="tiny").kind == "causal_lm", "inferred from its method"


def test_a_tracked_run_without_a_model_artifact_says_how_to_log_one() -> None:
    run = completed_run("tracked", "sft", ["checkpoint-2/model.safetensors"])
    with pytest.raises(RuleRejected, match=r'no `model` artifact \(log one with run.log_artifact\(DIR, name="model"\)'):
        run_model_spec(run, version_id="v2", model_id="tiny")


def test_a_launched_runs_model_is_the_kind_its_method_made_whatever_kind_is_asked() -> None:
    run = completed_run("bashgym", "sft", ["final/adapter_model.safetensors"])
    with pytest.raises(RuleRejected, match="trained with method sft, so its model is a causal_lm, not a reward_model"):
        run_model_spec(run, version_id="v2", model_id="tiny", kind="reward_model")
    assert run_model_spec(run, version_id="v2", model_id="tiny", kind="causal_lm").config_digest is None
