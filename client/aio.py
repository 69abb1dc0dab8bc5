"""The daemon client over aiohttp, for the Discord bot: the same `request` and `raw` as DaemonClient.

The bot answers bursts of slash commands on one event loop, so the client's CPU per request sets its
tail latency: aiohttp (already loaded by discord.py) costs about a tenth of httpx's per request
(bench/bot_roundtrip.py). The CLI keeps the httpx client, which also speaks Unix sockets and streams.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from bashgym.client.errors import DaemonUnreachable
from bashgym.client.http import clean_params, error_from, request_headers, wire_body


class AioDaemonClient:
    def __init__(self, api: str, token: str | None, *, timeout_s: float = 60.0) -> None:
        self._socket = api.removeprefix("unix:") if api.startswith("unix:") else ""
        self.base = "http://bashgym" if self._socket else api.rstrip("/")
        self.api = api
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.UnixConnector(path=self._socket) if self._socket else aiohttp.TCPConnector(limit=100)
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout, connector=connector)
        return self._session

    async def __aenter__(self) -> AioDaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        correlation_id: str | None = None,
        timeout_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        sent = request_headers(method, headers, idempotency_key, correlation_id)
        payload = wire_body(body)
        data = None
        if payload is not None:
            data = json.dumps(payload, separators=(",", ":")).encode()
            sent["Content-Type"] = "application/json"
        status, raw = await self._send(method, path, params, sent, data, timeout_s)
        if status >= 400:
            raise error_from(status, raw)
        return json.loads(raw)

    async def raw(
        self, method: str, path: str, *, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> bytes:
        status, raw = await self._send(method, path, params, dict(headers or {}), None, None)
        if status >= 400:
            raise error_from(status, raw)
        return raw

    async def _send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        headers: dict[str, str],
        data: bytes | None,
        timeout_s: float | None,
    ) -> tuple[int, bytes]:
        # A list is a repeated parameter (`key=a&key=b`), as httpx sends it.
        query = [
            (k, str(item).lower() if isinstance(item, bool) else str(item))
            for k, v in (clean_params(params) or {}).items()
            for item in (v if isinstance(v, list | tuple) else [v])
        ]
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else None
        try:
            async with self._http().request(
                method, self.base + path, params=query, headers=headers, data=data, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DaemonUnreachable(self.api, type(exc).__name__) from exc
