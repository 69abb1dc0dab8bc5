"""Device routes: the SSH compute registry, each device's preflight verdict, and bootstrapping a host."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

from bashgym.daemon.app import json_response
from bashgym.daemon.routing import Call, ReadCall, requires, written
from bashgym.daemon.ssh import Device, bootstrap, preflight
from bashgym.ledger.errors import Conflict, InvalidInput, RuleRejected
from bashgym.ledger.models import DeviceSpec
from bashgym.ledger.validation import Digest
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

ManageCall = Annotated[Call, requires("device.manage")]


class BootstrapRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base_python: Annotated[str, Field(min_length=1, max_length=1000)] = "python3"
    pip_args: list[Annotated[str, Field(max_length=1000)]] = Field(default_factory=list, max_length=50)
    wheel_sha256: Digest | None = None  # a bashgym wheel uploaded with PUT /v1/blobs, for hosts without an index
    wheel_name: Annotated[str, Field(pattern=r"^bashgym-[A-Za-z0-9_.+-]+\.whl$")] | None = None


def device_routes() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["devices"])

    @router.get("/devices")
    async def device_list(call: ReadCall) -> Response:
        return json_response({"devices": await call.services.ledger.list_devices(call.workspace)})

    @router.post("/devices", status_code=201)
    async def device_add(call: ManageCall, body: DeviceSpec) -> Response:
        if not await asyncio.to_thread(_is_file, body.key_path):
            raise RuleRejected(
                f"key_path {body.key_path} is not a file on the daemon's host.",
                hint="Name the private key file the daemon should use for this device.",
            )
        return written(await call.services.ledger.add_device(call.actor, call.workspace, body))

    @router.get("/devices/{device_id}")
    async def device_show(call: ReadCall, device_id: str) -> Response:
        return json_response(await call.services.ledger.get_device(call.workspace, device_id))

    @router.delete("/devices/{device_id}")
    async def device_remove(call: ManageCall, device_id: str) -> Response:
        training = call.services.training
        if training is not None and (busy := training.runs_on_device(device_id)):
            raise Conflict(
                f"Device {device_id} has active runs: {', '.join(busy)}.",
                hint="Stop them (bashgym training stop) or wait for them to finish, then remove the device.",
            )
        return written(await call.services.ledger.remove_device(call.actor, call.workspace, device_id))

    @router.post("/devices/{device_id}/preflight")
    async def device_preflight(call: ManageCall, device_id: str) -> Response:
        ledger = call.services.ledger
        device = Device.from_record(await ledger.get_device(call.workspace, device_id))
        verdict = await preflight(device)
        return written(await ledger.record_preflight(call.actor, call.workspace, device_id, verdict))

    @router.post("/devices/{device_id}/bootstrap")
    async def device_bootstrap(call: ManageCall, device_id: str, body: BootstrapRequest) -> Response:
        ledger = call.services.ledger
        device = Device.from_record(await ledger.get_device(call.workspace, device_id))
        wheel = None
        if body.wheel_sha256:
            if not body.wheel_name or not call.services.blobs.has(body.wheel_sha256):
                raise InvalidInput(
                    "wheel_sha256 must name an uploaded blob, with wheel_name its file name.",
                    hint="bashgym device bootstrap --wheel FILE uploads it for you.",
                )
            wheel = await asyncio.to_thread(
                _named_copy, call.services.blobs.path_for(body.wheel_sha256), body.wheel_name
            )
        result: dict[str, Any] = await bootstrap(
            device, base_python=body.base_python, pip_args=body.pip_args, wheel=wheel
        )
        if not result["ok"]:
            raise RuleRejected(
                f"Bootstrapping {device_id} failed (exit {result['exit_status']}):\n{result['output_tail']}",
                hint="Fix what pip reported (an index it cannot reach: pass --wheel), then bootstrap again.",
                details=result,
            )
        verdict = await preflight(device)
        record = await ledger.record_preflight(call.actor, call.workspace, device_id, verdict)
        return json_response({**result, "device": record.record})

    return router


def _is_file(path: str) -> bool:
    return Path(path).expanduser().is_file()


def _named_copy(blob: Path, name: str) -> Path:
    """pip needs the wheel's own file name; stage the blob under it next to the store."""
    staged = blob.parent / "staged" / name
    staged.parent.mkdir(exist_ok=True)
    if not staged.exists():
        staged.hardlink_to(blob)
    return staged
