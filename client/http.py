"""Typed async client of the daemon API, shared by the CLI and the bot."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from bashgym.client.errors import ApiError, Conflict, DaemonUnreachable, InvalidInput
from bashgym.client.models import (
    DatasetFromBlob,
    ErrorResponse,
    EventPage,
    ExperimentSpec,
    Health,
    MetricBatch,
    ModelVersionSpec,
    ProjectSpec,
    RunRegistration,
    RunTransition,
    WhoAmI,
    WriteResult,
)
from bashgym.client.specs import FileDigest

__all__ = ["ApiError", "DaemonClient", "DaemonUnreachable", "announced_by", "resolve_api"]


def _model_dir(directory: Path) -> tuple[list[Path], str | None]:
    """A model directory's files, in order, and its config.json's sha256; refused when it is no directory or empty.
    Blocking: it walks and hashes."""
    if not directory.is_dir():
        raise InvalidInput(f"{directory} is not a directory.", hint="Name the model's directory on this machine.")
    paths = sorted(p for p in directory.rglob("*") if p.is_file())
    if not paths:
        raise InvalidInput(f"{directory} holds no files.", hint="Name the directory the model was saved to.")
    config = directory / "config.json"
    return paths, hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None


def resolve_api(api: str | None, endpoint_file: Path, default_port: int) -> str:
    """--api / BASHGYM_API, else the running daemon's own record, else the default port."""
    if api:
        return api
    try:
        record = json.loads(endpoint_file.read_text())
        return f"unix:{record['uds']}" if "uds" in record else str(record["url"])
    except (OSError, ValueError, KeyError):
        return f"http://127.0.0.1:{default_port}"


def announced_by(endpoint_file: Path, pid: int) -> str | None:
    """The address the daemon process `pid` recorded, or None while the record is missing or another's.

    A record outlives a daemon that was killed, and its time says little (a daemon killed a moment ago left
    it): only the pid in it tells a starting daemon's own record from a stale one.
    """
    try:
        record = json.loads(endpoint_file.read_text())
        if int(record["pid"]) != pid:
            return None
        return f"unix:{record['uds']}" if "uds" in record else str(record["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class DaemonClient:
    def __init__(
        self, api: str, token: str | None, *, timeout_s: float = 60.0, extra_headers: dict[str, str] | None = None
    ) -> None:
        self.api = api
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers.update(extra_headers or {})
        if api.startswith("unix:"):
            transport = httpx.AsyncHTTPTransport(uds=api[len("unix:") :])
            self._http = httpx.AsyncClient(
                base_url="http://bashgym", transport=transport, headers=headers, timeout=timeout_s
            )
        else:
            self._http = httpx.AsyncClient(base_url=api, headers=headers, timeout=timeout_s)

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        content: bytes | AsyncIterator[bytes] | None = None,
        idempotency_key: str | None = None,
        correlation_id: str | None = None,
        timeout_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        headers = request_headers(method, headers, idempotency_key, correlation_id)
        payload = wire_body(body)
        try:
            response = await self._http.request(
                method,
                path,
                json=payload if content is None else None,
                content=content,
                params=clean_params(params),
                headers=headers,
                timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as exc:
            raise DaemonUnreachable(self.api, type(exc).__name__) from exc
        if response.status_code >= 400:
            raise _error_of(response)
        return response.json()

    async def raw(
        self, method: str, path: str, *, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> bytes:
        """A response body as bytes (report files, charts)."""
        try:
            response = await self._http.request(method, path, params=clean_params(params), headers=headers)
        except httpx.TransportError as exc:
            raise DaemonUnreachable(self.api, type(exc).__name__) from exc
        if response.status_code >= 400:
            raise _error_of(response)
        return response.content

    async def download(
        self,
        path: str,
        target: Path,
        *,
        sha256: str,
        params: dict[str, Any] | None = None,
        advance: Callable[[int], None] | None = None,
    ) -> int:
        """Stream a response body into `target` through a partial file beside it, renamed once whole and hashing to
        `sha256` (else removed, and Conflict says so); answer its size. `advance(n)` hears of each chunk."""
        partial = target.with_name(f".{target.name}.part")
        digest, size = hashlib.sha256(), 0
        try:
            async with self._http.stream("GET", path, params=clean_params(params)) as response:
                if response.status_code >= 400:
                    raise error_from(response.status_code, await response.aread())
                with partial.open("wb") as handle:
                    async for chunk in response.aiter_bytes():
                        handle.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                        if advance is not None:
                            advance(len(chunk))
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise DaemonUnreachable(self.api, type(exc).__name__) from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if digest.hexdigest() != sha256:
            partial.unlink(missing_ok=True)
            raise Conflict(
                f"{path} arrived with sha256 {digest.hexdigest()} ({size} bytes), not the recorded {sha256}; "
                f"nothing was written to {target}.",
                hint="Download it again; if it differs again, the daemon's copy changed: tell the operator.",
            )
        partial.replace(target)
        return size

    # -- system ----------------------------------------------------------------------------------

    async def health(self) -> Health:
        return Health.model_validate(await self.request("GET", "/v1/health"))

    async def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(await self.request("GET", "/v1/auth/whoami"))

    async def ledger_health(self) -> dict[str, Any]:
        return dict(await self.request("GET", "/v1/ledger/health"))

    # -- lineage ---------------------------------------------------------------------------------

    async def project_create(self, spec: ProjectSpec, *, workspace: str | None = None) -> WriteResult:
        return WriteResult.model_validate(
            await self.request("POST", "/v1/projects", body=spec, params={"workspace": workspace})
        )

    async def experiment_create(
        self, project: str, spec: ExperimentSpec, *, workspace: str | None = None
    ) -> WriteResult:
        return WriteResult.model_validate(
            await self.request(
                "POST", f"/v1/projects/{project}/experiments", body=spec, params={"workspace": workspace}
            )
        )

    async def model_version_register(
        self, project: str, spec: ModelVersionSpec, *, workspace: str | None = None
    ) -> WriteResult:
        return WriteResult.model_validate(
            await self.request(
                "POST", f"/v1/projects/{project}/model-versions", body=spec, params={"workspace": workspace}
            )
        )

    async def model_dir_spec(
        self,
        directory: Path,
        *,
        project: str,
        workspace: str | None,
        model_id: str,
        version_id: str,
        parent: str | None = None,
        on_file: Callable[[str, int], None] | None = None,
    ) -> ModelVersionSpec:
        """Copy a model directory's files into the daemon's store for `project` and describe the version they make
        (`on_file(name, size)` as each is stored); nothing is registered yet."""
        paths, config_digest = await asyncio.to_thread(_model_dir, directory)
        files = []
        for path in paths:
            stored = await self.blob_upload(path, project=project, workspace=workspace)
            name = str(path.relative_to(directory))
            files.append(FileDigest(path=name, sha256=stored["sha256"], size_bytes=stored["size_bytes"]))
            if on_file is not None:
                on_file(name, int(stored["size_bytes"]))
        return ModelVersionSpec(
            model_version_id=version_id,
            model_id=model_id,
            source_uri=f"bashgym://models/{model_id}",
            config_digest=config_digest,
            parent_version_id=parent,
            files=files,
        )

    async def blob_upload(self, path: Path, *, project: str, workspace: str | None = None) -> dict[str, Any]:
        """Upload a file for `project`, which then holds it: only that project's records may use it."""
        params = {"project": project, "workspace": workspace}
        return dict(await self.request("PUT", "/v1/blobs", content=file_chunks(path), params=params))

    async def dataset_register(
        self, project: str, spec: DatasetFromBlob, *, workspace: str | None = None
    ) -> WriteResult:
        return WriteResult.model_validate(
            await self.request(
                "POST", f"/v1/projects/{project}/dataset-versions/from-blob", body=spec, params={"workspace": workspace}
            )
        )

    # -- runs and metrics ------------------------------------------------------------------------

    async def run_register(self, spec: RunRegistration, *, workspace: str | None = None) -> WriteResult:
        return WriteResult.model_validate(
            await self.request("POST", "/v1/runs", body=spec, params={"workspace": workspace})
        )

    async def run_transition(
        self, project: str, run_id: str, spec: RunTransition, *, workspace: str | None = None
    ) -> WriteResult:
        return WriteResult.model_validate(
            await self.request(
                "POST", f"/v1/projects/{project}/runs/{run_id}/transitions", body=spec, params={"workspace": workspace}
            )
        )

    async def metrics_ingest(self, project: str, batch: MetricBatch, *, workspace: str | None = None) -> WriteResult:
        return WriteResult.model_validate(
            await self.request("POST", f"/v1/projects/{project}/metrics", body=batch, params={"workspace": workspace})
        )

    async def events(
        self,
        project: str | None,
        *,
        after_cursor: int = 0,
        limit: int = 100,
        wait_s: float = 0,
        workspace: str | None = None,
    ) -> EventPage:
        path = f"/v1/projects/{project}/events" if project else "/v1/events"
        return EventPage.model_validate(
            await self.request(
                "GET",
                path,
                params={"after_cursor": after_cursor, "limit": limit, "wait_s": wait_s, "workspace": workspace},
            )
        )

    # -- ids -------------------------------------------------------------------------------------

    async def resolve_id(self, prefix: str, *, kind: str | None = None, workspace: str | None = None) -> dict[str, Any]:
        """The full ids starting with `prefix` in the projects this principal may read (GET /v1/ids/{prefix}):
        {"prefix", "matches": [{"id", "kind", "project_id"}], "truncated"}, at most 10 matches, in id order."""
        path = f"/v1/ids/{quote(prefix, safe='')}"
        return dict(await self.request("GET", path, params={"kind": kind, "workspace": workspace}))


def request_headers(
    method: str, headers: dict[str, str] | None, idempotency_key: str | None, correlation_id: str | None
) -> dict[str, str]:
    """Every mutation carries an idempotency key (a fresh one unless the caller names it)."""
    sent = dict(headers or {})
    if method in {"POST", "PUT", "PATCH", "DELETE"}:
        sent["Idempotency-Key"] = idempotency_key or f"idem-{secrets.token_hex(12)}"
    if correlation_id:
        sent["X-Correlation-Id"] = correlation_id
    return sent


def wire_body(body: Any) -> Any:
    """A request body as JSON-ready data: API models are dumped without their unset fields."""
    return body.model_dump(mode="json", exclude_none=True) if hasattr(body, "model_dump") else body


def clean_params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    return {k: v for k, v in params.items() if v is not None} if params else None


async def file_chunks(path: Path, size: int = 1024 * 1024) -> AsyncIterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(size):
            yield chunk


def _error_of(response: httpx.Response) -> ApiError:
    return error_from(response.status_code, response.content)


def error_from(status: int, body: bytes) -> ApiError:
    """The ApiError an error answer of the daemon stands for (any HTTP client)."""
    try:
        error = ErrorResponse.model_validate_json(body).error
    except ValueError:
        return ApiError(status, "unexpected_answer", f"The daemon answered {status} without the error shape.")
    return ApiError(status, error.code, error.message, error.hint, error.reference, error.details)
