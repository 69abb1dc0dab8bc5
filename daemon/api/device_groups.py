"""Device group routes: named, ordered sets of registered devices that train one run together, and the group
preflight that judges them as one."""

from __future__ import annotations

import asyncio
from typing import Annotated

from bashgym.client.errors import Conflict
from bashgym.client.specs import DeviceGroupSpec
from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ReadCall, requires, written
from bashgym.daemon.host_paths import check_device_reach
from bashgym.daemon.lanes.group_preflight import member_verdict, preflight_group
from bashgym.daemon.lanes.ssh import Device
from fastapi import APIRouter
from starlette.responses import Response

ManageCall = Annotated[Call, requires("device.manage")]


router = APIRouter(prefix="/v1", tags=["devices"])


@router.get("/device-groups")
async def group_list(call: ReadCall) -> Response:
    return json_response({"groups": await call.services.ledger.list_device_groups(call.workspace)})


@router.post("/device-groups", status_code=201)
async def group_add(call: ManageCall, body: DeviceGroupSpec) -> Response:
    return written(await call.services.ledger.add_device_group(call.actor, call.workspace, body))


@router.get("/device-groups/{group_id}")
async def group_show(call: ReadCall, group_id: str) -> Response:
    check_identifier(group_id, field="group_id")
    return json_response(await call.services.ledger.get_device_group(call.workspace, group_id))


@router.delete("/device-groups/{group_id}")
async def group_remove(call: ManageCall, group_id: str) -> Response:
    check_identifier(group_id, field="group_id")
    training = call.services.training
    if training is not None and (busy := training.runs_on_group(group_id)):
        raise Conflict(
            f"Device group {group_id} has active runs: {', '.join(busy)}.",
            hint="Stop them (bashgym training stop) or wait for them to finish, then remove the group.",
        )
    return written(await call.services.ledger.remove_device_group(call.actor, call.workspace, group_id))


@router.post("/device-groups/{group_id}/preflight")
async def group_preflight(call: ManageCall, group_id: str) -> Response:
    """Preflight every member, store each one's own verdict on its device and the group's on the group."""
    check_identifier(group_id, field="group_id")
    ledger, ws = call.services.ledger, call.workspace
    group = await ledger.get_device_group(ws, group_id)
    records = await asyncio.gather(*(ledger.get_device(ws, member) for member in group["members"]))
    for record in records:
        await check_device_reach(call.services.settings, record)
    devices = [Device.from_record(record) for record in records]
    verdict = await preflight_group(devices, group["main_process_ip"], group["main_process_port"])
    for member in verdict.facts["members"]:
        await ledger.record_preflight(call.actor, ws, member["device_id"], member_verdict(member))
    return written(await ledger.record_group_preflight(call.actor, ws, group_id, verdict))
