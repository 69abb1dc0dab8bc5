"""Event sinks: forward ledger events to HTTP endpoints, each sink a durable consumer of its own.

A batch is a JSON body `{"sink", "workspace_id", "events": [...]}` signed with HMAC-SHA256 of the exact
body bytes under the secret in the environment variable the sink names, sent in
`X-BashGym-Signature: sha256=<hex>`. The sink's cursor (`sink.<name>`) moves only after a 2xx; any other
answer, or none, is retried with a capped backoff and the same batch. A sink is never required: a
failing one holds back only itself. A new sink starts at the head (it forwards what happens from now).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bashgym.ledger.store import Ledger

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("bashgym.sinks")
SIGNATURE_HEADER = "X-BashGym-Signature"
BATCH = 100
MAX_BACKOFF_S = 60.0
SYNC_S = 5.0  # how often the set of sinks is read again from the ledger


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def consumer_name(ws: str, name: str, *, default_workspace: str = "default") -> str:
    """The sink's durable cursor. Sink names are unique per workspace but cursors daemon-wide: `sink.<name>` in the
    default workspace (as it always was), `sink:<workspace>.<name>` in another, so two workspaces' sinks of one name
    never move each other's place (one would skip events the other has not delivered)."""
    return f"sink.{name}" if ws == default_workspace else f"sink:{ws}.{name}"


class SinkForwarder:
    def __init__(
        self,
        ledger: Ledger,
        environ: Mapping[str, str],
        *,
        timeout_s: float = 10.0,
        initial_backoff_s: float = 1.0,
        default_workspace: str = "default",
    ) -> None:
        self.ledger = ledger
        self.environ = environ
        self.default_workspace = default_workspace
        self.timeout_s = timeout_s
        self.initial_backoff_s = initial_backoff_s
        # Per sink (workspace, name): delivered, failures, last_error, last_success.
        self.status: dict[tuple[str, str], dict[str, Any]] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> SinkForwarder:
        self._loop_task = asyncio.create_task(self._sync_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = [t for t in (self._loop_task, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()

    async def _sync_loop(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:
                log.exception("Could not read the sinks")
            await asyncio.sleep(SYNC_S)

    async def sync(self) -> None:
        """Start a forwarder for each sink in the ledger and stop those removed."""
        sinks = {(s["workspace_id"], s["name"]): s for s in await self.ledger.list_sinks()}
        for key in set(self._tasks) - set(sinks):
            self._tasks.pop(key).cancel()
            self.status.pop(key, None)
        for key, sink in sinks.items():
            if key not in self._tasks or self._tasks[key].done():
                self._tasks[key] = asyncio.create_task(self._forward(sink), name=f"sink-{sink['name']}")

    async def _forward(self, sink: dict[str, Any]) -> None:
        name, ws = sink["name"], sink["workspace_id"]
        fresh = {"delivered": 0, "failures": 0, "last_error": "", "last_success": None}
        state = self.status.setdefault((ws, name), fresh)
        consumer = consumer_name(ws, name, default_workspace=self.default_workspace)
        stored = await self.ledger.get_consumer_cursor(consumer)
        cursor = int(stored["cursor"])
        if not stored.get("updated_at"):
            cursor = self.ledger.last_cursor
            await self.ledger.ack_consumer_cursor(consumer, cursor)
        backoff = self.initial_backoff_s
        while True:
            head = self.ledger.last_cursor
            page = await self.ledger.events_page_json(
                ws, sink["project_id"], after_cursor=cursor, limit=BATCH, types=sink["types"] or None
            )
            if not page.count:
                # Nothing of this sink's up to the head: wait from there, or newer events it does not take
                # (another project's, another type's) would wake it at once, again and again.
                await self.ledger.wait_for_events(max(cursor, head), 10.0)
                continue
            events = json.loads(page.text)["events"]
            body = json.dumps({"sink": name, "workspace_id": ws, "events": events}, separators=(",", ":")).encode()
            # The batch is fixed until the endpoint takes it: a retry sends the very same bytes.
            while (error := await self._deliver(sink, body, page.next_cursor)) is not None:
                state.update(failures=state["failures"] + 1, last_error=error)
                log.warning("Sink %s: %s; retrying the same batch in %.0f s", name, error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            cursor = page.next_cursor
            await self.ledger.ack_consumer_cursor(consumer, cursor)
            state.update(delivered=state["delivered"] + len(events), last_success=time.time(), last_error="")
            backoff = self.initial_backoff_s

    async def _deliver(self, sink: dict[str, Any], body: bytes, cursor: int) -> str | None:
        """None when the endpoint took the batch (2xx); otherwise why not."""
        secret = self.environ.get(sink["secret_env"])
        if not secret:
            return f"{sink['secret_env']} is not set in the daemon's environment; set it and restart the daemon"
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(secret, body),
            "X-BashGym-Sink": sink["name"],
            "X-BashGym-Cursor": str(cursor),
        }
        import httpx  # here: ~0.15 s at start-up (it loads rich) that a daemon without sinks never pays

        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout_s)
        try:
            response = await self._http.post(sink["url"], content=body, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__} posting to the endpoint"
        if 200 <= response.status_code < 300:
            return None
        return f"the endpoint answered {response.status_code}"
