"""Managed fine-tuning providers that speak the OpenAI-compatible API, through the official `openai` client.

A provider is a name, a base URL and the name of the environment variable that holds its key (settings
`providers`; the operator configures them, a caller only names one). Submit and poll only: the daemon uploads the
training file, creates the job, then reads the job and its events; the provider's model id is the result.
Relied on: PROTOCOLS.md ("Managed fine-tuning providers"): `POST /v1/files` (purpose fine-tune),
`POST /v1/fine_tuning/jobs` {model, training_file, validation_file?, suffix?, seed?, method, metadata?},
`GET /v1/fine_tuning/jobs/{id}`, `GET .../events` (newest first, `after`, `limit`), `POST .../cancel`, statuses
`validating_files → queued → running → succeeded | failed | cancelled`. The client retries 429 and 5xx itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bashgym.daemon.external.hf_jobs import UpstreamError
from bashgym.daemon.lanes import on_first_use

if TYPE_CHECKING:
    import openai
else:
    openai = on_first_use("openai")

STATUSES = {
    "validating_files": "submitted",
    "queued": "submitted",
    "running": "running",
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}
METADATA_KEY = "bashgym_job"
# The de facto API trains these two of our methods; each names its `method.type` there.
METHOD_TYPES = {"sft": "supervised", "dpo": "dpo"}
_MAX_EVENTS = 100


@contextmanager
def _asking(provider: str, what: str) -> Iterator[None]:
    try:
        yield
    except openai.APIStatusError as exc:
        raise UpstreamError(
            f"Provider {provider} answered {exc.status_code} to {what}: {_message(exc)}", exc.status_code
        ) from exc
    except openai.APIConnectionError as exc:
        raise UpstreamError(f"Provider {provider} could not be reached to {what}: {exc}") from exc


class Provider:
    """One provider's client; every call is blocking (the service runs them in threads)."""

    def __init__(self, name: str, base_url: str, api_key: str, *, max_retries: int = 3, timeout_s: float = 30.0):
        self.name = name
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=timeout_s)

    def upload(self, name: str, content: bytes) -> str:
        with _asking(self.name, f"upload {name}"):
            return str(self._client.files.create(file=(name, content), purpose="fine-tune").id)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        with _asking(self.name, "create the fine-tuning job"):
            return _job(self._client.fine_tuning.jobs.create(**body))

    def retrieve(self, upstream_id: str) -> dict[str, Any]:
        with _asking(self.name, f"read job {upstream_id}"):
            return _job(self._client.fine_tuning.jobs.retrieve(upstream_id))

    def find(self, job_id: str) -> dict[str, Any] | None:
        """The provider's job created for this BashGym job, if the submission reached it."""
        with _asking(self.name, f"list jobs with metadata {METADATA_KEY}={job_id}"):
            page = self._client.fine_tuning.jobs.list(limit=100, metadata={METADATA_KEY: job_id})
            for job in page:
                if (job.metadata or {}).get(METADATA_KEY) == job_id:
                    return _job(job)
        return None

    def events_after(self, upstream_id: str, seen: set[str]) -> list[dict[str, Any]]:
        """Events not yet seen, oldest first (the API pages newest first)."""
        found: list[dict[str, Any]] = []
        with _asking(self.name, f"read the events of job {upstream_id}"):
            page = self._client.fine_tuning.jobs.list_events(upstream_id, limit=_MAX_EVENTS)
            for event in page:
                if event.id in seen:
                    break
                found.append(event.model_dump(mode="json"))
        return list(reversed(found))

    def cancel(self, upstream_id: str) -> dict[str, Any]:
        with _asking(self.name, f"cancel job {upstream_id}"):
            return _job(self._client.fine_tuning.jobs.cancel(upstream_id))


def provider_rows(method: str, path: Path) -> bytes:
    """Our dataset rows in the provider's format: chat `messages` for supervised, `input`/`preferred_output`/
    `non_preferred_output` for DPO. Raises ValueError naming the first row it cannot turn."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        out.append(json.dumps(_row(method, row, number), ensure_ascii=False))
    if not out:
        raise ValueError(f"{path.name} has no rows")
    return ("\n".join(out) + "\n").encode()


def _row(method: str, row: dict[str, Any], number: int) -> dict[str, Any]:
    if method == "sft":
        if isinstance(row.get("messages"), list):
            return {"messages": row["messages"]}
        if "prompt" in row and "completion" in row:
            return {"messages": [*_chat(row["prompt"]), {"role": "assistant", "content": str(row["completion"])}]}
        raise ValueError(f"row {number} has neither messages nor prompt and completion")
    if all(key in row for key in ("prompt", "chosen", "rejected")):
        return {
            "input": {"messages": _chat(row["prompt"])},
            "preferred_output": [{"role": "assistant", "content": str(row["chosen"])}],
            "non_preferred_output": [{"role": "assistant", "content": str(row["rejected"])}],
        }
    raise ValueError(f"row {number} lacks prompt, chosen or rejected")


def _chat(prompt: Any) -> list[dict[str, Any]]:
    return list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]


def _job(job: Any) -> dict[str, Any]:
    data = job.model_dump(mode="json")
    return {
        key: data.get(key)
        for key in (
            "id", "status", "model", "fine_tuned_model", "created_at", "finished_at", "error", "trained_tokens",
            "training_file", "validation_file", "metadata", "estimated_finish",
        )
    }  # fmt: skip


def _message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        return str(error)[:300]
    return str(exc.message)[:300]
