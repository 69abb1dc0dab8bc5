"""Training routes. `plan` validates a request completely and says what a launch would do, launching nothing; plan
and start are the launch pipeline (daemon/launch/pipeline.py) over one request."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Annotated, Literal

from bashgym.client.errors import InvalidInput
from bashgym.client.redaction import redact_text
from bashgym.client.specs import (
    MAX_BUDGET_GPU_HOURS,
    MAX_BUDGET_RUNS,
    BudgetEntrySpec,
)
from bashgym.client.validation import check_scope
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, requires, requires_run_control, requires_somewhere
from bashgym.daemon.launch.pipeline import Prepared, launch, plan, prepare
from bashgym.daemon.launch.resolve import read_payload
from bashgym.daemon.training import TrainingService
from bashgym.ledger.tx import new_id
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

LaunchCall = Annotated[
    Call,
    requires_somewhere(
        "training.launch", statement="`artifact.publish_private` too to push to the Hub (`_public` for a public repo)"
    ),
]


ControlCall = Annotated[Call, requires_run_control("training.control")]
StopCall = Annotated[Call, requires_run_control("training.stop")]
ReadCall = Annotated[Call, requires("ledger.read")]
AmendCall = Annotated[Call, requires("budget.amend")]
MAX_LOG_TAIL = 10_000


class BudgetChange(BaseModel):
    """A limit, or an amendment (positive or negative), in GPU-hours and runs."""

    model_config = ConfigDict(extra="forbid")
    gpu_hours: float = Field(0.0, ge=-MAX_BUDGET_GPU_HOURS, le=MAX_BUDGET_GPU_HOURS, allow_inf_nan=False)
    runs: int = Field(0, ge=-MAX_BUDGET_RUNS, le=MAX_BUDGET_RUNS)
    reason: str = Field(min_length=1, max_length=2000)
    scope: str = Field("project", pattern=r"^(project|campaign-[A-Za-z0-9][A-Za-z0-9_.:-]*)$")


def _service(call: Call) -> TrainingService:
    assert call.services.training is not None, "the daemon always runs a training service"
    return call.services.training


router = APIRouter(prefix="/v1", tags=["training"])


@router.post("/training/plan")
async def training_plan(call: LaunchCall, http: Request) -> Response:
    return json_response(await plan(_service(call), await _prepared(call, http)))


@router.post("/training/start", status_code=201)
async def training_start(call: LaunchCall, http: Request) -> Response:
    started = await launch(_service(call), call.actor, await _prepared(call, http))
    return json_response(started, 200 if started["replayed"] else 201)


async def _prepared(call: Call, http: Request) -> Prepared:
    """The launch the body and query ask for, through the launch pipeline's one entry."""
    return await prepare(call.principal, call.reach, read_payload(await http.body()), http.query_params)


@router.post("/projects/{project}/runs/{run_id}/pause", status_code=202)
async def training_pause(call: ControlCall, project: str, run_id: str) -> Response:
    return json_response(await _service(call).pause(call.principal, call.workspace, project, run_id), 202)


@router.post("/projects/{project}/runs/{run_id}/resume", status_code=202)
async def training_resume(call: ControlCall, project: str, run_id: str) -> Response:
    result = await _service(call).resume(call.principal, call.actor, call.workspace, project, run_id)
    return json_response(result, 202)


@router.post("/projects/{project}/runs/{run_id}/stop")
async def training_stop(call: StopCall, project: str, run_id: str) -> Response:
    run = await call.services.ledger.get_run(call.workspace, project, run_id)
    job_id = (run.get("config") or {}).get("external_job_id")
    if job_id and call.services.external is not None:
        # Its compute is someone else's: stopping it is cancelling the upstream job (recorded with the actor).
        job = await call.services.external.cancel(call.actor, call.workspace, project, str(job_id))
        return json_response({"run_id": run_id, "status": run["status"], "external_job": job})
    return json_response(await _service(call).stop(call.principal, call.actor, call.workspace, project, run_id))


@router.get("/projects/{project}/runs/{run_id}/log")
async def training_log(call: ReadCall, project: str, run_id: str, tail: int = 200) -> Response:
    if not 1 <= tail <= MAX_LOG_TAIL:
        raise InvalidInput(f"tail is {tail}; it must be between 1 and {MAX_LOG_TAIL}.")
    await call.services.ledger.get_run(call.workspace, project, run_id)  # isolation: 404 if not visible
    path = call.services.settings.runs_dir / run_id / "training.log"
    lines = await asyncio.to_thread(_tail_lines, path, tail)
    return json_response({"run_id": run_id, "lines": [redact_text(line) for line in lines]})


@router.get("/projects/{project}/budget")
async def budget_show(call: ReadCall, project: str, scope: str = "project") -> Response:
    """A project's budget, or a campaign's (scope `campaign-<id>`)."""
    check_scope(scope)
    return json_response(await call.services.ledger.budget_summary(call.workspace, project, scope))


@router.post("/projects/{project}/budget/{kind}", status_code=201)
async def budget_change(call: AmendCall, project: str, kind: Literal["limit", "amend"], body: BudgetChange) -> Response:
    spec = BudgetEntrySpec(
        entry_id=new_id(f"budget-{kind}"),
        scope=body.scope,
        kind=kind,
        gpu_hours=body.gpu_hours,
        runs=body.runs,
        reason=body.reason,
    )
    await call.services.ledger.add_budget_entry(call.actor, call.workspace, project, spec)
    return json_response(await call.services.ledger.budget_summary(call.workspace, project, body.scope), 201)


def _tail_lines(path: Path, count: int) -> list[str]:
    try:
        text = path.read_bytes().decode(errors="replace")  # bytes: read_text would turn each \r into a line
    except FileNotFoundError:
        return []
    return as_terminal(text.split("\n"))[-count:]


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def as_terminal(lines: list[str]) -> list[str]:
    """Log lines as a terminal shows them: a carriage return (a progress bar redrawing itself) starts the line over,
    so only the text after the last one stays; colour codes go, and so do lines left empty."""
    shown = []
    for line in lines:
        segments = [s for s in ANSI.sub("", line).split("\r") if s.strip()]
        if segments:
            shown.append(segments[-1].rstrip())
    return shown
