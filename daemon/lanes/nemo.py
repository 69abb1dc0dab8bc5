"""Async client of NVIDIA NeMo Customizer's v1 jobs API and of the two stores a job trains from.

A launch on the cloud:nemo-customizer lane publishes the dataset it validated, then creates the job:

1. Rows become the format the Customizer documents for the method (daemon/lanes/nemo_data.py builds them, and the
   job's body).
2. Entity Store `GET /v1/datasets/{namespace}/{name}`: a dataset registered there with other content (its
   `custom_fields.bashgym_sha256` differs or is absent) is refused, never overwritten.
3. Data Store, the Hugging Face Hub API under `<datastore>/v1/hf`: `create_repo(repo_type="dataset",
   exist_ok=True)`, `dataset_info` (other files under training/ or validation/ would train too: refused), then
   `upload_file` of training/training.jsonl (and validation/validation.jsonl from eval_dataset_path).
4. Entity Store `POST /v1/datasets` `{name, namespace, description, files_url: "hf://datasets/<ns>/<name>",
   custom_fields}`; 409 (already registered) is accepted when its digests are this upload's.
5. `POST /v1/customization/jobs` naming `dataset {name, namespace}`, with `hyperparameters {training_type sft|dpo,
   finetuning_type lora|all_weights, epochs, batch_size, learning_rate, max_steps?, seed?, lora {adapter_dim,
   adapter_dropout, alpha?}, dpo {ref_policy_kl_penalty}}`; `?` fields go only when the request sets them.

Relied on: PROTOCOLS.md ("NVIDIA NeMo Customizer (v1 API)"); NeMo Microservices docs "Create Dataset" (HfApi at
`<DATA_STORE_BASE_URL>/v1/hf`, upload then register), "Get Dataset" (GET /v1/datasets/{namespace}/{dataset_name}),
the SDK's DatasetCreateParams (files_url required; name, namespace, description, project, custom_fields),
"Format Training Dataset" (messages, prompt-completion), "Hyperparameter Options" (training_type dpo|sft,
max_steps, seed), LoraParameters (adapter_dim, adapter_dropout, alpha), DpoParameters (ref_policy_kl_penalty, the
paper's beta); NVIDIA NeMo-Agent-Toolkit's Customizer DPO adapter (rows `prompt`/`chosen_response`/
`rejected_response` under training/, hyperparameters.dpo). Every failure becomes a `NemoError` whose message names
the setting to check; the API key never appears in one.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from bashgym.daemon.lanes import on_first_use
from bashgym.daemon.lanes.nemo_data import DATA_DIRS, NemoDataset

if TYPE_CHECKING:
    import httpx
else:
    httpx = on_first_use("httpx")  # loaded when the first NeMo job is sent

__all__ = [
    "JOB_STATUSES",
    "LANE_CAPABILITIES",
    "PAUSE_REFUSED",
    "TERMINAL_STATUSES",
    "NemoCustomizer",
    "NemoError",
]

JOBS_PATH = "/v1/customization/jobs"
DATASETS_PATH = "/v1/datasets"
HF_PATH = "/v1/hf"
JOB_STATUSES = frozenset(
    {"created", "pending", "running", "cancelling", "cancelled", "failed", "completed", "ready", "unknown"}
)
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
PAUSE_REFUSED = (
    "NeMo Customizer jobs cannot pause: its API offers only cancel, and a cancelled job uploads no checkpoint to "
    "resume from"
)
# What `training plan` shows for this lane: a run here can be stopped, never paused.
LANE_CAPABILITIES = {
    "pause": {"supported": False, "reason": PAUSE_REFUSED + "."},
    "stop": {"supported": True, "effect": "cancels the Customizer job; a cancelled job uploads no model"},
}
_MAX_TEXT = 500


class NemoError(Exception):
    """A NeMo service could not be reached, refused a request, or answered something unusable."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


@dataclass(frozen=True)
class Service:
    """One NeMo service: its name in messages, its URL, and the setting that names it."""

    name: str
    url: str
    setting: str


class _Response(Protocol):
    """What an error message reads of a reply, from httpx or from huggingface_hub's httpx2."""

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class NemoCustomizer:
    """Use as `async with NemoCustomizer(url, key) as nemo:`; the HTTP client lives for the block. The Data Store
    and Entity Store default to the Customizer's URL (one NeMo platform ingress)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        datastore_url: str = "",
        entity_store_url: str = "",
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._customizer = Service("NeMo Customizer", self.base_url, "nemo_base_url")
        self._entities = Service(
            "NeMo Entity Store", (entity_store_url or base_url).rstrip("/"), "nemo_entity_store_url"
        )
        self._datastore = Service("NeMo Data Store", (datastore_url or base_url).rstrip("/"), "nemo_datastore_url")
        self._api_key = api_key or None
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> NemoCustomizer:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._http = httpx.AsyncClient(headers=headers, timeout=self.timeout_s, transport=self._transport)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        """Submit a customization job (build `body` with `job_body`); the reply carries its `id`."""
        return await self._request(self._customizer, "POST", JOBS_PATH, body)

    async def job_status(self, job_id: str) -> dict[str, Any]:
        """Fetch the job's status, progress, losses and status_logs."""
        return await self._request(self._customizer, "GET", f"{_job_path(job_id)}/status")

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        """Ask NeMo to cancel the job; a cancelled job uploads no checkpoint."""
        return await self._request(self._customizer, "POST", f"{_job_path(job_id)}/cancel")

    async def fetch_dataset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Entity Store's record of a dataset, or None when none is registered under that name."""
        path = f"{DATASETS_PATH}/{quote(namespace, safe='')}/{quote(name, safe='')}"
        response = await self._send(self._entities, "GET", path)
        return None if response.status_code == 404 else self._object_of(self._entities, "GET", path, response)

    async def publish_dataset(self, dataset: NemoDataset, *, description: str) -> None:
        """Upload the dataset to the Data Store and register it in the Entity Store, never overwriting a dataset
        that holds other content."""
        _refuse_foreign(dataset, await self.fetch_dataset(dataset.namespace, dataset.name))
        await asyncio.to_thread(self._upload, dataset)
        body = {
            "name": dataset.name,
            "namespace": dataset.namespace,
            "description": description,
            "files_url": dataset.files_url,
            "custom_fields": dataset.digests,
        }
        try:
            await self._request(self._entities, "POST", DATASETS_PATH, body)
        except NemoError as exc:
            if exc.status_code != 409:
                raise
            # Registered meanwhile (or by an earlier launch of the same content): fine when the digests agree.
            _refuse_foreign(dataset, await self.fetch_dataset(dataset.namespace, dataset.name))

    def _upload(self, dataset: NemoDataset) -> None:
        """The Data Store's side, through huggingface_hub (blocking: run it in a thread)."""
        from httpx2 import HTTPError as HubTransportError  # huggingface_hub's HTTP client; it lets these through
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError, HFValidationError

        # token=False: without a NeMo key, no Hugging Face token of this machine may reach the Data Store.
        api = HfApi(endpoint=f"{self._datastore.url}{HF_PATH}", token=self._api_key or False)
        repo = dataset.dataset_id
        try:
            api.create_repo(repo, repo_type="dataset", exist_ok=True)
            ours = {f.path_in_repo for f in dataset.files}
            held = [s.rfilename for s in api.dataset_info(repo).siblings or []]
            others = sorted(p for p in held if p.startswith(DATA_DIRS) and p not in ours)
            if others:
                raise NemoError(
                    f"NeMo Data Store repository {repo} already holds {', '.join(others[:5])}, which the job would "
                    "train on too; name a new dataset with nemo_dataset, or drop it to name one by content digest.",
                    409,
                )
            for file in dataset.files:
                api.upload_file(
                    path_or_fileobj=file.content,
                    path_in_repo=file.path_in_repo,
                    repo_id=repo,
                    repo_type="dataset",
                    commit_message=f"BashGym upload, sha256 {file.sha256}",
                )
        except HfHubHTTPError as exc:
            request = exc.response.request
            detail = _truncate(exc.server_message or "") or _detail_of(exc.response)
            code = exc.response.status_code
            message = self._status_message(self._datastore, request.method, request.url.path, code, detail)
            raise NemoError(self._redact(message), code) from exc
        except HubTransportError as exc:
            message = f"{self._datastore.name} at {self._datastore.url} is unreachable ({type(exc).__name__}: {exc})"
            raise NemoError(self._redact(f"{message}; check {self._datastore.setting}.")) from exc
        except HFValidationError as exc:
            raise NemoError(f"huggingface_hub refuses the dataset id {repo!r}: {exc}; name another.") from exc

    async def _send(self, service: Service, method: str, path: str, body: Any = None) -> httpx.Response:
        if self._http is None:
            raise RuntimeError("NemoCustomizer is used outside `async with NemoCustomizer(...) as nemo:`.")
        try:
            return await self._http.request(method, service.url + path, json=body)
        except httpx.TimeoutException as exc:
            raise NemoError(
                self._redact(
                    f"{service.name} at {service.url} did not answer {method} {path} within {self.timeout_s:g} s "
                    f"({type(exc).__name__}); check {service.setting}, or retry when the service is less busy."
                )
            ) from exc
        except httpx.TransportError as exc:
            raise NemoError(
                self._redact(
                    f"{service.name} at {service.url} is unreachable: {_describe(exc)}; check {service.setting}."
                )
            ) from exc

    async def _request(self, service: Service, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = await self._send(service, method, path, body)
        return self._object_of(service, method, path, response)

    def _object_of(self, service: Service, method: str, path: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            message = self._status_message(service, method, path, response.status_code, _detail_of(response))
            raise NemoError(self._redact(message), response.status_code)
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            return payload
        raise NemoError(
            self._redact(
                f"{service.name} at {service.url} answered {method} {path} with something other than a JSON "
                f"object: {_truncate(response.text) or '(empty body)'}; check that {service.setting} points at the "
                f"{service.name} service."
            ),
            response.status_code,
        )

    def _status_message(self, service: Service, method: str, path: str, code: int, detail: str) -> str:
        where = f"{service.name} at {service.url}"
        if code in (401, 403):
            if self._api_key is None:
                return (
                    f"{where} wants an API key (HTTP {code}) and none was sent; "
                    "set the variable named by nemo_api_key_env."
                )
            return f"{where} rejected the API key (HTTP {code}); check the variable named by nemo_api_key_env."
        if code == 404:
            also = " and the job id" if service is self._customizer else ""
            return f"{where} has no {method} {path} (HTTP 404: {detail}); check {service.setting}{also}."
        if code < 500:
            return f"{service.name} refused {method} {path} (HTTP {code}): {detail}"
        return (
            f"{where} answered HTTP {code} to {method} {path}: {detail}; the service failed: retry later, or check "
            f"{service.setting} and ask its operator."
        )

    def _redact(self, message: str) -> str:
        # A server or proxy may echo the request headers back; the key must not reach a log or a reply.
        return message.replace(self._api_key, "[redacted]") if self._api_key else message


def _refuse_foreign(dataset: NemoDataset, registered: dict[str, Any] | None) -> None:
    """A registered dataset is reused only when it holds exactly these bytes (its digests, in custom_fields)."""
    fields = (registered or {}).get("custom_fields") or {}
    if registered is None or {k: v for k, v in fields.items() if k.startswith("bashgym_")} == dataset.digests:
        return
    theirs = fields.get("bashgym_sha256")
    raise NemoError(
        f"NeMo Entity Store already registers dataset {dataset.dataset_id} with other content (its bashgym_sha256 "
        f"is {theirs[:12] if isinstance(theirs, str) else 'not recorded'}; this upload's is "
        f"{dataset.files[0].sha256[:12]}); BashGym never overwrites a dataset it did not upload. Name a new one with "
        "nemo_dataset, or drop nemo_dataset to name it by content digest.",
        409,
    )


def _job_path(job_id: str) -> str:
    # Quoted whole: an id holding "/" or ".." must not reach a different route.
    return f"{JOBS_PATH}/{quote(job_id, safe='')}"


def _describe(exc: httpx.TransportError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _detail_of(response: _Response) -> str:
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
