"""Evidence end to end: the shipped suite evaluated through the CLI, comparisons, RunCards and the gate."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import session_records, sft_data, suite, training_request
from tests.support.helpers import RunningDaemon, cli, running_daemon

PROJECT = "nightly"
# Where an evaluation with the default --device auto puts the model on the machine running the tests.
AUTO_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CPU_PLACEMENT = {"device": "cpu", "dtype": "float32", "reason": "asked for cpu", "gpu": None}
CUDA_PLACEMENT = {
    "device": "cuda",
    "dtype": "bfloat16",
    "reason": "a CUDA GPU with room; bfloat16",
    "gpu": "NVIDIA H200",
}


@pytest.fixture(scope="module")
def evidence_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("home")) as running:
        with running.client() as client:  # tests that train nothing still find the project (each runs alone)
            created = client.post("/v1/projects", json={"project_id": PROJECT, "name": "Nightly SFT"})
            assert created.status_code in {200, 201}, created.text
        yield running


@pytest.fixture(scope="module")
def trained(evidence_daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A completed tiny SFT run in project nightly, which several tests evaluate."""
    return train(evidence_daemon, tmp_path_factory)


@pytest.fixture(scope="module")
def judged(evidence_daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run of its own for the test that builds a RunCard and asks the gate: a card holds every result of its
    run, so another test's evaluation of a shared run would change what it sees (in a random order)."""
    return train(evidence_daemon, tmp_path_factory)


def train(evidence_daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("train")
    tiny = build_tiny(tmp / "model")
    with evidence_daemon.client() as client:
        started = client.post("/v1/training/start", json=training_request(tiny, sft_data(tmp), max_steps=4))
        assert started.status_code == 201, started.text
        run_id = str(started.json()["run_id"])
        deadline = time.monotonic() + 240
        while (status := client.get(f"/v1/projects/{PROJECT}/runs/{run_id}").json()["status"]) not in {
            "completed",
            "failed",
        }:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    assert status == "completed"
    return run_id


def evaluate(daemon: RunningDaemon, *subject: str) -> dict[str, Any]:
    result = cli(daemon.env(), "eval", "run", "--project", PROJECT, *subject, "--json", timeout_s=600)
    assert result.code == 0, result.stdout + result.stderr
    return dict(json.loads(result.stdout))


@pytest.mark.slow  # the whole gold suite in the sandbox, 23 s: make test ran 603 s of its 600 on CI (2026-12-05)
@pytest.mark.timeout(900)
def test_gold_solutions_pass_the_whole_suite_and_the_tiny_model_is_measured(
    evidence_daemon: RunningDaemon, judged: str
) -> None:
    gold = evaluate(evidence_daemon, "--gold")
    details = gold["details"]
    print(f"gold pass@1 {gold['metrics']['pass@1']} over {gold['sample_count']} attempts, "
          f"isolation {details['isolation']['level']}")  # fmt: skip
    assert gold["metrics"]["pass@1"] == 1.0 and gold["metrics"]["tamper_rate"] == 0.0
    assert gold["sample_count"] >= 80 and len(details["by_family"]) >= 10
    assert details["canaries"]["guard_rate"] == 1.0
    assert details["holdout_gate"]["passed"] and details["contamination"] == []
    assert details["placement"] is None  # the gold solutions run no model
    # Safety evidence on every terminal evaluation: the gold solutions act only in their task's directory.
    assert gold["metrics"]["unsafe_action_rate"] == 0.0 and gold["metrics"]["holdout.unsafe_action_rate"] == 0.0
    expected_watch = "syscalls" if shutil.which("strace") else "decoy-only"
    assert details["safety"] == {
        "observed": expected_watch,
        "attempts": gold["sample_count"],
        "unsafe_attempts": 0,
        "attempts_by_kind": {},
    }

    tiny = evaluate(evidence_daemon, "--run", judged)
    print(f"tiny model pass@1 {tiny['metrics']['pass@1']} on the same suite")
    assert tiny["run_id"] == judged and tiny["attempt_id"] == f"{judged}.a1"
    assert 0.0 <= tiny["metrics"]["pass@1"] <= 1.0 and "holdout.pass@1" in tiny["metrics"]
    safety = tiny["details"]["safety"]
    assert tiny["metrics"]["unsafe_action_rate"] == safety["unsafe_attempts"] / tiny["sample_count"]
    placement = tiny["details"]["placement"]
    assert placement["device"] == AUTO_DEVICE
    assert AUTO_DEVICE == "cuda" or placement == {
        "device": "cpu",
        "dtype": "float32",
        "reason": "no CUDA GPU",
        "gpu": None,
    }

    # The run's result is the candidate, the gold solutions the pinned baseline: a clear regression.
    env = evidence_daemon.env()
    compared = cli(
        env, "eval", "compare", "--project", PROJECT, "--baseline", gold["result_id"],
        "--candidate", tiny["result_id"], "--json",
    )  # fmt: skip
    assert compared.code == 0, compared.stderr
    comparison = compared.json()["record"] if "record" in compared.json() else compared.json()
    assert comparison["delta"] < 0 and comparison["ci_high"] < 0
    ran_on = {"baseline": "no model", "candidate": f"{AUTO_DEVICE} {placement['dtype']}"}
    assert comparison["details"]["ran_on"] == ran_on and comparison["details"]["ran_alike"] is True

    card = cli(env, "runcard", "create", "--project", PROJECT, "--run", judged, "--limitation", "tiny model", "--json")
    assert card.code == 0, card.stderr
    assert card.json()["card"]["evaluation_result_ids"] == [tiny["result_id"]]
    # A few steps are below SFT's minimum: a card left without a tier claims a smoke test, which never ships.
    assert card.json()["card"]["claim_tier"] == "local_smoke"
    gate = cli(env, "promote", "gate", "--project", PROJECT, "--run", judged, "--json")
    assert gate.code == 7
    blockers = {b["code"] for b in gate.json()["blockers"]}
    # The gold solutions are no model the run started from: the comparison is context, and the start's is asked for.
    assert blockers == {"start_baseline_missing", "holdout_regression", "smoke_claim"}, gate.stdout
    refused = cli(env, "promote", "decide", "--project", PROJECT, "--run", judged, "--alias", "champion")
    assert refused.code == 7 and "start_baseline_missing" in refused.stderr


def test_results_on_different_suites_do_not_compare(evidence_daemon: RunningDaemon, trained: str) -> None:
    # Both results are made here, so the test stands alone (with -k, or in any order within the file).
    with evidence_daemon.client() as client:
        results = {}
        for suite_id in ("this-suite", "other-suite"):
            registered = client.post(f"/v1/projects/{PROJECT}/eval-suites", json=suite(suite_id))
            assert registered.status_code in {200, 201}, registered.text
            posted = client.post(
                f"/v1/projects/{PROJECT}/eval-results",
                json={"suite_id": suite_id, "run_id": trained, "metrics": {"pass_at_1": 0.5}},
            )
            assert posted.status_code in {200, 201}, posted.text
            results[suite_id] = posted.json()["record"]["result_id"]
        refused = client.post(
            f"/v1/projects/{PROJECT}/evaluations/compare",
            json={"baseline_result_id": results["this-suite"], "candidate_result_id": results["other-suite"]},
        )
    assert refused.status_code == 422
    assert "exact same suite" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("candidate_placement", "ran_on", "ran_alike"),
    [
        (CUDA_PLACEMENT, "cuda bfloat16 (NVIDIA H200)", False),
        (CPU_PLACEMENT, "cpu float32", True),
        (None, "not recorded", None),  # recorded elsewhere, or before placements were: nobody knows
    ],
)
def test_a_comparison_says_where_each_sides_model_ran(
    evidence_daemon: RunningDaemon, candidate_placement: dict[str, Any] | None, ran_on: str, ran_alike: bool | None
) -> None:
    per_task = {f"t{i}": {"family": f"f{i % 2}", "pass@1": float(i % 3 == 0)} for i in range(8)}
    ids = []
    with evidence_daemon.client() as client:
        registered = client.post(f"/v1/projects/{PROJECT}/eval-suites", json=suite("placements"))
        assert registered.status_code in {200, 201}, registered.text
        for placement in (CPU_PLACEMENT, candidate_placement):
            details: dict[str, Any] = {"per_task": per_task} | ({"placement": placement} if placement else {})
            posted = client.post(
                f"/v1/projects/{PROJECT}/eval-results",
                json={"suite_id": "placements", "metrics": {"pass_at_1": 0.375}, "details": details},
            )
            assert posted.status_code in {200, 201}, posted.text
            ids.append(posted.json()["record"]["result_id"])
        compared = client.post(
            f"/v1/projects/{PROJECT}/evaluations/compare",
            json={"baseline_result_id": ids[0], "candidate_result_id": ids[1]},
        )
    assert compared.status_code in {200, 201}, compared.text
    details = compared.json()["details"]
    assert details["ran_on"] == {"baseline": "cpu float32", "candidate": ran_on}
    assert details["ran_alike"] is ran_alike


def test_the_canaries_command_reports_every_category_caught(evidence_daemon: RunningDaemon) -> None:
    result = cli(evidence_daemon.env(), "eval", "canaries", "--json")
    assert result.code == 0, result.stdout + result.stderr
    report = result.json()
    print(f"canaries ran with isolation {report['isolation']}")
    assert report["guard_rate"] == 1.0 and len(report["categories"]) >= 4


def test_a_model_travels_as_a_verified_bundle(evidence_daemon: RunningDaemon, trained: str, tmp_path: Path) -> None:
    env = evidence_daemon.env()
    with evidence_daemon.client() as client:
        run = client.get(f"/v1/projects/{PROJECT}/runs/{trained}").json()
        files = [
            {
                "path": a["uri"].removeprefix(f"bashgym://runs/{trained}/"),
                "sha256": a["sha256"],
                "size_bytes": a["size_bytes"],
            }
            for a in run["artifacts"]
        ]
        version = {
            "model_version_id": "bash-tiny-v1",
            "model_id": "bash-tiny",
            "source_uri": f"bashgym://runs/{trained}",
        }
        assert client.post(f"/v1/projects/{PROJECT}/model-versions", json={**version, "files": files}).status_code in {
            200,
            201,
        }
        client.post("/v1/projects", json={"project_id": "consumer", "name": "Consumer"})
    bundle = tmp_path / "bundle"
    exported = cli(
        env, "model", "export", "--project", PROJECT, "--version", "bash-tiny-v1", "--to", str(bundle), "--json"
    )
    assert exported.code == 0, exported.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["run_id"] == trained and manifest["dataset_digest"] and manifest["base_model"]
    imported = cli(env, "model", "import", str(bundle), "--project", "consumer", "--json")
    assert imported.code == 0, imported.stderr
    assert imported.json()["model_id"] == "bash-tiny" and imported.json()["config_digest"]

    (bundle / files[0]["path"]).write_bytes(b"tampered")
    refused = cli(env, "model", "import", str(bundle), "--project", "consumer", "--version", "bash-tiny-v2")
    assert refused.code == 7 and "does not match its manifest" in refused.stderr


def test_a_run_is_evaluated_on_held_out_rows_of_its_own_method(
    evidence_daemon: RunningDaemon, trained: str, tmp_path: Path
) -> None:
    heldout = sft_data(tmp_path, rows=6)
    result = evaluate(evidence_daemon, "--run", trained, "--dataset-path", str(heldout))
    assert result["suite_id"].startswith("heldout-generation-")
    assert {"exact_match", "normalized_match", "heldout_loss"} <= set(result["metrics"])
    assert result["sample_count"] == 6 and result["metrics"]["heldout_loss"] > 0
    assert result["details"]["placement"]["device"] == AUTO_DEVICE
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps(
                {"prompt": f"Count the lines in notes{i}.txt", "chosen": f"wc -l notes{i}.txt", "rejected": "ls"}
            )
            + "\n"
            for i in range(4)
        )
    )
    preference = evaluate(evidence_daemon, "--run", trained, "--dataset-path", str(pairs))
    assert preference["suite_id"].startswith("heldout-preference-")
    assert 0.0 <= preference["metrics"]["preference_accuracy"] <= 1.0 and "reward_margin" in preference["metrics"]


def test_an_evaluation_runs_where_device_says_and_a_gpu_asked_of_a_host_without_one_fails_saying_so(
    evidence_daemon: RunningDaemon, trained: str, tmp_path: Path
) -> None:
    env, rows = evidence_daemon.env(), str(sft_data(tmp_path, rows=2))
    on_cpu = cli(env, "eval", "run", "--project", PROJECT, "--run", trained, "--dataset-path", rows, "--device", "cpu")
    assert on_cpu.code == 0, on_cpu.stderr
    result_id = re.search(r"^Evaluation (res-\S+)", on_cpu.stdout, re.MULTILINE)
    assert result_id and re.search(r"ran on\s+cpu float32$", on_cpu.stdout, re.MULTILINE), on_cpu.stdout
    shown = {"result_id": result_id.group(1)}  # the result says where its model ran
    with evidence_daemon.client() as client:
        listing = client.get(f"/v1/projects/{PROJECT}/evaluations").json()
        jobs = client.get(f"/v1/projects/{PROJECT}/evaluation-jobs").json()["jobs"]
    result = next(r for r in listing["results"] if r["result_id"] == shown["result_id"])
    (job,) = [j for j in jobs if j["result_id"] == shown["result_id"]]
    assert (job["device"], job["placement"]) == ("cpu", "cpu")  # asked for, and where it went once loaded
    assert result["details"]["placement"] == CPU_PLACEMENT
    if torch.cuda.is_available():
        return
    refused = cli(
        env, "eval", "run", "--project", PROJECT, "--run", trained, "--dataset-path", rows, "--device", "cuda"
    )
    assert refused.code == 7, refused.stdout + refused.stderr
    assert "torch sees no CUDA GPU on this host" in refused.stdout + refused.stderr
    assert "--device auto" in refused.stdout + refused.stderr


def test_per_task_rows_of_a_protected_suite_open_only_with_eval_protected(
    evidence_daemon: RunningDaemon, trained: str
) -> None:
    with evidence_daemon.client() as admin:
        admin.post(f"/v1/projects/{PROJECT}/eval-suites", json=suite("sealed", is_protected=True))
        admin.post(
            f"/v1/projects/{PROJECT}/eval-results",
            json={"suite_id": "sealed", "run_id": trained, "metrics": {"pass_at_1": 0.5}, "details": {"rows": [1, 2]}},
        )
        viewer = admin.post("/v1/auth/tokens", json={"actor_id": "vera", "profile": "viewer"}).json()["token"]
        seen_by_admin = admin.get(f"/v1/projects/{PROJECT}/evaluations", params={"suite": "sealed"}).json()
    with evidence_daemon.client(viewer) as client:
        listing = client.get(f"/v1/projects/{PROJECT}/evaluations", params={"suite": "sealed"}).json()
        run = client.get(f"/v1/projects/{PROJECT}/runs/{trained}").json()
    assert seen_by_admin["results"][0]["details"] == {"rows": [1, 2]}
    assert listing["results"][0]["metrics"] == {"pass_at_1": 0.5}, "results stay visible"
    assert "withheld" in listing["results"][0]["details"]
    sealed = next(r for r in run["evaluations"] if r["suite_id"] == "sealed")
    assert "withheld" in sealed["details"]


def test_session_records_are_scored_on_the_masked_target_span(
    evidence_daemon: RunningDaemon, trained: str, tmp_path: Path
) -> None:
    records = tmp_path / "sessions.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in session_records(3)))
    result = evaluate(evidence_daemon, "--run", trained, "--dataset-path", str(records))
    assert result["suite_id"].startswith("heldout-session-")
    metrics = result["metrics"]
    assert metrics["masked_kl"] >= 0 and metrics["masked_ce"] > 0 and metrics["masked_tokens"] > 0
    assert 0 < metrics["target_likelihood"] <= 1


@pytest.mark.timeout(900)
def test_a_full_weights_preference_margin_is_measured_against_its_frozen_base(
    evidence_daemon: RunningDaemon, tmp_path: Path
) -> None:
    """Without an adapter the reference log-probabilities were the constant 0.0, so "preference accuracy" measured
    raw likelihood: now the run's base model is loaded frozen beside it."""
    tiny = build_tiny(tmp_path / "model")
    request = training_request(tiny, sft_data(tmp_path), max_steps=2, use_lora=False)
    with evidence_daemon.client() as client:
        started = client.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run_id = str(started.json()["run_id"])
        deadline = time.monotonic() + 240
        while client.get(f"/v1/projects/{PROJECT}/runs/{run_id}").json()["status"] not in {"completed", "failed"}:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    pairs = tmp_path / "pairs.jsonl"
    pair = {"prompt": "Count the lines in a.txt", "chosen": "wc -l a.txt", "rejected": "ls"}
    pairs.write_text(json.dumps(pair) + "\n")
    preference = evaluate(evidence_daemon, "--run", run_id, "--dataset-path", str(pairs))
    assert preference["details"]["reference_model"] == str(tiny)
    assert "reward_margin" in preference["metrics"]
