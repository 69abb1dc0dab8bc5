"""A loopback stand-in of the OpenAI-compatible fine-tuning API that managed providers copy.

The real `openai` client works against it unchanged: `OpenAI(base_url=standin.url + "/v1", api_key=...)`.
It serves (facts in PROTOCOLS.md, shapes from the client's types under openai/types/fine_tuning/):

    POST   /v1/files                              multipart: file, purpose       -> file object
    GET    /v1/files/{id}, /v1/files/{id}/content, DELETE /v1/files/{id}
    POST   /v1/fine_tuning/jobs                   JSON                           -> fine_tuning.job
    GET    /v1/fine_tuning/jobs                   after, limit, metadata[k]=v    -> list, newest first
    GET    /v1/fine_tuning/jobs/{id}                                             -> fine_tuning.job
    GET    /v1/fine_tuning/jobs/{id}/events       after, limit                   -> list, newest first
    POST   /v1/fine_tuning/jobs/{id}/cancel                                      -> fine_tuning.job

Errors come in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`; an unknown route answers
404 "Invalid URL (METHOD /path)". Nothing moves on its own: a job is created in `validating_files` and the
test drives it with `advance(job_id, status, ...)` along validating_files -> queued -> running ->
succeeded | failed | cancelled (forward jumps allowed). The training (and validation) file is checked when
the job first leaves `validating_files`, as OpenAI checks it in the background after answering the create:
a file that is not UTF-8 JSONL of objects sends the job to `failed` instead, with
`error = {code: "invalid_training_file", message, param: "training_file" | "validation_file"}`.

Two choices the client forces: a cancel of a finished job answers 400 (the client retries a 409 as a lock
timeout), and an injected failure's delay goes out as `retry-after-ms` too, at least 1 ms, because the
client ignores a zero `retry-after` and backs off 0.5 s, 1 s, 2 s... instead.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import string
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

DEFAULT_MODELS = ("gpt-4o-mini-2024-07-18", "gpt-4.1-mini-2025-04-14", "meta-llama/Llama-3.2-1B-Instruct")
STATUSES = ("validating_files", "queued", "running", "succeeded", "failed", "cancelled")
TERMINAL = ("succeeded", "failed", "cancelled")
METHODS = ("supervised", "dpo")
HYPERPARAMETERS = ("batch_size", "learning_rate_multiplier", "n_epochs")
# What "auto" resolves to when a job starts running, as OpenAI reports concrete values from then on.
AUTO_RESOLVED = {"batch_size": 1, "learning_rate_multiplier": 1.8, "n_epochs": 3, "beta": 0.1}
DEFAULT_PAGE = 20
MAX_PAGE = 100
ORGANIZATION = "org-standin"
STATUS_MESSAGES = {
    "queued": "Files validated, moving job to queued state",
    "running": "Fine-tuning job started",
    "succeeded": "The job has successfully completed",
    "failed": "The job failed",
    "cancelled": "Fine-tuning job cancelled",
}
FAULTS = {
    429: ("Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!", "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


Answer = tuple[int, dict[str, Any] | bytes] | None  # (status, JSON or raw bytes), or None: no such route


class Seen(NamedTuple):
    """One request as it arrived: the path has no query string (that is in `FineTuneState.queries`)."""

    method: str
    path: str
    has_auth: bool


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


@dataclass
class FineTuneState:
    """What the stand-in holds; `jobs` and `events` are the JSON it answers with (events oldest first)."""

    api_key: str | None
    models: tuple[str, ...]
    requests: list[Seen] = field(default_factory=list)
    queries: list[dict[str, list[str]]] = field(default_factory=list)  # parsed query of each request, in order
    files: dict[str, StoredFile] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    faults: deque[tuple[int, float | None]] = field(default_factory=deque)
    lock: threading.RLock = field(default_factory=threading.RLock)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _id(prefix: str, length: int = 24) -> str:
    return prefix + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(length))


def _now() -> int:
    return int(time.time())


class _Handler(BaseHTTPRequestHandler):
    standin: FineTuneStandIn

    def log_message(self, *args: Any) -> None:  # quiet: the test reads state.requests instead
        return

    def _reply(
        self, status: int, body: Any, headers: dict[str, str] | None = None, *, raw: bytes | None = None
    ) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", _id("req_", 16))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

    def _handle(self) -> None:
        body = self._body() if self.command in ("POST", "PUT", "PATCH", "DELETE") else b""
        split = urlsplit(self.path)
        path, query = unquote(split.path), parse_qs(split.query, keep_blank_values=True)
        standin = self.standin
        auth = self.headers.get("Authorization")
        with standin.state.lock:
            standin.state.requests.append(Seen(self.command, path, auth is not None))
            standin.state.queries.append(query)
            fault = standin.state.faults.popleft() if standin.state.faults else None
        if fault is not None:
            self._fault(*fault)
            return
        try:
            standin._check_auth(auth)
            status, answer = standin._route(self.command, path, query, body, self.headers.get("Content-Type", ""))
        except ApiError as error:
            self._reply(error.status, error.body)
            return
        if isinstance(answer, bytes):
            self._reply(status, None, raw=answer)
        else:
            self._reply(status, answer)

    def _fault(self, status: int, retry_after: float | None) -> None:
        message, type_, code = FAULTS.get(status, (f"stand-in told to answer HTTP {status}", "server_error", None))
        headers = {}
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
            headers["retry-after-ms"] = str(max(1, round(retry_after * 1000)))
        self._reply(status, ApiError(status, message, type_=type_, code=code).body, headers)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle


class FineTuneStandIn:
    """Start with `with FineTuneStandIn() as ft:`; point the client at ft.url + "/v1" with ft.api_key."""

    def __init__(self, *, api_key: str | None = "sk-test", models: tuple[str, ...] = DEFAULT_MODELS) -> None:
        self.api_key = api_key
        self.state = FineTuneState(api_key=api_key, models=tuple(models))
        handler = type("Handler", (_Handler,), {"standin": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll interval: shutdown() waits for the loop's next look (0.5 s by default).
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FineTuneStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what a test calls -------------------------------------------------------------------------

    def fail_next(self, status: int, count: int = 1, *, retry_after: float | None = None) -> None:
        """The next `count` requests (any route, before the key is checked) answer `status` with an
        OpenAI-shaped error. With retry_after (seconds) they carry `retry-after` as given and
        `retry-after-ms` (at least 1), which the openai client prefers, so 0 means "retry at once"."""
        with self.state.lock:
            self.state.faults.extend([(status, retry_after)] * count)

    def add_file(self, content: bytes, *, purpose: str = "fine-tune", filename: str = "train.jsonl") -> str:
        """A file someone already uploaded; returns its id."""
        stored = StoredFile(_id("file-", 22), filename, purpose, bytes(content), _now())
        with self.state.lock:
            self.state.files[stored.id] = stored
        return stored.id

    def job(self, job_id: str) -> dict[str, Any]:
        """A copy of the job as GET /v1/fine_tuning/jobs/{id} answers it."""
        with self.state.lock:
            return copy.deepcopy(self._job(job_id))

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """A copy of the job's events, oldest first (the API answers newest first)."""
        with self.state.lock:
            self._job(job_id)
            return copy.deepcopy(self.state.events[job_id])

    def advance(
        self,
        job_id: str,
        status: str,
        *,
        message: str | None = None,
        fine_tuned_model: str | None = None,
        trained_tokens: int | None = None,
        error: dict[str, Any] | str | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Move a job forward to `status` (or keep it there, to add a message or metrics) and return it.

        Leaving `validating_files` checks the files first: a bad one fails the job whatever `status` asked.
        `metrics` (with `step`; train_loss, total_steps, ... as OpenAI sends) adds a "metrics" event after
        the status event. `succeeded` sets fine_tuned_model (default `ft:<model>:<suffix or bashgym>:<id tail>`),
        trained_tokens (default: whitespace tokens of the training file times n_epochs), finished_at and a
        results file; `failed` sets error (a str becomes the message; default code "internal_error").
        """
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        with self.state.lock:
            job = self._job(job_id)
            current = job["status"]
            if current in TERMINAL or STATUSES.index(status) < STATUSES.index(current):
                raise ValueError(f"job {job_id} is {current}; it cannot move to {status}")
            if current == "validating_files" and status != "validating_files":
                problem = self._file_problem(job)
                if problem is not None:
                    self._fail(job, {"code": "invalid_training_file", "message": problem[1], "param": problem[0]})
                    return copy.deepcopy(job)
            if status != current:
                self._enter(job, status, message, fine_tuned_model, trained_tokens, error)
            elif message is not None:
                self._event(job, message)
            if metrics is not None:
                self._metrics(job, metrics)
            return copy.deepcopy(job)

    # -- job life ------------------------------------------------------------------------------------

    def _job(self, job_id: str) -> dict[str, Any]:
        job = self.state.jobs.get(job_id)
        if job is None:
            raise KeyError(f"the stand-in has no fine-tuning job {job_id!r}")
        return job

    def _event(
        self, job: dict[str, Any], message: str, *, level: str = "info", kind: str = "message", data: Any = None
    ) -> None:
        event = {
            "object": "fine_tuning.job.event",
            "id": _id("ftevent-"),
            "created_at": _now(),
            "level": level,
            "message": message,
            "type": kind,
            "data": data if data is not None else {},
        }
        self.state.events[job["id"]].append(event)

    def _enter(
        self,
        job: dict[str, Any],
        status: str,
        message: str | None,
        fine_tuned_model: str | None,
        trained_tokens: int | None,
        error: dict[str, Any] | str | None,
    ) -> None:
        job["status"] = status
        if status == "running":
            for name, value in AUTO_RESOLVED.items():
                for hyper in self._hyper_dicts(job):
                    if hyper.get(name) == "auto":
                        hyper[name] = value
            job["estimated_finish"] = _now() + 600
        if status == "failed":
            self._fail(job, error, message)
            return
        if status in TERMINAL:
            job["finished_at"] = _now()
            job["estimated_finish"] = None
        if status == "succeeded":
            suffix = job["user_provided_suffix"] or "bashgym"
            job["fine_tuned_model"] = fine_tuned_model or f"ft:{job['model']}:{suffix}:{job['id'][-8:]}"
            job["trained_tokens"] = trained_tokens if trained_tokens is not None else self._tokens(job)
            job["result_files"] = [self._results_file(job)]
            self._event(job, f"New fine-tuned model created: {job['fine_tuned_model']}")
        self._event(job, message or STATUS_MESSAGES[status])

    def _fail(self, job: dict[str, Any], error: dict[str, Any] | str | None, message: str | None = None) -> None:
        if error is None:
            error = {"code": "internal_error", "message": "Fine-tuning job failed due to an internal error."}
        elif isinstance(error, str):
            error = {"code": "job_failed", "message": error}
        job["status"] = "failed"
        job["error"] = {"code": error["code"], "message": error["message"], "param": error.get("param")}
        job["finished_at"] = _now()
        job["estimated_finish"] = None
        self._event(job, message or error["message"], level="error")

    def _metrics(self, job: dict[str, Any], metrics: dict[str, Any]) -> None:
        if "step" not in metrics:
            raise ValueError("metrics needs a step")
        data = dict(metrics)
        total = f"/{data['total_steps']}" if "total_steps" in data else ""
        loss = f": training loss={data['train_loss']:.4f}" if "train_loss" in data else ""
        self._event(job, f"Step {data['step']}{total}{loss}", kind="metrics", data=data)

    @staticmethod
    def _hyper_dicts(job: dict[str, Any]) -> list[dict[str, Any]]:
        method = job["method"]
        return [job["hyperparameters"], method[method["type"]]["hyperparameters"]]

    def _tokens(self, job: dict[str, Any]) -> int:
        stored = self.state.files.get(job["training_file"])
        words = len(stored.content.split()) if stored else 0
        epochs = job["hyperparameters"].get("n_epochs")
        return words * (epochs if isinstance(epochs, int) else 1)

    def _results_file(self, job: dict[str, Any]) -> str:
        rows = [e["data"] for e in self.state.events[job["id"]] if e["type"] == "metrics"]
        columns = ["step", *sorted({k for row in rows for k in row} - {"step"})]
        lines = [",".join(columns)] + [",".join(str(row.get(c, "")) for c in columns) for row in rows]
        return self.add_file(
            ("\n".join(lines) + "\n").encode(), purpose="fine-tune-results", filename="step_metrics.csv"
        )

    def _file_problem(self, job: dict[str, Any]) -> tuple[str, str] | None:
        """(param, message) for the first training or validation file that is not JSONL of objects."""
        for param in ("training_file", "validation_file"):
            file_id = job.get(param)
            if file_id is None:
                continue
            stored = self.state.files.get(file_id)
            if stored is None:
                return param, f"File {file_id} was deleted before it could be validated."
            problem = _jsonl_problem(stored.content)
            if problem is not None:
                return param, f"The job failed due to an invalid {param.replace('_', ' ')}: {file_id}. {problem}"
        return None

    # -- HTTP ---------------------------------------------------------------------------------------

    def _check_auth(self, auth: str | None) -> None:
        if self.api_key is None:
            return
        if not auth or not auth.startswith("Bearer ") or not auth[7:].strip():
            raise ApiError(
                401,
                "You didn't provide an API key. You need to provide your API key in an Authorization header "
                "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            )
        if auth[7:] != self.api_key:
            key = auth[7:]
            shown = key[:3] + "*" * 4 + key[-4:] if len(key) > 8 else "*" * len(key)
            raise ApiError(401, f"Incorrect API key provided: {shown}.", code="invalid_api_key")

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, content_type: str
    ) -> tuple[int, dict[str, Any] | bytes]:
        parts = path.rstrip("/").split("/")[1:]  # "/v1/fine_tuning/jobs/x" -> ["v1", "fine_tuning", "jobs", "x"]
        with self.state.lock:
            if parts[:2] == ["v1", "files"]:
                answer = self._files(method, parts[2:], query, body, content_type)
            elif parts[:3] == ["v1", "fine_tuning", "jobs"]:
                answer = self._jobs(method, parts[3:], query, body)
            else:
                answer = None
            if answer is None:
                raise ApiError(404, f"Invalid URL ({method} {path})")
            return answer

    def _files(
        self, method: str, rest: list[str], query: dict[str, list[str]], body: bytes, content_type: str
    ) -> Answer:
        if method == "POST" and not rest:
            return 200, self._upload(body, content_type)
        if method == "GET" and not rest:
            listed = list(reversed(self.state.files.values()))  # newest first
            if "purpose" in query:
                listed = [f for f in listed if f.purpose == query["purpose"][-1]]
            if query.get("order") == ["asc"]:
                listed.reverse()
            return 200, _page([f.public() for f in listed], query, max_limit=10000)
        if not rest or len(rest) > 2 or method not in ("GET", "DELETE"):
            return None
        stored = self.state.files.get(rest[0])
        if stored is None:
            raise ApiError(404, f"No such File object: {rest[0]}", param="id")
        if (method, len(rest)) == ("GET", 1):
            return 200, stored.public()
        if (method, rest[1:]) == ("GET", ["content"]):
            return 200, stored.content
        if (method, len(rest)) == ("DELETE", 1):
            del self.state.files[stored.id]
            return 200, {"id": stored.id, "object": "file", "deleted": True}
        return None

    def _upload(self, body: bytes, content_type: str) -> dict[str, Any]:
        try:
            fields = _multipart(body, content_type)
        except ValueError as error:
            raise ApiError(400, f"The request must be multipart/form-data: {error}") from None
        if "file" not in fields or fields["file"][0] is None:
            raise ApiError(400, "Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
        if "purpose" not in fields:
            raise ApiError(
                400, "Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter"
            )
        filename, content = fields["file"]
        purpose = fields["purpose"][1].decode()
        stored = StoredFile(_id("file-", 22), filename or "upload", purpose, content, _now())
        self.state.files[stored.id] = stored
        return stored.public()

    def _jobs(self, method: str, rest: list[str], query: dict[str, list[str]], body: bytes) -> Answer:
        if not rest:
            if method == "POST":
                return 200, self._create(_json(body))
            if method == "GET":
                return 200, self._list_jobs(query)
            return None
        if method not in ("GET", "POST") or len(rest) > 2:
            return None
        job = self.state.jobs.get(rest[0])
        if job is None:
            raise ApiError(404, f"Fine-tuning job {rest[0]} not found.", param="fine_tuning_job_id", code="not_found")
        if (method, rest[1:]) == ("GET", []):
            return 200, copy.deepcopy(job)
        if (method, rest[1:]) == ("GET", ["events"]):
            return 200, _page(list(reversed(self.state.events[job["id"]])), query)
        if (method, rest[1:]) == ("POST", ["cancel"]):
            return 200, self._cancel(job)
        return None

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        for name in ("model", "training_file"):
            if not isinstance(body.get(name), str) or not body[name]:
                raise ApiError(
                    400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
                )
        if body["model"] not in self.state.models:
            raise ApiError(
                400,
                f"Model {body['model']} is not available for fine-tuning or does not exist.",
                param="model",
                code="model_not_available",
            )
        for param in ("training_file", "validation_file"):
            file_id = body.get(param)
            if file_id is None:
                continue
            stored = self.state.files.get(file_id)
            if stored is None:
                raise ApiError(400, f"invalid {param}: {file_id} does not exist.", param=param, code="invalid_file")
            if stored.purpose != "fine-tune":
                raise ApiError(
                    400,
                    f"invalid {param}: {file_id} has purpose {stored.purpose!r}; fine-tuning needs 'fine-tune'.",
                    param=param,
                    code="invalid_file_purpose",
                )
        suffix = body.get("suffix")
        if suffix is not None and (not isinstance(suffix, str) or not 0 < len(suffix) <= 64):
            raise ApiError(400, "suffix must be a string of 1 to 64 characters.", param="suffix")
        metadata = body.get("metadata")
        _check_metadata(metadata)
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 2147483647):
            raise ApiError(400, f"seed must be an integer from 0 to 2147483647, got {seed!r}.", param="seed")
        method = _method(body)
        job_id = _id("ftjob-")
        job = {
            "object": "fine_tuning.job",
            "id": job_id,
            "model": body["model"],
            "created_at": _now(),
            "finished_at": None,
            "fine_tuned_model": None,
            "organization_id": ORGANIZATION,
            "result_files": [],
            "status": "validating_files",
            "validation_file": body.get("validation_file"),
            "training_file": body["training_file"],
            "hyperparameters": {k: method[method["type"]]["hyperparameters"][k] for k in HYPERPARAMETERS},
            "method": method,
            "trained_tokens": None,
            "error": None,
            "user_provided_suffix": suffix,
            "seed": seed if seed is not None else secrets.randbelow(2147483648),
            "estimated_finish": None,
            "integrations": [],
            "metadata": dict(metadata) if metadata is not None else None,
        }
        self.state.jobs[job_id] = job
        self.state.events[job_id] = []
        self._event(job, f"Created fine-tuning job: {job_id}")
        self._event(job, f"Validating training file: {body['training_file']}")
        return copy.deepcopy(job)

    def _list_jobs(self, query: dict[str, list[str]]) -> dict[str, Any]:
        jobs = list(reversed(self.state.jobs.values()))  # newest first
        wanted = {
            key[len("metadata[") : -1]: values[-1] for key, values in query.items() if key.startswith("metadata[")
        }
        if query.get("metadata") == ["null"]:
            if wanted:
                raise ApiError(400, "Do not combine metadata=null with metadata[key]=value.", param="metadata")
            jobs = [job for job in jobs if job["metadata"] is None]
        for key, value in wanted.items():
            jobs = [job for job in jobs if (job["metadata"] or {}).get(key) == value]
        return _page([copy.deepcopy(job) for job in jobs], query)

    def _cancel(self, job: dict[str, Any]) -> dict[str, Any]:
        if job["status"] in TERMINAL:
            raise ApiError(
                400,
                f"Job {job['id']} has already {job['status']}; only a job that has not finished can be cancelled.",
                param="fine_tuning_job_id",
                code="invalid_request",
            )
        job["status"] = "cancelled"
        job["finished_at"] = _now()
        job["estimated_finish"] = None
        self._event(job, STATUS_MESSAGES["cancelled"])
        return copy.deepcopy(job)


# -- request pieces (pure) -----------------------------------------------------------------------


def _json(body: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(body or b"null")
    except ValueError:
        raise ApiError(400, "We could not parse the JSON body of your request.") from None
    if not isinstance(parsed, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return parsed


def _multipart(body: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """{field name: (filename or None, bytes)} of a multipart/form-data body, byte for byte."""
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise ValueError(f"content type is {content_type!r}")
    boundary = next(
        (p.split("=", 1)[1].strip().strip('"') for p in params.split(";") if p.strip().startswith("boundary=")), None
    )
    if not boundary:
        raise ValueError("no boundary")
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in body.split(b"--" + boundary.encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, content = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        content = content.removesuffix(b"\r\n")
        disposition = next(
            (line for line in head.decode().split("\r\n") if line.lower().startswith("content-disposition")), ""
        )
        values = {}
        for item in disposition.split(";")[1:]:
            key, _, value = item.strip().partition("=")
            values[key.lower()] = value.strip('"')
        if "name" in values:
            fields[values["name"]] = (values.get("filename"), content)
    return fields


def _method(body: dict[str, Any]) -> dict[str, Any]:
    """The job's `method`, from `method` or the deprecated top-level `hyperparameters`, "auto" filled in."""
    method, hyper = body.get("method"), body.get("hyperparameters")
    if method is not None and hyper is not None:
        raise ApiError(
            400, "Specify hyperparameters inside method, not both method and hyperparameters.", param="hyperparameters"
        )
    if method is None:
        method = {"type": "supervised", "supervised": {"hyperparameters": hyper or {}}}
    if not isinstance(method, dict) or method.get("type") not in METHODS:
        kind = method.get("type") if isinstance(method, dict) else method
        raise ApiError(400, f"method.type must be one of {', '.join(METHODS)} here, got {kind!r}.", param="method.type")
    config = method.get(method["type"]) or {}
    given = config.get("hyperparameters") or {}
    unknown = sorted(set(given) - set(HYPERPARAMETERS) - {"beta"})
    if unknown:
        raise ApiError(400, f"Unknown hyperparameters {unknown}.", param=f"method.{method['type']}.hyperparameters")
    for name, value in given.items():
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            raise ApiError(400, f"{name} must be 'auto' or a positive number, got {value!r}.", param=name)
    filled = {name: given.get(name, "auto") for name in HYPERPARAMETERS}
    if method["type"] == "dpo":
        filled["beta"] = given.get("beta", "auto")
    return {"type": method["type"], method["type"]: {"hyperparameters": filled}}


def _check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict) or len(metadata) > 16:
        raise ApiError(400, "metadata must be an object of at most 16 keys.", param="metadata")
    for key, value in metadata.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise ApiError(
                400, f"metadata[{key}] must be a string key of <= 64 chars to a string of <= 512.", param="metadata"
            )


def _page(items: list[dict[str, Any]], query: dict[str, list[str]], *, max_limit: int = MAX_PAGE) -> dict[str, Any]:
    """A cursor page as OpenAI lists: items after the one `after` names, `limit` of them (default 20)."""
    try:
        limit = int(query.get("limit", [str(DEFAULT_PAGE)])[-1])
    except ValueError:
        raise ApiError(400, "limit must be an integer.", param="limit") from None
    if not 1 <= limit <= max_limit:
        raise ApiError(400, f"limit must be from 1 to {max_limit}, got {limit}.", param="limit")
    if "after" in query:
        after = query["after"][-1]
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(400, f"after names no item of this list: {after}.", param="after")
        items = items[ids.index(after) + 1 :]
    return {"object": "list", "data": items[:limit], "has_more": len(items) > limit}


def _jsonl_problem(content: bytes) -> str | None:
    try:
        text = content.decode()
    except UnicodeDecodeError:
        return "The file is not UTF-8 text."
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        return "The file is empty."
    for number, line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            return f"Line {number} is not valid JSON."
        if not isinstance(row, dict):
            return f"Line {number} is not a JSON object."
    return None


@contextlib.contextmanager
def provider_daemon(home: Path, key: str, models: tuple[str, ...]) -> Iterator[tuple[FineTuneStandIn, Any]]:
    """A provider stand-in named `acme`, and a real daemon configured with it (its key in ACME_KEY), polling fast."""
    from tests.support.helpers import running_daemon

    with FineTuneStandIn(api_key=key, models=models) as provider:
        env = {
            "ACME_KEY": key,
            "BASHGYM_PROVIDERS": json.dumps({"acme": {"base_url": provider.url + "/v1", "api_key_env": "ACME_KEY"}}),
            "BASHGYM_EXTERNAL_POLL_S": "0.1",
        }
        with running_daemon(home, env=env) as daemon:
            yield provider, daemon
