"""Track a training run BashGym did not launch: two lines in any script.

    with bashgym.track.start_run(project="P", model_version="MV", dataset_version="DV", params={...}) as run:
        run.log_metrics({"loss": loss}, step=step)

Imports no torch. The run is recorded by the daemon as an official run of the project (lane `external`, surface
`tracked`); it ends `completed`, or `failed` with the exception's summary when the block raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bashgym.track.run import Run, connect, spool_dir
from bashgym.track.sender import Sender
from bashgym.track.spool import resend_orphans
from bashgym.trainers.contracts.runtime import capture_environment, script_dir

__all__ = ["Run", "astart_run", "start_run"]


def start_run(
    *,
    project: str,
    model_version: str,
    dataset_version: str,
    experiment: str | None = None,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    method: str = "custom",
    api: str | None = None,
    token: str | None = None,
    interval_s: float = 1.0,
    heartbeat_s: float = 30.0,
    system_metrics_s: float = 10.0,
    flush_timeout_s: float = 60.0,
    spool: Path | None = None,
) -> Run:
    """Open a run in `project` trained from `model_version` on `dataset_version`; use it as a context manager.
    Every `system_metrics_s` the run records this process's CPU and memory and the GPUs' use (0: none)."""
    sender = Sender(connect(api=api, token=token), spool=Path(), interval_s=interval_s, heartbeat_s=heartbeat_s)
    query = {"project": project, "model_version": model_version, "dataset_version": dataset_version}
    if experiment:
        query["experiment"] = experiment
    body = {"method": method, "params": dict(params or {}), "tags": dict(tags or {}), "environment": environment()}
    try:
        record = sender.call(sender.retried("POST", "/v1/tracked-runs", params=query, body=body, needs_answer=True))
    except BaseException:
        sender.shutdown()
        raise
    directory = spool or spool_dir()
    sender.spool = directory / f"{record['run_id']}.jsonl"
    run = Run(sender, record, flush_timeout_s=flush_timeout_s)
    resend_orphans(sender, directory)  # what a process that died left unsent, now that the daemon answers
    run.watch_system(system_metrics_s)
    return run


def environment() -> dict[str, Any]:
    """What this process runs on, for the daemon to digest: the git state is that of the script's repository."""
    return capture_environment(code_dir=script_dir())


async def astart_run(**kwargs: Any) -> Run:
    """start_run for async code: `async with await bashgym.track.astart_run(...) as run:`."""
    return await asyncio.to_thread(start_run, **kwargs)
