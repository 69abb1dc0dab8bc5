"""Whether a policy run trained on a task it is judged by: an evaluation-suite instance or a held-out family's task
(trainers/contracts/datasets.py `check_unjudged`). Its evaluation and holdout figures would report memory.

A launch refuses such data (local and external lanes alike) and records that it checked (`JUDGED_TASK_CHECK` in the
run's config). A run without that record was launched before the check existed: the gate reads its data again where
the exact file it trained on (its recorded sha256) is still on this host, and otherwise says it cannot tell. The
record is the daemon's word only for a run the daemon launched; a run a caller registered (POST /v1/runs) may carry
any config, but it has no kept files the daemon's evaluator measures, so nothing it claims here can ship it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bashgym.daemon.blobs import file_digest
from bashgym.trainers.contracts.datasets import JUDGED_CODES, JUDGED_TASK_CHECK, POLICY_METHODS, validate_dataset

SHOWN = 3  # judged rows named in the gate's message; the rest are counted


def judged_training_rows(run: dict[str, Any]) -> dict[str, Any] | None:
    """What the gate says of a run's training data: None when there is nothing to say (not a policy method, its
    launch checked the data, or its data checks clean now); else `judged` (how many rows ask a judged task, and the
    first few as "line N: why") or `unchecked` (why its data cannot be read again). Blocking: it reads the file."""
    config = run.get("config") or {}
    if run.get("method") not in POLICY_METHODS or config.get(JUDGED_TASK_CHECK):
        return None
    path, recorded = config.get("dataset_path"), config.get("dataset_sha256")
    if not path or not recorded:
        return {"unchecked": "its record names no dataset file and sha256 to read again"}
    data = Path(str(path))
    if not data.is_file():
        return {"unchecked": f"{data} (sha256 {str(recorded)[:12]}) is no longer on this host"}
    if (found := file_digest(data)[0]) != recorded:
        return {"unchecked": f"{data} now has sha256 {found[:12]}, not the {str(recorded)[:12]} it trained on"}
    report = validate_dataset(
        str(run["method"]),
        data,
        teacher_model=config.get("teacher_model"),
        reward_source=str(config.get("grpo_reward_source") or "verifier"),
    )
    judged = [e for e in report.errors if e.code in JUDGED_CODES]
    count = sum(report.summary.get(code, 0) for code in JUDGED_CODES)
    if not count:
        return None
    return {"judged": count, "rows": [f"{data.name}:{e.line}: {e.message}" for e in judged[:SHOWN]]}
