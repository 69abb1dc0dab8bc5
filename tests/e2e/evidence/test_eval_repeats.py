"""An evaluation repeats to the last digit on one machine, whatever else runs beside it.

The demo's figures are an evaluation of a seeded training run; the README says they repeat. Here the
evaluator samples from the untrained task model (its commands are noise, so any change in the arithmetic
shows as a different command) twice: once on a quiet machine, once beside processes that keep every core
busy and with another string-hash seed. Every sampled command, verdict and figure must agree.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
# What may differ between two runs of the same evaluation: how long things took, the names of the temporary
# directories attempts ran in, and the order in which a pipeline's processes wrote to stderr (compared as a set).
TIMINGS = {"duration_s"}
SCRATCH = re.compile(r"bashgym-(attempt|verifier|trace)-[A-Za-z0-9_]+")


@contextmanager
def cpu_hog(processes: int) -> Iterator[None]:
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def evaluate(model: Path, eval_dir: Path, *, hash_seed: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    eval_dir.mkdir()
    request = {"model": str(model), "samples": 2, "temperature": 0.7, "seed": 0, "limit_tasks": 22}
    (eval_dir / "eval_request.json").write_text(json.dumps(request))
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "bashgym.trainers.evaluate", str(eval_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + (eval_dir / "evaluation.log").read_text())[-3000:]
    summary = json.loads((eval_dir / "summary.json").read_text())
    text = SCRATCH.sub(r"bashgym-\1-X", (eval_dir / "attempts.jsonl").read_text())
    attempts = [json.loads(line) for line in text.splitlines()]
    for attempt in attempts:
        attempt["stderr_tail"] = sorted(attempt["stderr_tail"].splitlines())
    # A canary's verdict repeats; which decoy files a pipeline cut short by `head` got to touch first need not.
    for canary in summary["canaries"]["categories"].values():
        canary.pop("reasons")
    return summary, [{k: v for k, v in a.items() if k not in TIMINGS} for a in attempts]


def test_an_evaluation_repeats_exactly_under_a_cpu_hog(tmp_path: Path) -> None:
    model = build_tiny(tmp_path / "task-model", task=True)
    quiet_summary, quiet = evaluate(model, tmp_path / "quiet", hash_seed="1")
    with cpu_hog(os.cpu_count() or 2):
        busy_summary, busy = evaluate(model, tmp_path / "busy", hash_seed="2")
    assert len(quiet) == 44
    assert len({a["command"] for a in quiet}) > 10, "the untrained model's commands vary: a real probe"
    for before, after in zip(quiet, busy, strict=True):
        assert before == after, f"attempt {before['task_id']}#{before['attempt_index']} differs"
    assert quiet_summary == busy_summary
