"""Model bundles: an export carries every file's sha256; a changed, missing or extra file is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from bashgym.client.errors import RuleRejected
from bashgym.daemon.evidence.exchange import export_bundle, verify_bundle


def exported(tmp_path: Path) -> Path:
    source = tmp_path / "run" / "final"
    source.mkdir(parents=True)
    files = []
    for name, content in {"adapter_model.safetensors": b"weights" * 100, "tokenizer.json": b"{}"}.items():
        (source / name).write_bytes(content)
        files.append(
            {"path": f"final/{name}", "sha256": hashlib.sha256(content).hexdigest(), "size_bytes": len(content)}
        )
    lineage = {"model_version_id": "mv-1", "model_id": "bash-1b", "base_model": "tiny", "license": "apache-2.0"}
    export_bundle(
        source_dir=tmp_path / "run", files=files, target=tmp_path / "bundle", lineage=lineage, runcard={"run_id": "r"}
    )
    return tmp_path / "bundle"


def test_an_exported_bundle_verifies_with_its_lineage(tmp_path: Path) -> None:
    manifest, digest = verify_bundle(exported(tmp_path))
    assert manifest["model_id"] == "bash-1b" and manifest["license"] == "apache-2.0" and len(digest) == 64
    assert {f["path"] for f in manifest["files"]} == {
        "final/adapter_model.safetensors",
        "final/tokenizer.json",
        "runcard.json",
    }


@pytest.mark.parametrize("tamper", ["change", "remove", "add"])
def test_a_tampered_bundle_is_refused(tmp_path: Path, tamper: str) -> None:
    bundle = exported(tmp_path)
    weights = bundle / "final" / "adapter_model.safetensors"
    if tamper == "change":
        weights.write_bytes(b"backdoor" * 100)
    elif tamper == "remove":
        weights.unlink()
    else:
        (bundle / "final" / "extra.py").write_text("import os")
    with pytest.raises(RuleRejected, match="does not match its manifest"):
        verify_bundle(bundle)


def test_a_file_changed_since_registration_is_not_exported(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "w.bin").write_bytes(b"changed")
    entry = {"path": "w.bin", "sha256": hashlib.sha256(b"original").hexdigest(), "size_bytes": 8}
    with pytest.raises(RuleRejected, match="changed after it was registered"):
        export_bundle(source_dir=tmp_path / "run", files=[entry], target=tmp_path / "b", lineage={}, runcard=None)
    assert not (tmp_path / "b").exists()
