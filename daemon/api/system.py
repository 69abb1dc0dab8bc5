"""System routes: health, the ledger's own checks and backup, uploads, and durable consumer cursors."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Annotated

from bashgym.client.models import (
    BlobStored,
    ConsumerCursor,
    CursorAck,
    Health,
)
from bashgym.client.specs import UNASSIGNED
from bashgym.client.validation import (
    check_identifier,
)
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import (
    Call,
    ConsumerCall,
    NamedProjectWrite,
    ReadCall,
    authorise,
    requires,
)
from bashgym.daemon.authority import act_as_consumer
from bashgym.daemon.host_paths import HostPaths
from bashgym.daemon.services import Services, uptime_s
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

router = APIRouter(prefix="/v1")
BackupCall = Annotated[
    Call,
    requires("ledger.backup", statement="`ledger.backup` of no one workspace (the operator's): it copies every one"),
]


@router.get("/health", response_model=Health, tags=["system"])
async def health(request: Request) -> Response:
    services: Services = request.app.state.services
    ledger_status = await services.ledger.quick_status()
    return json_response(
        Health(
            status="ok" if ledger_status == "ok" else "degraded",
            version=services.version,
            uptime_s=uptime_s(services),
            ledger=ledger_status,
            pid=os.getpid(),
        )
    )


@router.get("/ledger/health", tags=["ledger"])
async def ledger_health(call: ReadCall) -> Response:
    return json_response(await call.services.ledger.health())


@router.get("/ledger/verify", tags=["ledger"])
async def ledger_verify(call: ReadCall) -> Response:
    return json_response(await call.services.ledger.verify())


@router.post("/ledger/backup", tags=["ledger"])
async def ledger_backup(call: BackupCall, to: Annotated[str, Query()]) -> Response:
    """Copy the whole ledger (every workspace) into the operator's backup directory, 0600: the operator's action
    (an admin of no one workspace), since the copy holds every workspace."""
    call.principal.require_daemon_wide("ledger.backup")
    target = HostPaths(call.services.settings).backup_target(to)
    return json_response({"to": str(target), **await call.services.ledger.backup(target)})


@router.put("/blobs", response_model=BlobStored, tags=["artifacts"])
async def put_blob(call: NamedProjectWrite, request: Request, project: str = UNASSIGNED) -> Response:
    """Upload a file for `project` (a dataset, model files, a wheel): the project holds it, within its quota."""
    check_identifier(project, field="project")
    authorise(call, project)
    sha, size = await hold_upload(call, project, request.stream())
    return json_response(BlobStored(sha256=sha, size_bytes=size, project_id=project))


async def hold_upload(call: Call, project: str, chunks: AsyncIterator[bytes]) -> tuple[str, int]:
    """Stream an upload into the content store (at most BASHGYM_MAX_UPLOAD_BYTES) for `project`, which then holds
    it within its quotas; its sha256 and size."""
    services, ws = call.services, call.workspace
    quotas = {
        "quota_bytes": services.settings.project_quota_bytes,
        "workspace_quota_bytes": services.settings.workspace_quota_bytes,
    }

    async def admit(sha: str, size: int) -> None:
        """Nothing past a quota is stored: bytes the project holds already cost nothing more."""
        if not await services.ledger.holds_blob(ws, project, sha):
            await services.ledger.check_quota(ws, project, size, **quotas)

    await services.ledger.check_quota(ws, project, 0, **quotas)  # a full project reads no body
    sha, size = await services.blobs.put_stream(chunks, max_bytes=services.settings.max_upload_bytes, admit=admit)
    await services.ledger.hold_blob(call.actor, ws, project, sha, size, **quotas)
    return sha, size


@router.get("/consumers/{name}/cursor", response_model=ConsumerCursor, tags=["events"])
async def get_cursor(call: ReadCall, name: str) -> Response:
    """Where a consumer is, for a reader of what it reads (another workspace's consumers are not this one's)."""
    check_identifier(name, field="name")
    act_as_consumer(call.principal, name, call.services.settings.default_workspace, reading=True)
    return json_response(await call.services.ledger.get_consumer_cursor(name))


@router.put("/consumers/{name}/cursor", response_model=ConsumerCursor, tags=["events"])
async def put_cursor(call: ConsumerCall, name: str, body: CursorAck) -> Response:
    """Move a durable consumer's cursor, as that consumer: it needs the consumer's capability where the consumer
    reads, whichever workspace the request names (consumer_scope); a move by anyone but its owner is recorded
    there, or daemon-wide (workspace '*', in the audit) for the daemon's own consumers."""
    check_identifier(name, field="name")
    scope = act_as_consumer(call.principal, name, call.services.settings.default_workspace)
    actor = call.principal.actor(scope.capability, call.actor.correlation_id)
    moved = await call.services.ledger.ack_consumer_cursor(
        name, body.cursor, actor=actor, ws=scope.event_workspace, project=scope.project_id, owner=scope.owner
    )
    return json_response(moved)
