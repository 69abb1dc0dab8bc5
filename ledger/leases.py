"""Consumer leases: one process at a time follows a durable consumer's cursor (ledger/schema/v11.py)."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bashgym.client.errors import Conflict
from bashgym.ledger.tx import utc_iso


class ConsumerLeaseHeld(Conflict):
    code = "consumer_lease_held"


@dataclass(frozen=True)
class LeaseClaim:
    """Who asks for a consumer's lease: a holder id, the host and pid it runs as, and how long it may lapse."""

    holder: str
    host: str
    pid: int
    actor_id: str
    ttl_s: float


def take_lease(conn: sqlite3.Connection, name: str, claim: LeaseClaim, *, now: datetime) -> dict[str, Any]:
    """Take, renew or take over the lease on consumer `name`; raises ConsumerLeaseHeld while another holds it.

    The holder that has it renews it; so does a restart of that holder under the same id (`bashgym up` names its
    bot after its home), which takes it over with its new pid. Anyone else waits for it to be released or to
    expire."""
    current = get_lease(conn, name)
    if current is not None and current["holder"] != claim.holder and _expires(current) > now:
        raise _held(name, current, now)
    is_same = current is not None and (current["holder"], current["pid"]) == (claim.holder, claim.pid)
    acquired_at = current["acquired_at"] if is_same and current is not None else utc_iso(now)
    conn.execute(
        "INSERT INTO consumer_leases (name, holder, host, pid, actor_id, acquired_at, renewed_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
        "host = excluded.host, pid = excluded.pid, actor_id = excluded.actor_id, acquired_at = excluded.acquired_at, "
        "renewed_at = excluded.renewed_at, expires_at = excluded.expires_at",
        (
            name,
            claim.holder,
            claim.host,
            claim.pid,
            claim.actor_id,
            acquired_at,
            utc_iso(now),
            utc_iso(now + timedelta(seconds=claim.ttl_s)),
        ),
    )
    lease = get_lease(conn, name)
    assert lease is not None
    return lease


def release_lease(conn: sqlite3.Connection, name: str, *, holder: str, pid: int) -> bool:
    """Drop the lease if this holder and pid hold it; a successor that took it over keeps it."""
    deleted = conn.execute(
        "DELETE FROM consumer_leases WHERE name = ? AND holder = ? AND pid = ?", (name, holder, pid)
    ).rowcount
    return deleted > 0


def get_lease(conn: sqlite3.Connection, name: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT name, holder, host, pid, actor_id, acquired_at, renewed_at, expires_at FROM consumer_leases "
        "WHERE name = ?",
        (name,),
    ).fetchone()
    return dict(row) if row else None


def lease_state(name: str, lease: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
    """The lease as a reader sees it: held or not, and in how many seconds it expires."""
    if lease is None or _expires(lease) <= now:
        return {"name": name, "held": False, "lease": None, "expires_in_s": 0}
    return {"name": name, "held": True, "lease": lease, "expires_in_s": _seconds_left(lease, now)}


def _held(name: str, lease: dict[str, Any], now: datetime) -> ConsumerLeaseHeld:
    left = _seconds_left(lease, now)
    since = datetime.fromisoformat(lease["acquired_at"])
    where = f"pid {lease['pid']} on host {lease['host'] or 'unknown'}"
    return ConsumerLeaseHeld(
        f"Consumer {name!r} is followed by {lease['holder']} ({where}, actor {lease['actor_id']}) since "
        f"{since:%Y-%m-%d %H:%M:%S} UTC; two followers of one cursor would act on every event twice.",
        hint=f"Stop that one (kill -TERM {lease['pid']} on {lease['host'] or 'its host'}) and start again, or, if it "
        f"is already gone, wait {left} s for its lease to expire.",
        details={
            "consumer": name,
            "holder": lease["holder"],
            "host": lease["host"],
            "pid": lease["pid"],
            "since": lease["acquired_at"],
            "expires_at": lease["expires_at"],
            "expires_in_s": left,
        },
    )


def _expires(lease: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(lease["expires_at"])


def _seconds_left(lease: dict[str, Any], now: datetime) -> int:
    return max(1, math.ceil((_expires(lease) - now).total_seconds()))
