"""A reward model's launch from the terminal: held-out pairs named in --config are checked and uploaded with the
training pairs, and a held-out file that leaks training pairs is refused by line before anything leaves."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, cli, running_daemon
from tests.support.reward_pairs import reward_pairs, write_jsonl


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("reward-cli") / "home") as running:
        yield running


def launch_args(tmp_path: Path, held_out: Path) -> list[str]:
    train = write_jsonl(tmp_path / "pairs.jsonl", reward_pairs(seed=1, n=16))
    digest = hashlib.sha256(train.read_bytes()).hexdigest()
    context = tracking_context(dataset_version_id=f"pairs-{digest[:12]}", dataset_content_digest=digest)
    (tmp_path / "tracking.json").write_text(json.dumps(context))
    (tmp_path / "rm.json").write_text(json.dumps({"eval_dataset_path": str(held_out), "max_steps": 2}))
    return [
        "--method", "reward_model", "--model", str(build_tiny(tmp_path / "tiny")), "--dataset-path", str(train),
        "--config", str(tmp_path / "rm.json"), "--tracking-context", str(tmp_path / "tracking.json"),
    ]  # fmt: skip


def test_held_out_pairs_in_the_config_are_uploaded_and_the_plan_is_ready(daemon: RunningDaemon, tmp_path: Path) -> None:
    held_out = write_jsonl(tmp_path / "held.jsonl", reward_pairs(seed=2, n=8))
    planned = cli(daemon.env(), "training", "plan", *launch_args(tmp_path, held_out), "--json")
    assert planned.code == 0, planned.stdout + planned.stderr
    request = planned.json()["request"]
    assert request["method"] == "reward_model"
    # Both files travelled as blobs the project holds: the daemon read no path of this machine's.
    assert request["eval_dataset_path"].startswith(str(daemon.home))
    assert request["dataset_path"].startswith(str(daemon.home))


def test_a_held_out_file_that_leaks_training_pairs_is_refused_by_line(daemon: RunningDaemon, tmp_path: Path) -> None:
    leaky = write_jsonl(tmp_path / "leaky.jsonl", [*reward_pairs(seed=2, n=2), reward_pairs(seed=1, n=16)[3]])
    refused = cli(daemon.env(), "training", "start", *launch_args(tmp_path, leaky))
    assert refused.code == 7, refused.stderr
    assert "leaky.jsonl:3" in refused.stderr and "nothing was uploaded or launched" in refused.stderr
    with daemon.client() as client:
        assert client.get("/v1/projects/nightly/runs").status_code == 404  # no run recorded, not even the project
