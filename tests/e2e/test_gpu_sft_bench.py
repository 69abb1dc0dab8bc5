"""bench/gpu_sft.py stays runnable: its CPU check measures both trainers and prints their ratio (slow: ~40 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu_sft.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_tiny_cpu_check_measures_trl_and_bashgym_and_prints_the_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--variable-lengths", "--methods", "full"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    runs = {line["trainer"]: line for line in lines if "trainer" in line}
    assert set(runs) == {"trl", "bashgym"}
    assert all(run["tokens"] > 0 and run["tokens_per_s"] > 0 for run in runs.values())
    assert runs["bashgym"]["speed"]["compile"] == "auto -> off (no GPU)"
    assert any("bashgym_over_trl_tokens_per_s" in line for line in lines)
    # Before timing variable lengths it proves packed attention agrees with attention per sequence.
    (check,) = [line for line in lines if line.get("check") == "packed_attention"]
    assert check["agrees"] and check["sequences"] > 1, check
