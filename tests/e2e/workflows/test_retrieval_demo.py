"""`bashgym demo --workflow retrieval`: the retriever loop through a real daemon, in about a minute on two cores.
The trained retriever beats its pinned untrained baseline on nDCG@10 with a CI above zero, on the frozen split,
uncontaminated, and every figure of the summary is the ledger's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli.test_demo import demo_env
from tests.support.helpers import BASHGYM, cli, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_the_retrieval_demo_shows_a_measured_gain_the_ledger_agrees_with(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = subprocess.run(
        [*BASHGYM, "demo", "--workflow", "retrieval", "--home", str(home), "--json"],
        env=demo_env(), capture_output=True, text=True, timeout=380,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    comparison = summary["comparison"]
    assert comparison["metric"] == "ndcg@10" and comparison["ci_low"] > 0 and comparison["clusters"] >= 2
    assert summary["candidate"]["ndcg@10"] > summary["baseline"]["ndcg@10"]
    assert summary["candidate"]["hard.ndcg@10"] > summary["baseline"]["hard.ndcg@10"]
    assert summary["candidate"]["contamination"] == 0
    assert "[4] Training the retriever" in done.stderr or "[4] Training the retriever" in done.stdout
    with running_daemon(home) as daemon:
        assert cli(daemon.env(), "ledger", "verify").code == 0
        with daemon.client() as client:
            listing = client.get("/v1/projects/retrieval-demo/evaluations").json()
            project = client.get("/v1/projects/retrieval-demo").json()
            gate = client.get(f"/v1/projects/retrieval-demo/runs/{summary['run_id']}/gate").json()
            # The profile holds: this project trains retrievers only.
            refused = client.post(
                "/v1/training/start",
                params={"project": "retrieval-demo", "model_version": "tiny-retriever-v1",
                        "dataset_version": "shipped-queries-v1"},
                json={"method": "sft"},
            )  # fmt: skip
    assert project["profile"] == "embedding_retrieval"
    results = {r["result_id"]: r for r in listing["results"]}
    for side in ("baseline", "candidate"):
        assert summary[side]["ndcg@10"] == results[summary[side]["result_id"]]["metrics"]["ndcg@10"]
    assert gate["ship"] == summary["gate"]["ship"]
    assert refused.status_code == 422 and "embedding_retriever" in refused.text
