"""BashGymCallback: a plain transformers.Trainer and a TRL SFTTrainer, trained in this process on the tiny model,
are recorded as runs of the project they name; then a tracked run's model is registered, evaluated, compared,
carded and gated through the CLI exactly as a launched run's (issue 53, items 2 and 3).

What the ledger must hold is read back from the Trainer itself: every value in its log history as a metric at its
step, every checkpoint it wrote and the final model as artifacts with the sha256 of their bytes."""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, register_versions

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # two trainings and three evaluations: ~50 s on 2 cores

PROJECT = "nightly"
P = f"/v1/projects/{PROJECT}"
VERSIONS = {"project": PROJECT, "model_version": "tiny-v1", "dataset_version": "rows-v1"}
MAX_STEPS, SAVE_STEPS = 3, 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny model: both trainings start from it, and it is model version tiny-v1."""
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sft_data(tmp_path_factory.mktemp("rows"), rows=8)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, tiny: Path, rows: Path) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("callback") / "home", PROJECT) as running:
        register_versions(running, PROJECT, tiny, rows)
        yield running


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    """A researcher of the project: she trains, evaluates, compares, cards and asks the gate."""
    return issue_token(daemon, "rita", "researcher", project=PROJECT)


@pytest.fixture(autouse=True)
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BASHGYM_HOME", str(tmp_path))  # the script's home (its spool); the daemon's is its own


def callback(daemon: RunningDaemon, token: str) -> Any:
    from bashgym.track.transformers import BashGymCallback

    return BashGymCallback(**VERSIONS, experiment=None, api=daemon.url, token=token, interval_s=0.05)


def training_args(out: Path) -> dict[str, Any]:
    return {
        "output_dir": str(out),
        "max_steps": MAX_STEPS,
        "save_steps": SAVE_STEPS,
        "logging_steps": 1,
        "per_device_train_batch_size": 2,
        "learning_rate": 5e-3,
        "report_to": "none",
        "use_cpu": True,
        "hub_token": "hf_not_a_real_secret_but_never_stored",
        "seed": 0,
    }


@pytest.fixture(scope="module")
def plain(daemon: RunningDaemon, rita: str, tiny: Path, rows: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A plain transformers.Trainer on tokenised rows, with the callback: the Trainer after training."""
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    texts = [
        tokenizer.apply_chat_template(json.loads(line)["messages"], tokenize=False)
        for line in rows.read_text().splitlines()
    ]
    data = Dataset.from_dict({"text": texts}).map(lambda row: tokenizer(row["text"]), remove_columns=["text"])
    trainer = Trainer(
        model=AutoModelForCausalLM.from_pretrained(tiny),
        args=TrainingArguments(**training_args(tmp_path_factory.mktemp("plain") / "out")),
        train_dataset=data,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        processing_class=tokenizer,
        callbacks=[callback(daemon, rita)],
    )
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def sft(daemon: RunningDaemon, rita: str, tiny: Path, rows: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """TRL's SFTTrainer on the chat rows, with the callback: the Trainer after training."""
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer

    trainer = SFTTrainer(
        model=str(tiny),
        # activation_checkpointing: TRL's default sets the name transformers 5.2x deprecated (a warning, an error here)
        args=SFTConfig(
            **training_args(tmp_path_factory.mktemp("sft") / "out"), max_length=128, activation_checkpointing=False
        ),
        train_dataset=load_dataset("json", data_files=str(rows), split="train"),
        callbacks=[callback(daemon, rita)],
    )
    trainer.train()
    return trainer


def run_of(trainer: Any) -> str:
    from bashgym.track.transformers import BashGymCallback

    (recorder,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, BashGymCallback)]
    assert recorder.run is None, "the run stays open after training ended"
    return str(recorder.run_id)


def shown(daemon: RunningDaemon, run_id: str) -> dict[str, Any]:
    with daemon.client() as admin:
        answer = admin.get(f"{P}/tracked-runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def points(daemon: RunningDaemon, run_id: str, metric: str) -> list[tuple[int, float]]:
    with daemon.client() as admin:
        answer = admin.get(f"{P}/trend", params={"metric": metric, "run": run_id})
    assert answer.status_code == 200, answer.text
    return list(zip(answer.json()["steps"], answer.json()["values"], strict=True))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["plain", "sft"])
def test_the_run_holds_its_params_every_logged_value_and_its_artifacts_with_digests(
    daemon: RunningDaemon, kind: str, request: pytest.FixtureRequest
) -> None:
    trainer = request.getfixturevalue(kind)
    record = shown(daemon, run_of(trainer))
    assert (record["status"], record["context_status"], record["project_id"]) == ("completed", "verified", PROJECT)
    assert (record["model_version_id"], record["dataset_version_id"]) == ("tiny-v1", "rows-v1"), record
    assert record["method"] == ("sft" if kind == "sft" else "custom"), record["method"]

    params = record["params"]
    assert params["args.max_steps"] == MAX_STEPS and params["args.learning_rate"] == 5e-3, params
    assert params["world_size"] == 1 and params["model.hidden_size"] == trainer.model.config.hidden_size, params
    assert not [name for name in params if name.endswith("_token")], "a token was stored"
    assert "hf_not_a_real_secret" not in json.dumps(record), "the hub token reached the ledger"

    logged: dict[str, dict[int, float]] = {}  # a point is a metric at a step (`epoch` is logged twice at the last)
    for entry in trainer.state.log_history:
        for name, value in entry.items():
            if name != "step" and isinstance(value, int | float) and math.isfinite(value):
                logged.setdefault(name, {})[entry["step"]] = float(value)
    assert {"loss", "learning_rate", "train_runtime"} <= logged.keys(), logged.keys()
    for name, expected in logged.items():
        recorded = dict(points(daemon, record["run_id"], name))
        assert recorded == pytest.approx(expected, rel=1e-12), name

    artifacts = {a["uri"].removeprefix(f"bashgym://runs/{record['run_id']}/"): a for a in record["artifacts"]}
    checkpoint = Path(trainer.args.output_dir) / f"checkpoint-{SAVE_STEPS}"
    on_disk = {f"checkpoint-{SAVE_STEPS}/{p.relative_to(checkpoint)}": p for p in checkpoint.rglob("*") if p.is_file()}
    assert on_disk and on_disk.keys() <= artifacts.keys(), sorted(artifacts)
    assert all(artifacts[name]["sha256"] == sha256_of(path) for name, path in on_disk.items())
    model_files = {name for name in artifacts if name.startswith("model/")}
    assert {"model/config.json", "model/model.safetensors", "model/tokenizer.json"} <= model_files, sorted(artifacts)
    assert f"checkpoint-{MAX_STEPS}/model.safetensors" in artifacts, "the last step's checkpoint was not logged"


def test_a_training_that_raises_ends_its_run_failed_with_the_exceptions_summary(
    daemon: RunningDaemon, rita: str, tiny: Path, tmp_path: Path
) -> None:
    """Trainer has no exception hook: an exception a script does not catch reaches sys.excepthook, as here, which
    ends the run `failed` with its summary before Python reports it (the process's exit would end it too)."""
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    class Boom(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            raise RuntimeError(f"CUDA out of memory at step {state.global_step}")

    recorder = callback(daemon, rita)
    rows = [{"input_ids": torch.tensor([2, 5, 6, 3]), "labels": torch.tensor([2, 5, 6, 3])}] * 4
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, report_to="none", use_cpu=True)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    trainer = Trainer(model=model, args=args, train_dataset=rows, callbacks=[recorder, Boom()])
    with pytest.raises(RuntimeError) as raised:
        trainer.train()
    assert recorder.run is not None and sys.excepthook is not sys.__excepthook__, "the run is left to the hook"
    sys.excepthook(raised.type, raised.value, raised.tb)  # what Python does with an uncaught exception
    assert recorder.run is None and sys.excepthook is sys.__excepthook__, "the hook was not put back"
    record = shown(daemon, str(recorder.run_id))
    assert record["status"] == "failed", record
    assert "RuntimeError: CUDA out of memory at step 1" in record["attempts"][-1]["error_summary"], record


def test_a_tracked_runs_model_is_registered_evaluated_compared_carded_and_gated_by_the_cli(
    daemon: RunningDaemon, rita: str, sft: Any, tmp_path: Path
) -> None:
    run_id = run_of(sft)
    env = {**daemon.env(), "BASHGYM_TOKEN": rita}

    def bashgym(*args: str) -> dict[str, Any]:
        done = cli(env, *args, "--json", timeout_s=300)
        assert done.code == 0, done.stdout + done.stderr
        return dict(done.json())

    bashgym("model", "register", "--project", PROJECT, "--model", "tiny", "--version", "tiny-sft", "--run", run_id)
    with daemon.client() as admin:
        version = admin.get(f"{P}/model-versions/tiny-sft").json()
    record = shown(daemon, run_id)
    model = {a["uri"].split("/model/", 1)[1]: a["sha256"] for a in record["artifacts"] if "/model/" in a["uri"]}
    assert (version["parent_version_id"], version["kind"], version["source_uri"]) == (
        "tiny-v1",
        "causal_lm",
        f"bashgym://runs/{run_id}",
    ), version
    assert {f["path"].removeprefix("model/"): f["sha256"] for f in version["files"]} == model, version["files"]
    assert version["config_digest"] == model["config.json"], version

    heldout = sft_data(tmp_path, rows=3)
    evaluate = ("eval", "run", "--project", PROJECT, "--dataset-path", str(heldout), "--device", "cpu")
    candidate = bashgym(*evaluate, "--run", run_id)
    baseline = bashgym(*evaluate, "--model-version", "tiny-v1")
    assert candidate["run_id"] == run_id and candidate["provenance"] == "measured", candidate
    compared = bashgym(
        "eval", "compare", "--project", PROJECT, "--baseline", baseline["result_id"], "--candidate",
        candidate["result_id"],
    )  # fmt: skip
    assert compared["provenance"] == "measured", compared
    bashgym("runcard", "create", "--project", PROJECT, "--run", run_id, "--limitation", "3 steps on 8 rows")

    gated = cli(env, "promote", "gate", "--project", PROJECT, "--run", run_id, "--json")
    assert gated.code in {0, 7}, gated.stdout + gated.stderr
    verdict = gated.json()
    assert verdict["run_id"] == run_id and "unassigned_run" not in {b["code"] for b in verdict["blockers"]}, verdict
    with daemon.client() as admin:
        cards = admin.get(f"{P}/runs/{run_id}/runcards").json()["runcards"]
    assert cards[0]["card"]["comparison_ids"] == [compared["comparison_id"]], cards
    assert {a["uri"] for a in cards[0]["card"]["artifacts"]} >= {f"bashgym://runs/{run_id}/model/config.json"}
