"""Async client of NVIDIA NeMo Customizer's v1 jobs API: create a customization job, poll it, cancel it.

The wire shapes are in PROTOCOLS.md ("NVIDIA NeMo Customizer (v1 API)"). Every failure becomes a
`NemoError` whose message names the setting to check; the API key never appears in one.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx

__all__ = [
    "JOB_STATUSES",
    "TERMINAL_STATUSES",
    "NemoCustomizer",
    "NemoError",
    "job_body",
]

JOBS_PATH = "/v1/customization/jobs"
JOB_STATUSES = frozenset(
    {"created", "pending", "running", "cancelling", "cancelled", "failed", "completed", "ready", "unknown"}
)
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
FINETUNING_TYPES = ("lora", "all_weights")
_MAX_TEXT = 500


class NemoError(Exception):
    """NeMo Customizer could not be reached, refused a request, or answered something unusable."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class NemoCustomizer:
    """Use as `async with NemoCustomizer(url, key) as nemo:`; the HTTP client lives for the block."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._api_key = api_key or None
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> NemoCustomizer:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=self.timeout_s, transport=self._transport
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        """Submit a customization job (build `body` with `job_body`); the reply carries its `id`."""
        return await self._request("POST", JOBS_PATH, body)

    async def job_status(self, job_id: str) -> dict[str, Any]:
        """Fetch the job's status, progress, losses and status_logs."""
        return await self._request("GET", f"{_job_path(job_id)}/status")

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        """Ask NeMo to cancel the job; a cancelled job uploads no checkpoint."""
        return await self._request("POST", f"{_job_path(job_id)}/cancel")

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._http is None:
            raise RuntimeError("NemoCustomizer is used outside `async with NemoCustomizer(...) as nemo:`.")
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.TimeoutException as exc:
            raise NemoError(
                self._redact(
                    f"NeMo Customizer at {self.base_url} did not answer {method} {path} within {self.timeout_s:g} s "
                    f"({type(exc).__name__}); check nemo_base_url, or retry when the service is less busy."
                )
            ) from exc
        except httpx.TransportError as exc:
            raise NemoError(
                self._redact(
                    f"NeMo Customizer at {self.base_url} is unreachable: {_describe(exc)}; check nemo_base_url."
                )
            ) from exc
        if response.status_code >= 400:
            raise self._error_of(method, path, response)
        return self._object_of(method, path, response)

    def _error_of(self, method: str, path: str, response: httpx.Response) -> NemoError:
        code = response.status_code
        detail = _detail_of(response)
        if code in (401, 403):
            if self._api_key is None:
                message = (
                    f"NeMo Customizer at {self.base_url} wants an API key (HTTP {code}) and none was sent; "
                    "set the variable named by nemo_api_key_env."
                )
            else:
                message = (
                    f"NeMo Customizer at {self.base_url} rejected the API key (HTTP {code}); "
                    "check the variable named by nemo_api_key_env."
                )
        elif code == 404:
            message = (
                f"NeMo Customizer at {self.base_url} has no {method} {path} (HTTP 404: {detail}); "
                "check nemo_base_url and the job id."
            )
        elif code < 500:
            message = f"NeMo Customizer refused {method} {path} (HTTP {code}): {detail}"
        else:
            message = (
                f"NeMo Customizer at {self.base_url} answered HTTP {code} to {method} {path}: {detail}; "
                "the service failed, retry later or ask its operator."
            )
        return NemoError(self._redact(message), code)

    def _object_of(self, method: str, path: str, response: httpx.Response) -> dict[str, Any]:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            return payload
        raise NemoError(
            self._redact(
                f"NeMo Customizer at {self.base_url} answered {method} {path} with something other than a JSON "
                f"object: {_truncate(response.text) or '(empty body)'}; check that nemo_base_url points at the "
                "Customizer service."
            ),
            response.status_code,
        )

    def _redact(self, message: str) -> str:
        # A server or proxy may echo the request headers back; the key must not reach a log or a reply.
        return message.replace(self._api_key, "[redacted]") if self._api_key else message


def job_body(
    *,
    config: str,
    dataset_namespace: str,
    dataset_name: str,
    finetuning_type: str,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    adapter_dim: int,
    adapter_dropout: float,
    name: str,
    description: str,
    output_model: str | None,
) -> dict[str, Any]:
    """The body of POST /v1/customization/jobs; the `lora` block goes only with finetuning_type "lora"."""
    if finetuning_type not in FINETUNING_TYPES:
        raise ValueError(f"finetuning_type {finetuning_type!r} is not one of {', '.join(FINETUNING_TYPES)}.")
    hyperparameters: dict[str, Any] = {
        "training_type": "sft",
        "finetuning_type": finetuning_type,
        "epochs": epochs,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
    }
    if finetuning_type == "lora":
        hyperparameters["lora"] = {"adapter_dim": adapter_dim, "adapter_dropout": adapter_dropout}
    body: dict[str, Any] = {
        "name": name,
        "description": description,
        "config": config,
        "dataset": {"name": dataset_name, "namespace": dataset_namespace},
        "hyperparameters": hyperparameters,
    }
    if output_model is not None:
        body["output_model"] = output_model
    return body


def _job_path(job_id: str) -> str:
    # Quoted whole: an id holding "/" or ".." must not reach a different route.
    return f"{JOBS_PATH}/{quote(job_id, safe='')}"


def _describe(exc: httpx.TransportError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _detail_of(response: httpx.Response) -> str:
    """The server's own explanation: `detail` or `message` of a JSON body, else the raw text."""
    try:
        payload = response.json()
    except ValueError:
        return _truncate(response.text) or "(empty body)"
    if isinstance(payload, dict):
        for key in ("detail", "message", "error"):
            if key in payload:
                value = payload[key]
                return _truncate(value if isinstance(value, str) else json.dumps(value))
    return _truncate(json.dumps(payload))


def _truncate(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."
