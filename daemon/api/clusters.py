"""Cluster routes: the Slurm clusters a workspace submits runs to (`compute_target slurm:<cluster>`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

from bashgym.client.errors import Conflict, RuleRejected
from bashgym.client.specs import ClusterSpec
from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ReadCall, requires, written
from bashgym.daemon.host_paths import PathRefused, Root, check_device_reach
from bashgym.daemon.settings import Settings
from fastapi import APIRouter
from starlette.responses import Response

ManageCall = Annotated[Call, requires("device.manage")]

router = APIRouter(prefix="/v1", tags=["devices"])


@router.get("/clusters")
async def cluster_list(call: ReadCall) -> Response:
    return json_response({"clusters": await call.services.ledger.list_clusters(call.workspace)})


@router.post("/clusters", status_code=201)
async def cluster_add(call: ManageCall, body: ClusterSpec) -> Response:
    ledger, settings = call.services.ledger, call.services.settings
    if body.access == "local":
        shared = await asyncio.to_thread(local_shared_dir, settings, body.shared_dir)
        body = body.model_copy(update={"shared_dir": str(shared)})
    else:
        await check_device_reach(settings, await ledger.get_device(call.workspace, str(body.login_device_id)))
    return written(await ledger.add_cluster(call.actor, call.workspace, body))


@router.get("/clusters/{cluster_id}")
async def cluster_show(call: ReadCall, cluster_id: str) -> Response:
    check_identifier(cluster_id, field="cluster_id")
    return json_response(await call.services.ledger.get_cluster(call.workspace, cluster_id))


@router.delete("/clusters/{cluster_id}")
async def cluster_remove(call: ManageCall, cluster_id: str) -> Response:
    check_identifier(cluster_id, field="cluster_id")
    training = call.services.training
    if training is not None and (busy := training.runs_on_cluster(cluster_id)):
        raise Conflict(
            f"Cluster {cluster_id} has active runs: {', '.join(busy)}.",
            hint="Stop them (bashgym training stop) or wait for them to finish, then remove the cluster.",
        )
    return written(await call.services.ledger.remove_cluster(call.actor, call.workspace, cluster_id))


def local_shared_dir(settings: Settings, text: str) -> Path:
    """A `local` cluster's shared directory, confined to the operator's BASHGYM_SLURM_SHARED_ROOT: the daemon writes
    run directories there, so a tenant may name no other place on its host."""
    if settings.slurm_shared_root is None:
        raise RuleRejected(
            "This daemon takes no Slurm cluster on its own host: BASHGYM_SLURM_SHARED_ROOT is not set.",
            hint="The operator sets it to the directory the compute nodes share with this host (run directories are "
            "staged under it), then the cluster's --shared-dir names a directory inside it.",
        )
    root = Root.of(settings.slurm_shared_root)
    named = Path(os.path.normpath(text))
    real = named.resolve()
    if not root.holds(named) or not (real == root.real or root.real in real.parents):
        raise PathRefused(
            f"shared_dir {text!r} is outside BASHGYM_SLURM_SHARED_ROOT ({root.lexical}), the only directory this "
            "daemon stages Slurm runs in.",
            hint=f"Name a directory inside {root.lexical}, or ask the operator to change BASHGYM_SLURM_SHARED_ROOT.",
            details={"field": "shared_dir"},
        )
    if not real.is_dir():
        raise RuleRejected(
            f"shared_dir {text!r} is not a directory on the daemon's host.",
            hint="Create it (the compute nodes must see it at the same path), then add the cluster again.",
        )
    return real
