"""Each of the six methods trains through a real daemon on the tiny models and is recorded as it happened:
`completed` in the ledger, with its kept artifacts and their digests, and its metric series."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import session_records, tracking_context
from tests.support.helpers import RunningDaemon, running_daemon, wait_for_run

STRATEGIES = ["sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation"]
TERMINAL = {"completed", "failed", "cancelled"}
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"student": build_tiny(root / "student"), "teacher": build_tiny(root / "teacher", teacher=True)}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("methods") / "home", env={"BASHGYM_LOCAL_SLOTS": "1"}) as running:
        yield running


def rows_for(strategy: str) -> list[dict[str, Any]]:
    # exact_match verifiers run no shell code, so the RL methods train wherever the sandbox stands; inline, as
    # README documents them, without a task id.
    verifier = {"kind": "exact_match", "expected": "wc -l notes.txt"}
    return {
        "sft": [
            {"messages": [{"role": "user", "content": f"Count notes{i}.txt"}, {"role": "assistant", "content": "wc"}]}
            for i in range(8)
        ],
        "dpo": [{"prompt": f"Count f{i}.txt", "chosen": f"wc -l f{i}.txt", "rejected": f"cat f{i}"} for i in range(8)],
        "grpo": [{"prompt": f"Count notes.txt ({i})", "verifier": verifier} for i in range(4)],
        "rlvr": [{"prompt": f"Count notes.txt ({i})", "verifier": verifier} for i in range(4)],
        "distillation": [{"prompt": f"Count f{i}.txt", "teacher_response": f"wc -l f{i}.txt"} for i in range(8)],
        "session_distillation": session_records(8),
    }[strategy]


# Distillation twice: from the rows' teacher responses, and on-policy from a teacher model (TRL's trainer, which
# logs its own end-of-training summary: the case that once ended `failed` after training completed).
@pytest.mark.parametrize(("strategy", "teacher"), [(s, False) for s in STRATEGIES] + [("distillation", True)])
def test_each_method_completes_in_the_ledger_with_its_artifacts_and_metrics(
    daemon: RunningDaemon, models: dict[str, Path], tmp_path: Path, strategy: str, teacher: bool
) -> None:
    data = tmp_path / f"{strategy}.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows_for(strategy)))
    digest = __import__("hashlib").sha256(data.read_bytes()).hexdigest()
    context = tracking_context(
        experiment_id=f"methods-{strategy}{'-teacher' if teacher else ''}".replace("_", "-"),
        dataset_version_id=f"{strategy}-{digest[:12]}".replace("_", "-"),
        dataset_content_digest=digest,
    )
    request = {
        "strategy": strategy,
        "base_model": str(models["student"]),
        "dataset_path": str(data),
        "max_steps": 2,
        "batch_size": 2,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5e-3,
        "save_steps": 1,
        "tracking_context": context,
        # Each method's own settings only: a field its strategy would not read is refused.
        **(
            {"grpo_num_generations": 2, "grpo_max_completion_length": 8}
            if strategy in {"grpo", "rlvr"}
            else {"max_seq_length": 96}
        ),
        **({"teacher_model": str(models["teacher"]), "distillation_max_completion_length": 8} if teacher else {}),
    }
    with daemon.client() as admin:
        plan = admin.post("/v1/training/plan", json=request)
        assert plan.status_code == 200 and plan.json()["ready"], plan.text
        planned = plan.json()["effective_config"]
        started = admin.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, "nightly", started.json()["run_id"], TERMINAL, timeout_s=240)
    log = (daemon.home / "runs" / run["run_id"] / "training.log").read_text()[-3000:]
    assert run["status"] == "completed", (run["attempts"][-1]["error_summary"], log)
    artifacts = run["artifacts"]
    assert artifacts and all(len(a["sha256"]) == 64 and a["size_bytes"] > 0 for a in artifacts), artifacts
    assert {"adapter", "config"} <= {a["kind"] for a in artifacts}
    assert run["metric_summary"]["train.loss"]["count"] >= 1, run["metric_summary"]
    # The run wrote what its trainer was built with, the plan's figures among it, and its digest is on the run.
    written = daemon.home / "runs" / run["run_id"] / "effective_config.json"
    effective = json.loads(written.read_text())
    assert effective["planned"] == planned
    trainer_args = effective["trainer_args"]
    for name, value in planned["schedule"].items():
        assert trainer_args[name] == value, name
    if teacher:  # TRL's on-policy trainer ran, with the completion length the request set
        assert planned["method_settings"]["teacher_model"] and trainer_args["max_completion_length"] == 8, trainer_args
    shared = set(planned["method_settings"]) & set(trainer_args)
    assert shared or strategy == "session_distillation", planned["method_settings"]
    for name in shared:
        assert trainer_args[name] == planned["method_settings"][name], name
    share = run["metric_summary"].get("train.frac_zero_std_groups") or {}
    if share.get("min") == 1.0:  # no group's rewards varied: the run says it learned nothing
        assert "the run learned nothing" in run["attempts"][-1]["status_reason"], run["attempts"][-1]
    config = next(a for a in artifacts if a["kind"] == "config")
    assert config["sha256"] == __import__("hashlib").sha256(written.read_bytes()).hexdigest()


RECIPES = Path(__file__).resolve().parents[3] / "skills" / "training" / "references" / "launch-recipes.md"


def storage_block() -> dict[str, Any]:
    """The storage block every routine run starts with, read from the skill bundle as users copy it."""
    text = RECIPES.read_text()
    block = text.split("## The storage block every routine run starts with", 1)[1].split("```json", 1)[1]
    return dict(json.loads(block.split("```", 1)[0]))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_launch_recipe_as_documented_plans_and_trains_with_its_own_arithmetic(
    daemon: RunningDaemon, models: dict[str, Path], tmp_path: Path, strategy: str
) -> None:
    """The recipe as the skill bundle gives it: the storage block, the CLI's strategy, model, data and context,
    and every method field at its documented default. Plan says ready and it trains, or plan refuses with the
    reason, and the change the reason names makes it ready and train."""
    rows = rows_for(strategy)[:1] if strategy in {"grpo", "rlvr"} else rows_for(strategy)
    data = tmp_path / f"{strategy}.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    digest = __import__("hashlib").sha256(data.read_bytes()).hexdigest()
    context = tracking_context(
        experiment_id=f"recipe-{strategy}".replace("_", "-"),
        dataset_version_id=f"recipe-{strategy}-{digest[:12]}".replace("_", "-"),
        dataset_content_digest=digest,
    )
    request: dict[str, Any] = {
        **storage_block(),
        "strategy": strategy,
        "base_model": str(models["student"]),
        "dataset_path": str(data),
        "tracking_context": context,
        **({"teacher_model": str(models["teacher"])} if strategy == "distillation" else {}),
    }
    with daemon.client() as admin:
        plan = admin.post("/v1/training/plan", json=request).json()
        if strategy in {"grpo", "rlvr"}:
            # 32 generations a group, batch 1 and 8 accumulation steps leave no whole group per optimizer step.
            assert not plan["ready"], plan
            reason = " ".join(plan["reasons"])
            assert "gradient_accumulation_steps" in reason and "32" in reason, reason
            request["gradient_accumulation_steps"] = 32
            plan = admin.post("/v1/training/plan", json=request).json()
        assert plan["ready"], plan["reasons"]
        assert plan["effective_config"]["schedule"]["gradient_accumulation_steps"] == request.get(
            "gradient_accumulation_steps", 8
        )
        started = admin.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, "nightly", started.json()["run_id"], TERMINAL, timeout_s=540)
    log = (daemon.home / "runs" / run["run_id"] / "training.log").read_text()[-3000:]
    assert run["status"] == "completed", (run["attempts"][-1]["error_summary"], log)
    assert run["config"]["artifact_retention"] == "adapter_only" and run["config"]["checkpoint_limit"] == 1
    assert {a["kind"] for a in run["artifacts"]} >= {"adapter", "config"}
