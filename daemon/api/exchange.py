"""Model exchange routes: export a model version as a verifiable bundle, import one with its lineage."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from bashgym.client.errors import InvalidInput, NotFound, RuleRejected
from bashgym.client.redaction import redact_values
from bashgym.client.specs import ModelVersionSpec
from bashgym.client.validation import Identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, requires, written
from bashgym.daemon.evidence.exchange import export_bundle, verify_bundle
from bashgym.daemon.evidence.sources import RUNS
from bashgym.daemon.host_paths import HostPaths
from bashgym.daemon.launch.confine import model_files
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

ExportCall = Annotated[Call, requires("artifact.publish_private")]
WriteCall = Annotated[Call, requires("ledger.write")]


class ExportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: Annotated[str, Field(min_length=1, max_length=4000)]
    license: Annotated[str, Field(max_length=200)] = "unspecified"


class ImportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    from_dir: Annotated[str, Field(min_length=1, max_length=4000)]
    model_version_id: Identifier | None = None


router = APIRouter(prefix="/v1", tags=["models"])


@router.post("/projects/{project}/model-versions/{version}/export", status_code=201)
async def model_export(call: ExportCall, project: str, version: str, body: ExportBody) -> Response:
    paths = HostPaths(call.services.settings, workspace=call.workspace)
    target = paths.export_target(body.to, field="to")  # before anything is read
    ledger, ws = call.services.ledger, call.workspace
    record = await ledger.get_model_version(ws, project, version)
    source = str(record["source_uri"])
    run_id = source.removeprefix(RUNS) if source.startswith(RUNS) else None
    if run_id:
        source_dir = call.services.settings.runs_dir / run_id  # its files are recorded relative to the run
    else:
        found = await model_files(call.reach, project, record)
        if found is None:
            raise RuleRejected(
                f"Model version {version} is a hub id ({source}); its files are not on this host.",
                hint="Export a version registered from a directory or a run.",
            )
        source_dir = found
    run = await ledger.get_run(ws, project, run_id) if run_id else None
    cards = await ledger.runcards_of_run(ws, project, run_id) if run_id else []
    lineage: dict[str, Any] = {
        "model_version_id": version,
        "model_id": record["model_id"],
        "parent_version_id": record["parent_version_id"],
        "base_model": (run or {}).get("config", {}).get("base_model"),
        "dataset_version_id": (run or {}).get("dataset_version_id"),
        "dataset_digest": (run or {}).get("config", {}).get("dataset_sha256"),
        "run_id": run_id,
        "method": (run or {}).get("method"),
        "license": body.license,
        "provenance": {
            "workspace_id": ws,
            "project_id": project,
            "exported_by": call.principal.actor_id,
            "exported_at": datetime.now(UTC).isoformat(),
            "bashgym_version": call.services.version,
            "runcard_id": cards[0]["card_id"] if cards else None,
        },
    }
    manifest = await asyncio.to_thread(
        export_bundle,
        source_dir=source_dir,
        files=record["files"],
        target=target,
        lineage=redact_values(lineage),
        runcard=cards[0]["card"] if cards else None,
    )
    return json_response({"bundle": str(target), "manifest": manifest}, 201)


@router.post("/projects/{project}/model-versions/import", status_code=201)
async def model_import(call: WriteCall, project: str, body: ImportBody) -> Response:
    bundle = HostPaths(call.services.settings, workspace=call.workspace).importable(body.from_dir, field="from_dir")
    if not await asyncio.to_thread(bundle.is_dir):
        raise InvalidInput(f"{body.from_dir} is not a directory.", hint="Name an exported bundle in a data root.")
    manifest, manifest_sha = await asyncio.to_thread(verify_bundle, bundle)
    ledger = call.services.ledger
    parent = manifest.get("parent_version_id")
    if parent:
        try:
            await ledger.get_model_version(call.workspace, project, parent)
        except NotFound:
            parent = None  # its lineage stays in the manifest, which config_digest pins
    spec = ModelVersionSpec(
        model_version_id=body.model_version_id or manifest["model_version_id"],
        model_id=manifest["model_id"],
        source_uri=f"file://{bundle}",
        source_revision=f"bundle:{manifest_sha[:12]}",
        config_digest=manifest_sha,
        parent_version_id=parent,
        files=[f for f in manifest["files"] if f["path"] != "runcard.json"],
    )
    return written(await ledger.register_model_version(call.actor, call.workspace, project, spec))
