"""Consumer leases: one process at a time follows a durable consumer's cursor (a Discord bot, its notices)."""

from __future__ import annotations

from typing import Annotated

from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ConsumerCall, ReadCall
from bashgym.daemon.authority import act_as_consumer
from bashgym.ledger.leases import LeaseClaim
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

# No control characters: a holder's name and host are shown back to whoever is refused.
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


class LeaseHolder(BaseModel):
    """Who holds (or releases) a lease. Sent as query parameters: a renewal every few seconds needs no
    Idempotency-Key (sending it again renews again), so it leaves no stored answer behind."""

    model_config = ConfigDict(extra="forbid")
    holder: str = Field(min_length=1, max_length=200, pattern=PRINTABLE)
    pid: int = Field(0, ge=0)
    workspace: str | None = None  # every route takes it (routing.requires); a lease, like a cursor, is daemon-wide


class LeaseAsk(LeaseHolder):
    host: str = Field("", max_length=255, pattern=PRINTABLE)
    ttl_s: float = Field(30.0, ge=1, le=600)


class ConsumerLease(BaseModel):
    name: str
    holder: str
    host: str
    pid: int
    actor_id: str
    acquired_at: str
    renewed_at: str
    expires_at: str


class ConsumerLeaseState(BaseModel):
    name: str
    held: bool
    lease: ConsumerLease | None
    expires_in_s: int


router = APIRouter(prefix="/v1", tags=["events"])


@router.get("/consumers/{name}/lease", response_model=ConsumerLeaseState)
async def lease_show(call: ReadCall, name: str) -> Response:
    """Who follows consumer `name`'s cursor now, and until when (held is false once a lease expired)."""
    return json_response(await call.services.ledger.get_consumer_lease(check_identifier(name, field="name")))


@router.post("/consumers/{name}/lease", response_model=ConsumerLeaseState)
async def lease_take(call: ConsumerCall, name: str, ask: Annotated[LeaseAsk, Query()]) -> Response:
    """Take or renew the lease on consumer `name`: 409 names the holder while another one has it. It needs
    the consumer's own capability where it reads, as moving its cursor does (consumer_scope)."""
    actor_id = _act_as(call, name)
    claim = LeaseClaim(holder=ask.holder, host=ask.host, pid=ask.pid, actor_id=actor_id, ttl_s=ask.ttl_s)
    return json_response(await call.services.ledger.take_consumer_lease(name, claim))


@router.delete("/consumers/{name}/lease")
async def lease_release(call: ConsumerCall, name: str, holder: Annotated[LeaseHolder, Query()]) -> Response:
    """Release the lease if this holder and pid have it (a successor that took it over keeps it)."""
    _act_as(call, name)
    released = await call.services.ledger.release_consumer_lease(name, holder=holder.holder, pid=holder.pid)
    return json_response({"name": name, "released": released})


def _act_as(call: Call, name: str) -> str:
    """Holding a consumer's lease is acting as that consumer; answers the actor recorded with the lease."""
    check_identifier(name, field="name")
    act_as_consumer(call.principal, name, call.services.settings.default_workspace)
    return call.principal.actor_id
