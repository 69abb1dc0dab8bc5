"""Import routes: runs another tracker recorded (MLflow), sent by `bashgym import mlflow` in bounded batches.

`ledger.write` in the project: an imported run is a record, never evidence, so the right to add records is enough;
naming registered versions (`?model_version=&dataset_version=`) reads them, so that needs `ledger.read` there too.
The daemon fetches nothing: the CLI reads the tracker with the user's own network and credentials.
"""

from __future__ import annotations

from typing import Annotated, Any

from bashgym.client.imports import IMPORTED_TARGET, MlflowImport
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, requires
from bashgym.daemon.external.imported import record_import
from bashgym.daemon.launch.resolve import in_named_project
from fastapi import APIRouter, Request
from starlette.responses import Response

ImportCall = Annotated[
    Call,
    requires(
        "ledger.write",
        statement="`ledger.write` in the project (and `ledger.read` there when the import names registered versions)",
    ),
]
router = APIRouter(prefix="/v1", tags=["imports"])
NAMED = ("model_version", "dataset_version", "experiment")


@router.post("/projects/{project}/imports/mlflow", status_code=201)
async def import_mlflow(call: ImportCall, project: str, body: MlflowImport, http: Request) -> Response:
    """Record a batch of an MLflow experiment's runs: under the project's versions named in the query, else (the
    project's rule for a run without its context) under `unassigned`, its provenance naming the project."""
    await call.services.ledger.get_project(call.workspace, project)
    context = await _named_context(call, project, {k: v for k, v in http.query_params.items() if k in NAMED})
    result = await record_import(call.services.ledger, call.actor, call.workspace, project, context, body)
    return json_response(result, 201)


async def _named_context(call: Call, project: str, named: dict[str, str]) -> dict[str, Any] | None:
    """The tracking context composed from the versions the import names (as a launch's), or None if it names none."""
    if not named.get("model_version") and not named.get("dataset_version"):
        return None
    payload = {"method": "custom", "compute_target": IMPORTED_TARGET}
    resolved = await in_named_project(call.principal, call.reach, payload, {"project": project, **named})
    context: dict[str, Any] = resolved["tracking_context"]
    return context
