"""A run's measured environment into the ledger: the facts its own process reported (a launched trainer's `started`
line, or the tracking client opening a run), validated, with the digest the daemon computes from them.

The run's tracking context carries an `environment_runtime_digest` set before anything ran. A tracked run's
process reports its environment as it opens, so its context's digest is the measured one from the start. A
launched run's context keeps the launch's planned digest (the daemon's runtime, where the trainer was to run), and
the `run.environment` event beside it holds what the trainer measured, by whom, and the planned digest it
supersedes: comparisons read the measured one.
"""

from __future__ import annotations

from typing import Any, Literal

from bashgym.client.environment import RunEnvironment, environment_digest
from bashgym.client.specs import Actor
from bashgym.ledger.store import Ledger

MeasuredBy = Literal["trainer", "tracking client"]


async def record_environment(
    ledger: Ledger,
    actor: Actor,
    where: tuple[str, str, str, str],
    environment: RunEnvironment,
    *,
    measured_by: MeasuredBy,
    planned_digest: str,
) -> str:
    """Append the run's `run.environment` event (`where`: workspace, project, run, attempt); its digest returned."""
    ws, project, run_id, attempt_id = where
    digest = environment_digest(environment)
    payload: dict[str, Any] = {
        "environment": environment.model_dump(mode="json"),
        "digest": digest,
        "measured_by": measured_by,
        "planned_digest": planned_digest,
    }
    await ledger.append_run_event(actor, ws, project, run_id, attempt_id, "run.environment", payload)
    return digest
