"""Each strategy trains the tiny model for real on the CPU, in its own process, through the run directory."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.daemon.lanes.anomalies import AnomalyWatch
from bashgym.trainers.contracts.rundir import EXIT_CANCELLED, EXIT_FAILED, EXIT_PAUSED, sha256_file
from bashgym.trainers.tiny import build_tiny
from safetensors.torch import load_file

from tests.support.factories import session_records

TRAINER = [sys.executable, "-u", "-m", "bashgym.trainers"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"student": build_tiny(root / "student"), "teacher": build_tiny(root / "teacher", teacher=True)}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def dataset_for(strategy: str, tmp: Path) -> Path:
    chats = [
        {
            "messages": [
                {"role": "user", "content": f"Count the lines in notes{i}.txt"},
                {"role": "assistant", "content": f"wc -l notes{i}.txt"},
            ]
        }
        for i in range(16)
    ]
    # The check reads the command the model ran: random completions pass sometimes, so rewards vary.
    verifier = {"kind": "command", "files": {"notes.txt": "a\nb\n"}, "check": "grep -q e command.sh"}
    rows = {
        "sft": chats,
        "dpo": [
            {"prompt": f"Count the lines in f{i}.txt", "chosen": f"wc -l f{i}.txt", "rejected": f"cat f{i}.txt"}
            for i in range(16)
        ],
        "grpo": [
            {"prompt": f"Count the lines in notes.txt ({i})", "verifier": {**verifier, "task_id": f"t{i}"}}
            for i in range(8)
        ],
        "rlvr": [
            {"prompt": f"Count the lines in notes.txt ({i})", "verifier": {**verifier, "task_id": f"t{i}"}}
            for i in range(8)
        ],
        "distillation": [
            {"prompt": f"Count the lines in f{i}.txt", "teacher_response": f"wc -l f{i}.txt"} for i in range(16)
        ],
        "session_distillation": session_records(12),
    }[strategy]
    return write_jsonl(tmp / f"{strategy}.jsonl", rows)


def make_run(tmp: Path, models: dict[str, Path], strategy: str, **overrides: Any) -> Path:
    run_dir = tmp / f"run-{strategy}"
    run_dir.mkdir(exist_ok=True)
    request = {
        "strategy": strategy,
        "base_model": str(models["student"]),
        "dataset_path": str(dataset_for(strategy, tmp)),
        "max_steps": 3,
        "batch_size": 4,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5e-3,
        "save_steps": 2,
        "max_seq_length": 128,
        "grpo_num_generations": 4,
        "grpo_max_completion_length": 12,
        "grpo_temperature": 1.0,
        **overrides,
    }
    (run_dir / "request.json").write_text(json.dumps(request))
    return run_dir


def events_of(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def run_trainer(run_dir: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([*TRAINER, str(run_dir), *extra], capture_output=True, text=True, timeout=300, env=env)
    return proc.returncode, events_of(proc.stdout)


def lora_b_norm(adapter_dir: Path) -> float:
    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    return sum(float(t.float().norm()) for name, t in weights.items() if "lora_B" in name)


@pytest.mark.parametrize("strategy", ["sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation"])
def test_each_strategy_trains_and_leaves_a_complete_run_directory(
    models: dict[str, Path], tmp_path: Path, strategy: str
) -> None:
    run_dir = make_run(tmp_path, models, strategy)
    code, events = run_trainer(run_dir)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    assert events[0]["event"] == "started" and events[-1]["event"] == "completed"
    losses = [e["metrics"].get("train.loss") for e in events if e["event"] == "progress"]
    assert losses and all(loss is not None and math.isfinite(loss) for loss in losses)
    # LoRA's B matrices start at zero, so a non-zero norm proves the trainable parameters changed.
    assert lora_b_norm(run_dir / "final") > 0
    for name in ("request.json", "run_state.json", "metrics.jsonl", "model_profile.json", "training.log"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "completed"
    assert not list(run_dir.glob("checkpoint-*")), "adapter_only keeps final/ only"
    profile = json.loads((run_dir / "model_profile.json").read_text())
    assert profile["files"] and all(sha256_file(run_dir / f["path"]) == f["sha256"] for f in profile["files"])
    # The speed settings as asked and as used, in the started event and the profile alike (issue 13).
    assert events[0]["speed"] == profile["speed"]
    assert profile["speed"]["bf16"] == "auto -> off (no GPU)"
    assert "speed: compile" in (run_dir / "training.log").read_text()


def test_distillation_with_a_teacher_model_trains_on_policy(models: dict[str, Path], tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, models, "distillation", teacher_model=str(models["teacher"]))
    code, events = run_trainer(run_dir)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    assert events[-1]["event"] == "completed"
    assert lora_b_norm(run_dir / "final") > 0


def test_an_eval_dataset_is_evaluated_and_logs_eval_loss(models: dict[str, Path], tmp_path: Path) -> None:
    eval_path = tmp_path / "eval.jsonl"
    eval_path.write_text(dataset_for("sft", tmp_path).read_text())
    run_dir = make_run(tmp_path, models, "sft", max_steps=2, save_steps=1, eval_dataset_path=str(eval_path))
    code, _ = run_trainer(run_dir)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    logged = [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(math.isfinite(m["eval.loss"]) for m in logged if "eval.loss" in m)


def test_session_distillation_logs_its_masked_token_metrics(models: dict[str, Path], tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, models, "session_distillation", max_steps=2)
    records = session_records(8)
    for record in records[:3]:
        record["reader_confidence"] = 0.1  # below the default minimum: left out, and counted where it shows
    write_jsonl(Path(json.loads((run_dir / "request.json").read_text())["dataset_path"]), records)
    run_trainer(run_dir)
    logged = [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert logged[0] == {"data.records_trained": 5, "data.records_below_confidence": 3}
    names = set().union(*logged)
    assert {
        "train.session_distillation_loss",
        "train.session_distillation_kl",
        "train.session_distillation_ce",
        "train.session_distillation_masked_tokens",
    } <= names


@pytest.mark.parametrize(
    "policy, kept",
    [
        ("adapter_checkpoint", {"final", "checkpoint"}),
        pytest.param("deployable", {"final", "merged"}, marks=pytest.mark.slow),  # the default suite's 10 minutes
        pytest.param("full_run", {"final", "merged", "checkpoint"}, marks=pytest.mark.slow),
    ],
)
def test_retention_keeps_what_the_policy_names(
    models: dict[str, Path], tmp_path: Path, policy: str, kept: set[str]
) -> None:
    run_dir = make_run(tmp_path, models, "sft", artifact_retention=policy, checkpoint_limit=1, max_steps=4)
    code, _ = run_trainer(run_dir)
    assert code == 0
    present = {p.name.split("-")[0] for p in run_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert present == kept
    assert len(list(run_dir.glob("checkpoint-*"))) <= 1  # checkpoint_limit bounds them during the run


def _start(run_dir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TRAINER, str(run_dir), *extra],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )


def _until_step(proc: subprocess.Popen[str], step: int) -> Iterator[dict[str, Any]]:
    assert proc.stdout is not None
    for line in proc.stdout:
        event = json.loads(line)
        yield event
        if event["event"] == "progress" and event["step"] >= step:
            return


def test_pause_checkpoints_and_resume_continues_at_the_same_step(models: dict[str, Path], tmp_path: Path) -> None:
    run_dir = make_run(
        tmp_path,
        models,
        "sft",
        max_steps=12,
        save_steps=1000,
        artifact_retention="adapter_checkpoint",
        learning_rate=1e-3,
    )
    proc = _start(run_dir)
    list(_until_step(proc, 2))
    proc.send_signal(signal.SIGUSR1)
    rest = events_of(proc.stdout.read() if proc.stdout else "")
    assert proc.wait(timeout=120) == EXIT_PAUSED
    proc.stdout.close()  # type: ignore[union-attr]
    paused = rest[-1]
    assert paused["event"] == "paused"
    state = json.loads((run_dir / "run_state.json").read_text())
    assert state["status"] == "paused" and state["last_checkpoint"] == paused["checkpoint"]
    paused_step = paused["step"]
    code, events = run_trainer(run_dir, "--resume")
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    assert events[0]["resumed_from"] == f"checkpoint-{paused_step}"
    steps = [e["step"] for e in events if e["event"] == "progress"]
    assert steps[0] == paused_step + 1 and steps[-1] == 12


def test_sigterm_stops_with_status_cancelled(models: dict[str, Path], tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, models, "sft", max_steps=50, save_steps=1000)
    proc = _start(run_dir)
    list(_until_step(proc, 1))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == EXIT_CANCELLED
    proc.stdout.close()  # type: ignore[union-attr]
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "cancelled"


def test_a_dataset_that_breaks_its_contract_fails_before_training(models: dict[str, Path], tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, models, "dpo")
    write_jsonl(tmp_path / "dpo.jsonl", [{"prompt": "p", "chosen": "same", "rejected": "same"}])
    code, events = run_trainer(run_dir)
    assert code == EXIT_FAILED
    assert events[-1]["event"] == "failed"
    assert "dpo.jsonl:1" in events[-1]["error"] and "identical_pair" in events[-1]["error"]
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "failed"


def test_4bit_loading_is_refused_without_a_gpu(models: dict[str, Path], tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the refusal is for CPU-only machines")
    run_dir = make_run(tmp_path, models, "sft", load_in_4bit=True)
    code, events = run_trainer(run_dir)
    assert code == EXIT_FAILED
    assert "load_in_4bit needs a CUDA GPU" in events[-1]["error"]


FAKE_HF_TOKEN = "hf_" + "Zq9" * 12


def run_with_hub(run_dir: Path, hub_url: str) -> tuple[int, list[dict[str, Any]]]:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub_url,
        "HF_TOKEN": FAKE_HF_TOKEN,
        "HF_HUB_DISABLE_XET": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = subprocess.run([*TRAINER, str(run_dir)], capture_output=True, text=True, timeout=300, env=env)
    return proc.returncode, events_of(proc.stdout)


def test_hub_upload_creates_a_private_repo_and_records_the_commit(models: dict[str, Path], tmp_path: Path) -> None:
    from bashgym.trainers.hub import owner_marker

    from tests.support.hub_standin import HubStandIn

    run_dir = make_run(
        tmp_path, models, "sft", max_steps=2, auto_push_hf=True, hf_repo_name="team/tiny-sft",
        hf_repo_owner="default/nightly",
    )  # fmt: skip
    with HubStandIn() as hub:
        code, events = run_with_hub(run_dir, hub.url)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    repo = hub.state.repos["team/tiny-sft"]
    assert repo.private is True
    assert "adapter_model.safetensors" in repo.files
    assert owner_marker("default/nightly") in repo.files, "the repository says which project it was created for"
    state = json.loads((run_dir / "run_state.json").read_text())
    assert state["hub"] == {
        "repo_id": "team/tiny-sft",
        "commit_sha": repo.commits[-1],
        "artifact": "adapter",
        "private": True,
    }
    assert FAKE_HF_TOKEN in hub.state.tokens_seen
    assert FAKE_HF_TOKEN not in (run_dir / "training.log").read_text()
    assert all(FAKE_HF_TOKEN not in json.dumps(e) for e in events)


def test_uploading_merged_weights_that_do_not_exist_fails_loudly(models: dict[str, Path], tmp_path: Path) -> None:
    from tests.support.hub_standin import HubStandIn

    run_dir = make_run(
        tmp_path, models, "sft", max_steps=1, auto_push_hf=True, hf_repo_name="team/x", hf_upload_artifact="merged",
        hf_repo_owner="default/nightly",
    )  # fmt: skip
    with HubStandIn() as hub:
        code, events = run_with_hub(run_dir, hub.url)
    assert code == EXIT_FAILED
    assert "no merged weights" in events[-1]["error"]
    assert hub.state.repos == {}


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_session_distillation_trains_on_targets_of_different_lengths_in_one_batch(
    models: dict[str, Path], tmp_path: Path, batch_size: int
) -> None:
    """Rows pair long contexts with short targets and short contexts with long ones (a batch over 1 crashed)."""
    records = session_records(8)
    for i, record in enumerate(records):
        target = "wc -l " + " ".join(f"part{j}.txt" for j in range(1 + 6 * (i % 2)))
        original = ("Count the lines. " * (1 + 8 * ((i + 1) % 2))) + "\n$ "
        hinted = record["hint_text"] + original + target + "\n"
        start = hinted.index(target)
        record.update(
            original_context=original,
            hinted_context=hinted,
            target_text=target,
            target_span={"start": start, "end": start + len(target)},
        )
    run_dir = make_run(tmp_path, models, "session_distillation", max_steps=2, batch_size=batch_size)
    write_jsonl(Path(json.loads((run_dir / "request.json").read_text())["dataset_path"]), records)
    code, events = run_trainer(run_dir)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    assert events[-1]["event"] == "completed"


def test_rlvr_rows_whose_command_verifiers_name_different_files_train(models: dict[str, Path], tmp_path: Path) -> None:
    """Each row keeps its own verifier: merged into one Arrow struct, every row got the others' files as None."""
    rows = [
        {
            "prompt": f"Count the lines in notes{i}.txt",
            "verifier": {"kind": "command", "task_id": f"t{i}", "files": {f"notes{i}.txt": "a\nb\n"},
                         "check": f"test -f notes{i}.txt"},
        }
        for i in range(4)
    ]  # fmt: skip
    run_dir = make_run(tmp_path, models, "rlvr", max_steps=1, batch_size=4)
    write_jsonl(Path(json.loads((run_dir / "request.json").read_text())["dataset_path"]), rows)
    code, events = run_trainer(run_dir)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    rewards = [e["metrics"]["train.reward_mean"] for e in events if e["event"] == "progress"]
    assert rewards == [1.0], "every row's check found its own file"


def failing_checks(data: Path) -> None:
    """The GRPO rows again, each with a check that always fails: every group's rewards are equal."""
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    write_jsonl(data, [{**row, "verifier": {**row["verifier"], "check": "false"}} for row in rows])


@pytest.mark.slow  # the cheaper entropy test below stays in the default suite, and the rule's unit tests
def test_a_grpo_step_that_trains_nothing_logs_the_policys_entropy_and_why(
    models: dict[str, Path], tmp_path: Path
) -> None:
    # One-token completions: each hits max_completion_length and is masked out of the loss; a check that always
    # fails makes every group's rewards equal, so each group is filtered too. TRL logged entropy 0.0 here (its
    # mean over the loss's empty mask) for a policy whose entropy is far from it.
    # The DAPO-style profile masks truncated completions out of the loss.
    run_dir = make_run(
        tmp_path, models, "grpo", training_profile="terminal_rl_tmax_like", grpo_num_generations=4,
        grpo_max_completion_length=1, logging_steps=1,
    )  # fmt: skip
    failing_checks(tmp_path / "grpo.jsonl")
    code, events = run_trainer(run_dir)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    steps = [e["metrics"] for e in events if e["event"] == "progress" and "train.grad_norm" in e["metrics"]]
    assert len(steps) == 3, events
    for metrics in steps:
        assert metrics["train.truncated_fraction"] == 1.0 and metrics["train.frac_zero_std_groups"] == 1.0
        assert metrics["train.grad_norm"] == 0.0, metrics
        # Every completion was truncated and masked: the model saw none of its tokens, so no entropy is claimed.
        assert "train.entropy" not in metrics, metrics
    # The daemon's watch names the cause once.
    watch = AnomalyWatch("grpo")
    anomalies = [a for step, m in enumerate(steps, start=1) for a in watch.observe(step, m) if a.kind == "no_gradient"]
    assert [(a.kind, a.step) for a in anomalies] == [("no_gradient", 1)]
    assert "max_completion_length" in anomalies[0].detail and "filter_zero_std_groups" in anomalies[0].detail


def test_grpo_entropy_is_the_policys_on_every_token_it_saw_not_the_kept_groups(
    models: dict[str, Path], tmp_path: Path
) -> None:
    # Completions that end inside the limit, rewards all equal: every group is filtered out of the loss, and the
    # entropy is still the policy's (TRL's mean over the loss mask said 0.0).
    run_dir = make_run(tmp_path, models, "grpo", logging_steps=1)
    failing_checks(tmp_path / "grpo.jsonl")
    code, events = run_trainer(run_dir)
    assert code == 0, (run_dir / "training.log").read_text()[-3000:]
    steps = [e["metrics"] for e in events if e["event"] == "progress" and "train.grad_norm" in e["metrics"]]
    assert steps and all(m["train.frac_zero_std_groups"] == 1.0 and m["train.grad_norm"] == 0.0 for m in steps)
    assert all(m["train.entropy"] > 1.0 for m in steps), steps
