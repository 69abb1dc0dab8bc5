"""Training routes. `plan` validates a request completely and says what a launch would do, launching nothing."""

from __future__ import annotations

import json
from typing import Annotated, Any

from bashgym.daemon.app import json_response
from bashgym.daemon.authority import Principal
from bashgym.daemon.routing import Call, requires
from bashgym.ledger.errors import InvalidInput
from bashgym.ledger.lineage import parse_context
from bashgym.trainers.specs import TrainingRequest
from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

LaunchCall = Annotated[Call, requires("training.launch")]


def parse_training_request(body: bytes) -> TrainingRequest:
    """The request as sent, or InvalidInput carrying the first problem in the user's own field names."""
    try:
        payload = json.loads(body or b"{}")
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"Request body is not valid JSON: {exc.msg} at line {exc.lineno}.") from exc
    if not isinstance(payload, dict):
        raise InvalidInput("A training request is a JSON object.")
    try:
        return TrainingRequest.from_recipe(payload)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        raise InvalidInput(
            f"`{where}`: {message}" if where else message,
            hint="Fix the request; `bashgym training plan` checks it without launching.",
        ) from exc
    except ValueError as exc:  # from_recipe's own checks
        raise InvalidInput(str(exc)) from exc


def check_publication(principal: Principal, request: TrainingRequest, project: str | None) -> str:
    """Hub upload is private by default; public needs artifact.publish_public, held explicitly."""
    if not request.auto_push_hf:
        return "none"
    principal.require("artifact.publish_private", project_id=project)
    if not request.hf_private:
        principal.require("artifact.publish_public", project_id=project)
        return "public"
    return "private"


def plan(call: Call, request: TrainingRequest) -> dict[str, Any]:
    context, missing = parse_context(request.tracking_context)
    project = context.project_id if context else None
    publication = check_publication(call.principal, request, project)
    return {
        "request": request.model_dump(mode="json"),
        "lane": request.lane,
        "device_id": request.ssh_device,
        "context_status": "verified" if context else "unassigned",
        "project_id": project or "unassigned",
        "missing_context_fields": missing,
        "publication": publication,
    }


def training_routes() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["training"])

    @router.post("/training/plan")
    async def training_plan(call: LaunchCall, http: Request) -> Response:
        return json_response(plan(call, parse_training_request(await http.body())))

    return router
