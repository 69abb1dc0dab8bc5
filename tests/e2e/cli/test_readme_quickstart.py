"""README's Quickstart runs as written: its bash block, against a fresh daemon, leaves an official run and its
evidence (the run's evaluation, the base model's, their comparison and a RunCard) in the ledger."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.helpers import running_daemon

README = Path(__file__).resolve().parents[3] / "README.md"
PROJECT = "quickstart"
VENV_BIN = Path(sys.executable).parent  # where `bashgym` and `python` of this installation live


def quickstart_block() -> str:
    """The one ```bash block of README's Quickstart section."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Quickstart\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README has no '## Quickstart' section"
    blocks = re.findall(r"^```bash\n(.*?)^```", section.group(1), re.S | re.M)
    assert len(blocks) == 1, f"README's Quickstart has {len(blocks)} bash blocks, not one"
    return str(blocks[0])


@pytest.mark.slow  # about 70 s; CI runs it after the suite, and a fresh-clone check runs it before an issue closes
@pytest.mark.timeout(300)
def test_the_readme_quickstart_runs_as_written_and_leaves_its_evidence_in_the_ledger(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # As README says: the daemon may read the block's directory (its ./tiny-model), and nothing else of the suite's.
    with running_daemon(tmp_path / "home", env={"BASHGYM_DATA_ROOTS": str(work)}) as daemon:
        env = {**daemon.env(), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        began = time.monotonic()
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", quickstart_block()],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
        )
        print(f"README quickstart ran in {time.monotonic() - began:.0f} s")
        assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        assert "blocked (exit 7)" in proc.stdout, "the gate must block a 5-step run, and the block say so"
        with daemon.client() as client:
            runs = client.get(f"/v1/projects/{PROJECT}/runs").json()
            listing = client.get(f"/v1/projects/{PROJECT}/evaluations").json()
            assert len(runs) == 1, runs
            run_id = runs[0]["run_id"]
            run = client.get(f"/v1/projects/{PROJECT}/runs/{run_id}").json()
            cards = client.get(f"/v1/projects/{PROJECT}/runs/{run_id}/runcards").json()["runcards"]
    assert (run["status"], run["context_status"], run["method"]) == ("completed", "verified", "sft")
    assert (run["model_version_id"], run["dataset_version_id"]) == ("tiny-v1", "traces-v1")
    assert run["metric_summary"]["train.loss"]["count"] >= 1
    results = {r["result_id"]: r for r in listing["results"]}
    ours = [r for r in results.values() if r["run_id"] == run_id]
    base = [r for r in results.values() if r["model_version_id"] == "tiny-v1"]
    assert len(ours) == 1 and len(base) == 1, listing["results"]
    [comparison] = listing["comparisons"]
    assert (comparison["baseline_result_id"], comparison["candidate_result_id"]) == (
        base[0]["result_id"],
        ours[0]["result_id"],
    )
    assert len(cards) == 1
    assert cards[0]["card"]["evaluation_result_ids"] == [ours[0]["result_id"]]
    assert cards[0]["card"]["comparison_ids"] == [comparison["comparison_id"]]
