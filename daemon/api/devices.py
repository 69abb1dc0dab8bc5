"""Device routes: the SSH compute registry, each device's preflight verdict, and bootstrapping a host."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

from bashgym.client.errors import Conflict, InvalidInput, RuleRejected
from bashgym.client.specs import UNASSIGNED, DeviceSpec
from bashgym.client.validation import Digest
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ReadCall, requires, written
from bashgym.daemon.host_paths import HostPaths, check_device_host, check_device_reach
from bashgym.daemon.lanes.ssh import Device, bootstrap, preflight
from bashgym.daemon.launch.confine import held_blob
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


router = APIRouter(prefix="/v1", tags=["devices"])


@router.get("/devices")
async def device_list(call: ReadCall) -> Response:
    devices = await call.services.ledger.list_devices(call.workspace)
    return json_response({"devices": [_shown(call, d) for d in devices]})


@router.post("/devices", status_code=201)
async def device_add(call: ManageCall, body: DeviceSpec) -> Response:
    paths = HostPaths(call.services.settings)
    key = paths.key_file(body.key_path, field="key_path")
    known = paths.key_file(body.known_hosts, field="known_hosts") if body.known_hosts else None
    body = body.model_copy(update={"key_path": str(key), "known_hosts": str(known) if known else ""})
    await check_device_host(call.services.settings, body.device_id, body.host)
    if not await asyncio.to_thread(key.is_file):
        raise RuleRejected(
            f"key_path {body.key_path} is not a file in the keys directory.",
            hint="Put the private key the daemon should use for this device there (BASHGYM_SSH_KEYS_DIR).",
        )
    return written(await call.services.ledger.add_device(call.actor, call.workspace, body))


@router.get("/devices/{device_id}")
async def device_show(call: ReadCall, device_id: str) -> Response:
    return json_response(_shown(call, await call.services.ledger.get_device(call.workspace, device_id)))


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
    record = await ledger.get_device(call.workspace, device_id)
    await check_device_reach(call.services.settings, record)
    verdict = await preflight(Device.from_record(record))
    return written(await ledger.record_preflight(call.actor, call.workspace, device_id, verdict))


@router.post("/devices/{device_id}/bootstrap")
async def device_bootstrap(call: ManageCall, device_id: str, body: BootstrapRequest) -> Response:
    ledger = call.services.ledger
    record = await ledger.get_device(call.workspace, device_id)
    await check_device_reach(call.services.settings, record)
    device = Device.from_record(record)
    wheel = None
    if body.wheel_sha256:
        if not body.wheel_name:
            raise InvalidInput(
                "wheel_sha256 must come with wheel_name, its file name.",
                hint="bashgym device bootstrap --wheel FILE uploads it for you.",
            )
        held = await held_blob(call.reach, UNASSIGNED, body.wheel_sha256)
        wheel = await asyncio.to_thread(_named_copy, held, body.wheel_name)
    result: dict[str, Any] = await bootstrap(device, base_python=body.base_python, pip_args=body.pip_args, wheel=wheel)
    if not result["ok"]:
        raise RuleRejected(
            f"Bootstrapping {device_id} failed (exit {result['exit_status']}):\n{result['output_tail']}",
            hint="Fix what pip reported (an index it cannot reach: pass --wheel), then bootstrap again.",
            details=result,
        )
    verdict = await preflight(device)
    recorded = await ledger.record_preflight(call.actor, call.workspace, device_id, verdict)
    return json_response({**result, "device": recorded.record})


def _shown(call: Call, device: dict[str, Any]) -> dict[str, Any]:
    """Key and known_hosts paths are for those who manage devices; others see the file names only."""
    if call.principal.holds("device.manage", None):
        return device
    return {
        **device,
        "key_path": Path(str(device["key_path"])).name,
        "known_hosts": Path(str(device["known_hosts"])).name if device.get("known_hosts") else "",
    }


def _named_copy(blob: Path, name: str) -> Path:
    """pip needs the wheel's own file name; stage the blob under it next to the store."""
    staged = blob.parent / "staged" / name
    staged.parent.mkdir(exist_ok=True)
    if not staged.exists():
        staged.hardlink_to(blob)
    return staged
