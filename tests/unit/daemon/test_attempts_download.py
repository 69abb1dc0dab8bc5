"""A measured result's attempts file as a download (daemon/artifacts.py open_attempts): its bytes verified against
the recorded digest, refused whole while a line looks like a credential (the page shows it redacted), and refused
when the blob no longer hashes to the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bashgym.client.errors import NotFound
from bashgym.daemon.artifacts import ArtifactChanged, open_attempts
from bashgym.daemon.blobs import BlobStore
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import Actor

from tests.unit.daemon.test_ui_evaluation import SECRET, attempt, measured

pytestmark = pytest.mark.anyio


async def test_a_clean_file_opens_verified_and_one_with_a_credential_is_refused_without_printing_it(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    blobs = BlobStore(tmp_path / "artifacts")
    clean = [json.dumps(attempt("t-pass", 0, passed=True, command="wc -l data.txt"))]
    result_id = await measured(ledger, actor, blobs, tmp_path, clean)
    opened = await open_attempts(ledger, blobs, "default", "nightly", result_id, may_see_protected=False)
    with opened.handle:
        assert opened.handle.read() == (clean[0] + "\n").encode() and opened.path == f"{result_id}-attempts.jsonl"

    leaky = [json.dumps(attempt("t-fail", 0, passed=False, command="cat ~/.cache/token", stdout=f"{SECRET}\n"))]
    other = tmp_path / "other"
    other.mkdir()
    leaky_id = await measured(ledger, actor, blobs, other, leaky)
    with pytest.raises(ArtifactChanged) as refused:
        await open_attempts(ledger, blobs, "default", "nightly", leaky_id, may_see_protected=False)
    assert "shaped like a credential" in refused.value.message and SECRET not in str(refused.value.__dict__)


async def test_a_blob_changed_since_it_was_recorded_is_refused_and_an_unknown_result_is_not_found(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    blobs = BlobStore(tmp_path / "artifacts")
    result_id = await measured(ledger, actor, blobs, tmp_path, [json.dumps(attempt("t", 0, passed=True, command="ls"))])
    record = await ledger.eval_result("default", "nightly", result_id)
    path = blobs.path_for(record["details"]["attempts_sha256"])
    path.chmod(0o644)
    path.write_text('{"task_id": "forged"}\n')
    with pytest.raises(ArtifactChanged) as changed:
        await open_attempts(ledger, blobs, "default", "nightly", result_id, may_see_protected=True)
    assert record["details"]["attempts_sha256"] in changed.value.message
    with pytest.raises(NotFound):
        await open_attempts(ledger, blobs, "default", "nightly", "res-nope", may_see_protected=True)
