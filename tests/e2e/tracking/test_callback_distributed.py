"""BashGymCallback under `torchrun --nproc_per_node 2` (CPU, gloo): a multi-process training is one tracked run,
opened and logged by the main process (rank 0) alone, with the world size recorded (issue 53, item 2).

tests/e2e/tracking/ddp_trainer.py is the script; both ranks train the tiny model against a real daemon on
loopback. What the ledger must hold is read back from rank 0's Trainer (its log history, written by the script):
every value once at its step, the last step's checkpoint whole (rank 1's share too) and one `model` artifact, the
run completed. Rank 1 holds no run and opened none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tracking.test_callback import PROJECT, daemon, points, rita, rows, sha256_of, shown, tiny
from tests.support.helpers import RunningDaemon

__all__ = ["daemon", "rita", "rows", "tiny"]  # the fixtures test_callback builds its daemon and model with
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCRIPT = Path(__file__).with_name("ddp_trainer.py")
WORLD_SIZE = 2
MAX_STEPS = 3  # ddp_trainer.py's; its checkpoint is the last step's
LAG_S = 1.5  # rank 1 is this much later than rank 0 to write its share of the checkpoint


@dataclass
class Ranks:
    code: int
    out: Path  # the script's OUT: its output_dir is OUT/trainer
    output: str  # torchrun's and both ranks' stdout and stderr
    held: list[dict[str, Any]]  # what each rank's callback held, and its Trainer's log history, by rank
    opened: list[str]  # the runs of the project that appeared meanwhile


def torchrun(daemon: RunningDaemon, token: str, tiny: Path, out: Path, *script_args: str) -> Ranks:
    """The script under torchrun, 2 processes on this machine's CPU."""
    env = {
        **os.environ,
        "BASHGYM_API": daemon.url,
        "BASHGYM_TOKEN": token,
        "BASHGYM_HOME": str(out / "home"),  # the script's home (its spool); the daemon's is its own
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD_SIZE}"]
    before = set(run_ids(daemon))
    done = subprocess.run(
        [*launch, str(SCRIPT), str(tiny), str(out), *script_args], env=env, capture_output=True, text=True, timeout=150
    )
    held = [json.loads(path.read_text()) for path in sorted(out.glob("rank-*.json"))]
    opened = [run_id for run_id in run_ids(daemon) if run_id not in before]
    return Ranks(done.returncode, out, done.stdout + done.stderr, held, opened)


def run_ids(daemon: RunningDaemon) -> list[str]:
    with daemon.client() as admin:
        listed = admin.get(f"/v1/projects/{PROJECT}/runs", params={"limit": 200})
    assert listed.status_code == 200, listed.text
    return [run["run_id"] for run in listed.json()]


@pytest.fixture(scope="module")
def trained(daemon: RunningDaemon, rita: str, tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Ranks:
    """Three steps and a checkpoint whose rank 1 share comes LAG_S late, as the researcher rita."""
    return torchrun(daemon, rita, tiny, tmp_path_factory.mktemp("ddp"), str(LAG_S))


def test_both_ranks_train_and_exit_cleanly_without_a_refused_or_conflicting_point(trained: Ranks) -> None:
    assert trained.code == 0, trained.output
    assert [rank["rank"] for rank in trained.held] == [0, 1], trained.output
    for word in ("Traceback", "conflict", "refused", "unreachable", "spooled", "left open", "Error"):
        assert word not in trained.output, trained.output


def test_rank_zero_alone_opens_one_run_with_the_world_size_and_logs_each_value_once(
    daemon: RunningDaemon, trained: Ranks
) -> None:
    main, other = trained.held
    assert main["run_id"] and not main["open"], main
    assert (other["run_id"], other["open"]) == (None, False), "rank 1's callback opened a run"
    assert trained.opened == [main["run_id"]], "not one run was opened, by rank 0"

    record = shown(daemon, main["run_id"])
    assert record["status"] == "completed", record
    assert record["params"]["world_size"] == WORLD_SIZE, record["params"]

    logged: dict[str, dict[int, float]] = {}
    for entry in main["log_history"]:
        for name, value in entry.items():
            if name != "step" and isinstance(value, int | float):
                logged.setdefault(name, {})[entry["step"]] = float(value)
    assert sorted(logged["loss"]) == [1, 2, 3], main["log_history"]
    for name, expected in logged.items():
        assert dict(points(daemon, main["run_id"], name)) == pytest.approx(expected, rel=1e-12), name

    names = [a["uri"].removeprefix(f"bashgym://runs/{main['run_id']}/") for a in record["artifacts"]]
    assert len(names) == len(set(names)), sorted(names)
    assert {"model/config.json", "model/model.safetensors"} <= set(names), sorted(names)
    uploaded = {name: a["sha256"] for name, a in zip(names, record["artifacts"], strict=True)}
    checkpoint = trained.out / "trainer" / f"checkpoint-{MAX_STEPS}"
    on_disk = {
        f"{checkpoint.name}/{p.relative_to(checkpoint)}": sha256_of(p) for p in checkpoint.rglob("*") if p.is_file()
    }
    assert f"{checkpoint.name}/rng_state_1.pth" in on_disk, sorted(on_disk)  # each rank's own random state
    assert {n: d for n, d in uploaded.items() if not n.startswith("model/")} == on_disk, (
        "the checkpoint uploaded is not the one saved"
    )


def test_when_a_rank_fails_and_torchrun_stops_rank_zero_its_run_ends_failed(
    daemon: RunningDaemon, rita: str, tiny: Path, tmp_path: Path
) -> None:
    """torchrun stops every other rank with SIGTERM when one fails; rank 0, busy outside a collective, would die
    by the signal's default action, which runs no exit handler, and leave its run open."""
    crashed = torchrun(daemon, rita, tiny, tmp_path, "0", "crash")
    assert crashed.code != 0 and "rank 1 ran out of memory" in crashed.output, crashed.output
    assert "Signal 15 (SIGTERM) received" in crashed.output, crashed.output  # rank 0 was stopped so
    (run_id,) = crashed.opened
    record = shown(daemon, run_id)
    assert record["status"] == "failed", record
    assert record["attempts"][-1]["error_summary"].startswith("SIGTERM: the process was stopped"), record
