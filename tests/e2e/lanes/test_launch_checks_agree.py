"""Plan, validate and launch make one check: what one refuses the others refuse, in the same words.

Plan said ready for data whose sha256 was not the tracking context's and for a retriever's LoRA the installed peft
cannot train; `training validate` refused reward-model-rewarded GRPO prompts that plan and launch took. Plan and
launch now walk one list of checks (LaunchChecks._launch_checks), `training validate --config` reads the rows as
that request reads them, and this file holds the three equal over every documented recipe.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.contracts.fields import retriever_adapter_refusal
from bashgym.trainers.environments.retrieval import shipped_retrieval_split
from bashgym.trainers.retrieval.tiny import build_tiny_retriever
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import grpo_data, session_records, sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, running_daemon
from tests.unit.trainers.contracts.test_training_request import RECIPES

PROMPTS = [{"prompt": f"Task: inspect fox{i}.\n"} for i in range(4)]  # what a reward model scores: prompts only
PAIRS = [{"prompt": f"List dir{i}", "chosen": f"ls dir{i}", "rejected": f"cat dir{i}"} for i in range(4)]
DISTILLED = [{"prompt": f"Count f{i}.txt", "teacher_response": f"wc -l f{i}.txt"} for i in range(4)]
BROKEN = [{"nothing": 1}]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("home")) as running:
        yield running


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def rows_of(strategy: str, tmp: Path) -> Path:
    if strategy == "sft":
        return sft_data(tmp, rows=4)
    if strategy in {"grpo", "rlvr"}:
        return grpo_data(tmp, rows=4)
    rows = {"dpo": PAIRS, "distillation": DISTILLED, "session_distillation": session_records(4)}[strategy]
    return write_jsonl(tmp / f"{strategy}.jsonl", rows)


def contract_reasons(plan: dict[str, Any], method: str) -> list[str]:
    return [r for r in plan["reasons"] if f"breaks the {method} contract" in r]


def agree(daemon: RunningDaemon, body: dict[str, Any], config: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Plan's verdict on `body`; validate (with `config` as its --config) must read the rows as plan did, and
    launch, where plan refuses, must refuse with one of plan's reasons (launch stops at the first)."""
    method = body["method"]
    (tmp / "config.json").write_text(json.dumps(config))
    validated = cli(
        daemon.env(), "training", "validate", "--method", method, "--dataset", body["dataset_path"],
        "--config", str(tmp / "config.json"),
    )  # fmt: skip
    with daemon.client() as admin:
        plan = admin.post("/v1/training/plan", json=body)
        assert plan.status_code == 200, plan.text
        verdict = plan.json()
        assert (validated.code == 0) == (not contract_reasons(verdict, method)), (validated.stderr, verdict)
        if not verdict["ready"]:  # nothing would launch: start says why, in plan's words
            started = admin.post("/v1/training/start", json=body)
            assert started.status_code == 422, started.text
            error = started.json()["error"]
            said = (error.get("details") or {}).get("reasons") or [error["message"]]
            assert set(said) <= set(verdict["reasons"]), (said, verdict["reasons"])
    return dict(verdict)


# Two recipes in the default suite (a supervised and an RL one); the others with make test-slow.
@pytest.mark.parametrize(
    "strategy", [s if s in {"sft", "grpo"} else pytest.param(s, marks=pytest.mark.slow) for s in sorted(RECIPES)]
)
def test_plan_validate_and_launch_read_every_recipe_alike(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path, strategy: str
) -> None:
    config = dict(RECIPES[strategy])  # the operator documents' method fields, as a --config file sends them
    for rows, broken in ((rows_of(strategy, tmp_path), False), (write_jsonl(tmp_path / "broken.jsonl", BROKEN), True)):
        body = {**training_request(tiny, rows, method=strategy, tracking_context=None), **config}
        verdict = agree(daemon, body, config, tmp_path)
        assert bool(contract_reasons(verdict, strategy)) == broken, verdict["reasons"]


def test_reward_model_prompts_are_read_alike_by_validate_plan_and_launch(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    config = {"grpo_reward_source": "reward_model", "grpo_reward_model": "rm-v1"}
    body = {**training_request(tiny, write_jsonl(tmp_path / "prompts.jsonl", PROMPTS), method="grpo"), **config}
    verdict = agree(daemon, body, config, tmp_path)
    # The rows are fine; the reward model is what is missing, and all three say so (validate has no ledger).
    assert not contract_reasons(verdict, "grpo") and any("rm-v1" in r for r in verdict["reasons"]), verdict
    # Without the config the rows are read as verifier-rewarded, as a launch without it would read them.
    plain = cli(daemon.env(), "training", "validate", "--method", "grpo", "--dataset", body["dataset_path"])
    assert plain.code == 7 and "verifier" in plain.stderr, plain.stderr
    clash = cli(
        daemon.env(), "training", "validate", "--method", "grpo", "--dataset", body["dataset_path"],
        "--config", str(tmp_path / "config.json"), "--reward-source", "verifier",
    )  # fmt: skip
    assert clash.code != 0 and "grpo_reward_source is 'verifier' on the command line" in clash.stderr, clash.stderr


def test_data_that_is_not_the_named_dataset_version_is_refused_by_plan_too(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    data = sft_data(tmp_path, rows=4)
    named = tracking_context(dataset_content_digest="0" * 64, dataset_version_id="traces-zeros")
    body = training_request(tiny, data, tracking_context=named)
    body["tracking_context"] = named  # the factory would have named this file's own digest
    verdict = agree(daemon, body, {}, tmp_path)
    assert not verdict["ready"], verdict
    assert any("but the tracking context names dataset version 'traces-zeros'" in r for r in verdict["reasons"])


def test_a_retrievers_lora_is_judged_by_the_peft_the_trainer_has(daemon: RunningDaemon, tmp_path: Path) -> None:
    with daemon.client() as admin:
        project = {"project_id": "search", "name": "Search", "profile": "embedding_retrieval"}
        assert admin.post("/v1/projects", json=project).status_code == 201
    context = tracking_context(
        project_id="search", project_display_name="Search", model_id="tiny-retriever", model_version_id="retriever-v1"
    )
    split = shipped_retrieval_split(tmp_path / "retrieval")
    retriever = build_tiny_retriever(tmp_path / "retriever")
    body = training_request(retriever, split.train, method="embedding_retriever", tracking_context=context)
    verdict = agree(daemon, {**body, "use_lora": True}, {"use_lora": True}, tmp_path)
    # The daemon's tests run their trainer in this environment: its peft decides.
    expected = retriever_adapter_refusal(importlib.metadata.version("peft"))
    found = [r for r in verdict["reasons"] if "use_lora on an embedding retriever needs peft" in r]
    assert bool(found) == bool(expected), verdict
