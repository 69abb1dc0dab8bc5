"""A model version's files on this host: stored ones are materialised once from the content store, a
hub id stays a hub id, and a version whose content is gone says how to bring it back."""

from __future__ import annotations

from pathlib import Path

import pytest
from bashgym.client.errors import RuleRejected
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.evidence.sources import COMPLETE, base_model_of, local_model_dir
from bashgym.daemon.settings import Settings

pytestmark = pytest.mark.anyio


async def stored_version(tmp_path: Path) -> tuple[Settings, BlobStore, dict[str, object]]:
    settings = Settings(home=tmp_path / "home")
    blobs = BlobStore(settings.artifacts_dir)
    source = tmp_path / "model"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text('{"hidden_size": 8}')
    (source / "sub" / "weights.bin").write_bytes(b"\x00\x01" * 100)
    files = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        sha, size = await blobs.put_file(path)
        files.append({"path": str(path.relative_to(source)), "sha256": sha, "size_bytes": size})
    record = {"model_version_id": "tiny-v1", "source_uri": "bashgym://models/tiny", "files": files}
    return settings, blobs, record


async def test_a_stored_version_is_materialised_once_with_its_exact_bytes(tmp_path: Path) -> None:
    settings, blobs, record = await stored_version(tmp_path)
    directory = local_model_dir(settings, blobs, "default", "nightly", record)
    assert directory == settings.home / "models" / "default" / "nightly" / "tiny-v1"
    assert directory is not None and (directory / COMPLETE).is_file()
    assert (directory / "sub" / "weights.bin").read_bytes() == b"\x00\x01" * 100
    assert (directory / "config.json").read_text() == '{"hidden_size": 8}'
    (directory / "config.json").unlink()  # not rebuilt while its completion mark stands: built once
    assert local_model_dir(settings, blobs, "default", "nightly", record) == directory
    assert not (directory / "config.json").exists()


async def test_an_interrupted_build_is_rebuilt(tmp_path: Path) -> None:
    settings, blobs, record = await stored_version(tmp_path)
    partial = settings.home / "models" / "default" / "nightly" / "tiny-v1"
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("half")
    directory = local_model_dir(settings, blobs, "default", "nightly", record)
    assert directory is not None and (directory / "config.json").read_text() == '{"hidden_size": 8}'


async def test_missing_content_says_how_to_bring_it_back(tmp_path: Path) -> None:
    settings, blobs, record = await stored_version(tmp_path)
    files = record["files"]
    assert isinstance(files, list)
    blobs.path_for(files[0]["sha256"]).unlink()
    with pytest.raises(RuleRejected, match=r"config\.json missing") as refused:
        local_model_dir(settings, blobs, "default", "nightly", record)
    assert "bashgym model register --dir" in refused.value.hint
    assert not (settings.home / "models" / "default" / "nightly" / "tiny-v1").exists()


def test_directories_runs_and_hub_ids(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    blobs = BlobStore(settings.artifacts_dir)

    def where(uri: str) -> str:
        return base_model_of(settings, blobs, "default", "p", {"model_version_id": "v", "source_uri": uri})

    assert where("file:///models/tiny") == "/models/tiny"
    assert where("hf://org/model-1b") == "org/model-1b"
    assert where("bashgym://runs/run-1") == str(settings.runs_dir / "run-1" / "final")
    (settings.runs_dir / "run-1" / "merged").mkdir(parents=True)
    assert where("bashgym://runs/run-1") == str(settings.runs_dir / "run-1" / "merged")
