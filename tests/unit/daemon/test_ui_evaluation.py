"""A measured result's samples as the evaluation page shows them: a command or transcript is model output, shown as
text (never markup), with secrets redacted and each transcript cut; a file larger than the page reads is cut too, and
the page says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bashgym.client.specs import EvalResultSpec, EvalSuiteSpec, ProjectSpec
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.ui import evaluation
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import Actor

from tests.support.factories import suite

pytestmark = pytest.mark.anyio
HOSTILE = "</code></pre><script>alert(document.cookie)</script><img src=x onerror=alert(1)>"
SECRET = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwX"


def attempt(task_id: str, index: int, *, passed: bool, command: str, stdout: str = "") -> dict[str, object]:
    return {"task_id": task_id, "task_family": "fam", "attempt_index": index, "command": command, "passed": passed,
            "reward": float(passed), "verifier_status": "ok", "timed_out": False, "duration_s": 0.1,
            "exit_code": 0 if passed else 2, "stdout": stdout, "stderr_tail": "", "isolation": "none",
            "tamper_reasons": [], "unsafe_actions": [{"kind": "network"}] if not passed else [],
            "unsafe_action_count": 0 if passed else 1, "safety_observed": "decoy-only", "split": "train"}  # fmt: skip


async def measured(ledger: Ledger, actor: Actor, blobs: BlobStore, tmp_path: Path, lines: list[str]) -> str:
    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    await ledger.register_eval_suite(actor, "default", "nightly", EvalSuiteSpec.model_validate(suite("s")))
    written = tmp_path / "attempts.jsonl"
    written.write_text("".join(line + "\n" for line in lines))
    sha, _ = await blobs.put_file(written)
    per_task = {"t-fail": {"family": "fam", "pass@1": 0.0}, "t-pass": {"family": "fam", "pass@1": 1.0}}
    safety = {"observed": "decoy-only", "attempts": 3, "unsafe_attempts": 2}
    details = {"per_task": per_task, "attempts_sha256": sha, "safety": safety}
    spec = EvalResultSpec(suite_id="s", metrics={"pass@1": 0.5}, details=details)
    return str(
        (await ledger.record_eval_result(actor, "default", "nightly", spec, provenance="measured")).record["result_id"]
    )


async def test_a_hostile_command_is_text_a_secret_is_redacted_and_a_long_transcript_is_cut(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    blobs = BlobStore(tmp_path / "artifacts")
    lines = [
        json.dumps(attempt("t-fail", 0, passed=False, command=HOSTILE, stdout=f"token {SECRET}\n" + "x" * 9000)),
        json.dumps(attempt("t-fail", 1, passed=False, command="ls")),
        json.dumps(attempt("t-pass", 0, passed=True, command="wc -l data.txt")),
    ]
    result_id = await measured(ledger, actor, blobs, tmp_path, lines)
    view = await evaluation.result_view(ledger, blobs, "default", "nightly", result_id, may_see_protected=False)
    failed, passed = view["tasks"]
    assert (failed["task_id"], failed["verdict"], failed["pass@1"], failed["pass@2"]) == ("t-fail", "fail", 0.0, 0.0)
    assert passed["verdict"] == "pass" and view["families"][0]["failed"] == 1
    html = evaluation.result_page("nightly", view, "alice · default")
    assert "<script>" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;alert(document.cookie)&lt;/script&gt;" in html
    assert SECRET not in html and "[redacted]" in html
    assert "(cut: 9" in html and "x" * (evaluation.MAX_TEXT_CHARS + 1) not in html
    assert "exit code 2" in html and "unsafe: network" in html


async def test_an_attempts_file_past_the_pages_limit_is_cut_and_the_page_says_so(
    ledger: Ledger, actor: Actor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evaluation, "MAX_SAMPLES", 2)
    blobs = BlobStore(tmp_path / "artifacts")
    lines = [json.dumps(attempt("t-pass", i, passed=True, command=f"echo {i}")) for i in range(5)]
    result_id = await measured(ledger, actor, blobs, tmp_path, lines)
    view = await evaluation.result_view(ledger, blobs, "default", "nightly", result_id, may_see_protected=False)
    shown = {t["task_id"]: t["samples"] for t in view["tasks"]}
    assert shown == {"t-fail": None, "t-pass": 2} and "the file holds more than the 2 shown" in view["samples_note"]
