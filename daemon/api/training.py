"""Training routes. `plan` validates a request completely and says what a launch would do, launching nothing."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable
from pathlib import Path
from typing import Annotated, Any, Literal

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.redaction import redact_text
from bashgym.client.specs import (
    MAX_BUDGET_GPU_HOURS,
    MAX_BUDGET_RUNS,
    UNASSIGNED,
    BudgetEntrySpec,
    context_in_workspace,
    run_project,
)
from bashgym.client.validation import check_identifier, check_scope
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, requires, requires_run_control, requires_somewhere
from bashgym.daemon.lanes.admission import shaped_for_lane
from bashgym.daemon.launch.authorise import authorise_launch
from bashgym.daemon.launch.confine import DATA_FIELDS, MODEL_FIELDS, base_model_of, confine_request, held_blob
from bashgym.daemon.launch.resolve import environment_id, named_experiment, registered_context
from bashgym.daemon.training import TrainingService
from bashgym.ledger.tx import new_id
from bashgym.trainers.contracts.fields import effective_config, request_from_recipe
from bashgym.trainers.contracts.request import METHOD_ALIASES, METHODS, TrainingRequest
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

LaunchCall = Annotated[
    Call,
    requires_somewhere(
        "training.launch", statement="`artifact.publish_private` too to push to the Hub (`_public` for a public repo)"
    ),
]


def read_payload(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body or b"{}")
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"Request body is not valid JSON: {exc.msg} at line {exc.lineno}.") from exc
    if not isinstance(payload, dict):
        raise InvalidInput("A training request is a JSON object.")
    return payload


def parse_training_request(payload: dict[str, Any]) -> TrainingRequest:
    """The request as sent, or InvalidInput naming every problem in the user's own field names."""
    try:
        return request_from_recipe(payload)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"`{where}`: {message}" if where else message)
        raise InvalidInput(
            problems[0] if len(problems) == 1 else f"{len(problems)} problems in the request: {'; '.join(problems)}.",
            hint="Fix the request; `bashgym training plan` checks it without launching.",
            details={"problems": problems} if len(problems) > 1 else None,
        ) from exc
    except ValueError as exc:  # request_from_recipe's own checks
        raise InvalidInput(str(exc)) from exc


async def _request_of(call: Call, http: Request) -> TrainingRequest:
    """Parse the body, with every host path and blob it names confined to what the caller may reach.

    `?dataset_version=` trains on a registered dataset version's stored content; `?project=` with
    `model_version` and `dataset_version` (and optionally `experiment`) records the run under that project, its
    tracking context composed from the project's records."""
    payload = read_payload(await http.body())
    if "hf_repo_owner" in payload:
        raise InvalidInput("`hf_repo_owner` is set by the daemon: the workspace and project the run is recorded under.")
    named = "project" in http.query_params
    if named:
        payload = await _in_named_project(call, http, payload)
    project = run_project(_context_of(payload), call.workspace)
    version = http.query_params.get("dataset_version")
    if version:
        if payload.get("dataset_path"):
            raise InvalidInput("Give dataset_path or dataset_version, not both.")
        payload["dataset_path"] = await _dataset_version_path(call, http, payload, version)
    request = parse_training_request(payload)  # a malformed request is said first, then what it may not reach
    fields = {field: getattr(request, field) for field in (*DATA_FIELDS, *MODEL_FIELDS)}
    # A registered version's content is the daemon's own: its stored path is not the caller's to confine.
    skip = (*(("dataset_path",) if version else ()), *(("base_model",) if named else ()))
    confined = await confine_request(call.reach, fields, project, skip=skip)
    return request.model_copy(update=confined)


async def _in_named_project(call: Call, http: Request, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with the complete tracking context of the project the launch names, and the base model of the
    registered model version it names: an explicit project is where the run is recorded, never `unassigned`."""
    query = http.query_params
    project = check_identifier(query["project"], field="project")
    if _context_of(payload) is not None:
        raise InvalidInput("Name the run's project with ?project= or in tracking_context, not both.")
    missing = [name for name in ("model_version", "dataset_version") if not query.get(name)]
    if missing:
        raise InvalidInput(
            f"A launch into project {project} names its registered versions; {' and '.join(missing)} missing.",
            hint="Register them (bashgym model register, bashgym dataset register) and name them, so the run is "
            "fully identified; or send a complete tracking_context instead.",
        )
    if payload.get("base_model"):
        raise InvalidInput("base_model comes from model_version in a launch that names its project; drop it.")
    call.principal.require("ledger.read", workspace_id=call.workspace, project_id=project)
    ledger, ws = call.services.ledger, call.workspace
    model = await _registered(
        ledger.get_model_version(ws, project, query["model_version"]),
        f"bashgym model register --project {project} --model ID --version {query['model_version']} --hub-id HUB_ID "
        "(or --dir DIR)",
    )
    dataset = await _registered(
        ledger.get_dataset_version(ws, project, query["dataset_version"]),
        f"bashgym dataset register --project {project} --dataset ID --version {query['dataset_version']} --file FILE",
    )
    _check_kind(model, str(payload.get("method") or payload.get("strategy") or ""))
    base_model = await base_model_of(call.reach, project, model)
    experiment = await named_experiment(ledger, ws, project, query.get("experiment"))
    target = str(payload.get("compute_target") or "local")
    context = await registered_context(
        ledger, ws, project, model=model, dataset=dataset, experiment=experiment, environment=environment_id(target)
    )
    _, missing = context_in_workspace(context, ws)
    if missing:  # a launch that names its project is official, or refused: never `unassigned` by accident
        raise InvalidInput(
            f"Project {project}'s records leave the run's tracking context incomplete ({', '.join(missing)} "
            f"empty; experiment {experiment['experiment_id']!r}): the run would be recorded under `unassigned`.",
            hint=f"Name an experiment that states its objective and task type (bashgym experiment create --project "
            f"{project} --id E --name N --objective TEXT --task-type TYPE), or leave experiment out for the "
            "project's ad-hoc one.",
            details={"missing_context_fields": missing},
        )
    return {**payload, "base_model": base_model, "tracking_context": context}


# What each method trains from: a retriever from a retriever, a reward model from a causal LM (its head is new) or
# a reward model (trained further), every policy method from a causal LM.
TRAINS_FROM = {"embedding_retriever": {"embedding_retriever"}, "reward_model": {"causal_lm", "reward_model"}}


def _check_kind(model: dict[str, Any], method: str) -> None:
    method = METHOD_ALIASES.get(method.lower(), method.lower())
    kind = str(model.get("kind") or "causal_lm")
    allowed = TRAINS_FROM.get(method, {"causal_lm"})
    if method in METHODS and kind not in allowed:
        raise InvalidInput(
            f"Model version {model['model_version_id']} is a {kind}; method {method} trains from "
            f"{' or '.join(sorted(allowed))}.",
            hint="Name a model version of that kind (bashgym ledger context lists the project's models).",
        )


async def _registered(record: Awaitable[dict[str, Any]], register: str) -> dict[str, Any]:
    """The version record, or NotFound saying how to register it."""
    try:
        return await record
    except NotFound as exc:
        raise NotFound(exc.message, hint=f"Register it first: {register}; then launch with that version.") from exc


def _context_of(payload: dict[str, Any]) -> dict[str, Any] | None:
    context = payload.get("tracking_context")
    return context if isinstance(context, dict) else None


async def _dataset_version_path(call: Call, http: Request, payload: dict[str, Any], version: str) -> str:
    context = _context_of(payload) or {}
    project = http.query_params.get("dataset_project") or context.get("project_id")
    if not project:
        raise InvalidInput(
            "dataset_version needs its project: name it with dataset_project or in the tracking context.",
            hint="bashgym training start --dataset-version V --dataset-project P ...",
        )
    project = check_identifier(str(project), field="dataset_project")
    call.principal.require("ledger.read", workspace_id=call.workspace, project_id=project)
    record = await call.services.ledger.get_dataset_version(call.workspace, project, version)
    return str(await held_blob(call.reach, project, str(record["content_digest"])))


def _authorised_project(call: Call, request: TrainingRequest) -> tuple[str, list[str], str]:
    """The project a launch would be recorded under, its missing context fields, and what it may publish;
    refused when the caller may not launch there."""
    context, missing = context_in_workspace(request.tracking_context, call.workspace)
    project = context.project_id if context else UNASSIGNED
    publication = authorise_launch(call.principal, call.services.settings, call.workspace, project, request)
    return project, missing, publication


async def plan(call: Call, request: TrainingRequest) -> dict[str, Any]:
    """What a launch of `request` would do, judged against the project it would be recorded under."""
    project, missing, publication = _authorised_project(call, request)
    request = await shaped_for_lane(call.services.ledger, call.workspace, request)
    return {
        "request": request.model_dump(mode="json"),
        "lane": request.lane,
        "device_id": request.ssh_device,
        "device_group": request.device_group,
        "context_status": "unassigned" if project == UNASSIGNED else "verified",
        "project_id": project,
        "missing_context_fields": missing,
        "publication": publication,
        # lane_preflight and the checks a launch makes, every refusal listed: launch refuses exactly these.
        **await _service(call).checks.verdict(call.workspace, request),
        "effective_config": effective_config(request),
    }


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
    return json_response(await plan(call, await _request_of(call, http)))


@router.post("/training/start", status_code=201)
async def training_start(call: LaunchCall, http: Request) -> Response:
    request = await _request_of(call, http)
    project, _, _ = _authorised_project(call, request)
    may_exceed = call.principal.holds("budget.amend", project)
    started = await _service(call).start(call.actor, call.workspace, request, may_exceed_budget=may_exceed)
    return json_response(started, 200 if started["replayed"] else 201)


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
