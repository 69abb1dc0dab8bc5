"""Lineage routes: projects, experiments, and the model, dataset and environment versions a run is made from."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bashgym.client.errors import RuleRejected
from bashgym.client.models import (
    DatasetFromBlob,
    DatasetVersionSpec,
    EnvironmentSpec,
    ExperimentSpec,
    ModelVersionSpec,
    ProjectSpec,
    WriteResult,
)
from bashgym.client.specs import ModelKind
from bashgym.client.validation import Identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import (
    NamedProjectsRead,
    NamedProjectWrite,
    ReadCall,
    WriteCall,
    authorise,
    written,
)
from bashgym.daemon.blobs import count_rows
from bashgym.daemon.evidence.sources import RUNS, is_tracked, kind_of_method, run_model_spec
from bashgym.daemon.launch.confine import check_model_source, held_blob
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

router = APIRouter(prefix="/v1", tags=["lineage"])


@router.post("/projects", response_model=WriteResult, status_code=201)
async def create_project(call: NamedProjectWrite, body: ProjectSpec) -> Response:
    authorise(call, body.project_id)  # a principal scoped to P may create P, and only P
    return written(await call.services.ledger.create_project(call.actor, call.workspace, body))


@router.get("/projects")
async def list_projects(call: NamedProjectsRead) -> Response:
    """The workspace's projects; a principal scoped to some projects sees those alone."""
    projects = await call.services.ledger.list_projects(call.workspace)
    return json_response([p for p in projects if call.principal.holds("ledger.read", p["project_id"])])


@router.get("/projects/{project}")
async def show_project(call: ReadCall, project: str) -> Response:
    return json_response(await call.services.ledger.get_project(call.workspace, project))


@router.post("/projects/{project}/experiments", response_model=WriteResult, status_code=201)
async def create_experiment(call: WriteCall, project: str, body: ExperimentSpec) -> Response:
    return written(await call.services.ledger.create_experiment(call.actor, call.workspace, project, body))


@router.get("/projects/{project}/experiments")
async def list_experiments(call: ReadCall, project: str) -> Response:
    return json_response(await call.services.ledger.list_experiments(call.workspace, project))


@router.post("/projects/{project}/model-versions", response_model=WriteResult, status_code=201)
async def register_model_version(call: WriteCall, project: str, body: ModelVersionSpec) -> Response:
    await check_model_source(call.reach, project, body.model_dump())
    # A launched run's model is what its method made, whatever the body says; a tracked run's method is the
    # script's own word, so its kind is the registrant's.
    if body.source_uri.startswith(RUNS):
        run = await call.services.ledger.get_run(call.workspace, project, body.source_uri.removeprefix(RUNS))
        if body.kind != kind_of_method(str(run["method"])) and not is_tracked(run):
            raise RuleRejected(
                f"Run {run['run_id']} trained with method {run['method']}, so its model is a "
                f"{kind_of_method(str(run['method']))}, not a {body.kind}.",
                hint=f"Register it with kind {kind_of_method(str(run['method']))}, or with bashgym model register "
                "--run RUN, which takes the kind from the run.",
            )
    return written(await call.services.ledger.register_model_version(call.actor, call.workspace, project, body))


class RunModelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model_version_id: Identifier
    model_id: Identifier
    kind: ModelKind | None = None  # a tracked run's, whose method is the script's word; a launched run's is its own


@router.get("/projects/{project}/model-versions/{version}")
async def show_model_version(call: ReadCall, project: str, version: str) -> Response:
    """One model version as recorded: its source, config digest and, where recorded, each file's sha256."""
    ledger = call.services.ledger
    recorded = await ledger.get_model_version(call.workspace, project, version)
    return json_response({**recorded, **await ledger.labels_of(call.workspace, project, "model_version", version)})


@router.post("/projects/{project}/runs/{run_id}/model-version", response_model=WriteResult, status_code=201)
async def register_run_model(call: WriteCall, project: str, run_id: str, body: RunModelBody) -> Response:
    """A completed run's kept model as a model version of its project (the kind its method makes, or the one given
    for a tracked run's `model` artifact), so a later run can train from it or, for a reward model, be rewarded by
    it, before any promotion. Its lineage parent is the version the run trained from."""
    run = await call.services.ledger.get_run(call.workspace, project, run_id)
    spec = run_model_spec(run, version_id=body.model_version_id, model_id=body.model_id, kind=body.kind)
    return written(await call.services.ledger.register_model_version(call.actor, call.workspace, project, spec))


@router.post("/projects/{project}/dataset-versions", response_model=WriteResult, status_code=201)
async def register_dataset_version(call: WriteCall, project: str, body: DatasetVersionSpec) -> Response:
    return written(await call.services.ledger.register_dataset_version(call.actor, call.workspace, project, body))


@router.post("/projects/{project}/dataset-versions/from-blob", response_model=WriteResult, status_code=201)
async def register_dataset_from_blob(call: WriteCall, project: str, body: DatasetFromBlob) -> Response:
    name = Path(body.filename).name
    rows = await asyncio.to_thread(count_rows, await held_blob(call.reach, project, body.sha256), name)
    spec = DatasetVersionSpec(
        dataset_version_id=body.dataset_version_id,
        dataset_id=body.dataset_id,
        source_uri=f"bashgym://artifacts/sha256/{body.sha256}",
        content_digest=body.sha256,
        split_manifest={"file": name, **body.split_manifest},
        row_counts={"total": rows},
    )
    return written(await call.services.ledger.register_dataset_version(call.actor, call.workspace, project, spec))


@router.post("/projects/{project}/environments", response_model=WriteResult, status_code=201)
async def register_environment(call: WriteCall, project: str, body: EnvironmentSpec) -> Response:
    return written(await call.services.ledger.register_environment(call.actor, call.workspace, project, body))
