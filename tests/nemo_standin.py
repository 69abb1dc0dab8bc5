"""A loopback stand-in of NVIDIA NeMo Customizer's v1 jobs API (create, status, cancel).

It records every request, keeps jobs in memory, and answers unknown routes with a loud 404 naming
the method and path (facts in PROTOCOLS.md). A job advances one stage on each GET of its status, not
with wall time, so a test that polls N times knows exactly what it sees:

    created -> pending -> running (step 1) -> ... -> running (step steps-1) -> completed (step steps)

With outcome "failed" the job fails while running step 2 and says why in its status_logs.
"""

from __future__ import annotations

import copy
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

JOBS = "/v1/customization/jobs"
OUTCOMES = ("completed", "failed")
TERMINAL = ("completed", "failed", "cancelled")
VAL_EVERY_STEPS = 2
FAIL_AT_STEP = 2


def _now() -> str:
    return datetime.now(UTC).isoformat()


class NemoStandIn:
    """Start with `with nemo_standin() as nemo:`; point the client at nemo.url with nemo.api_key."""

    def __init__(self, *, api_key: str | None = "k", steps: int = 6, outcome: str = "completed") -> None:
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        self.api_key = api_key
        self.steps = steps
        self.outcome = _checked_outcome(outcome)
        self._next_outcome: str | None = None
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        app = Starlette(
            routes=[Route("/{path:path}", self._dispatch, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]
        )
        config = uvicorn.Config(
            app,
            log_config=None,  # leave the test process's logging alone
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def next_outcome(self) -> str | None:
        """The outcome of the next created job only; None means `outcome`."""
        return self._next_outcome

    @next_outcome.setter
    def next_outcome(self, value: str | None) -> None:
        self._next_outcome = None if value is None else _checked_outcome(value)

    def __enter__(self) -> NemoStandIn:
        self._thread.start()
        deadline = time.monotonic() + 10
        # uvicorn exposes `started` as a flag, not an event, so poll it briefly.
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("the NeMo stand-in did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._sock.close()

    # -- HTTP ------------------------------------------------------------------------------------

    async def _dispatch(self, request: Request) -> JSONResponse:
        method, path = request.method, request.url.path
        body = await _json_body(request)
        self.requests.append((method, path, body if isinstance(body, dict) else None))
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _reply(401, {"detail": "Missing or invalid bearer token."})
        parts = path.rstrip("/").split("/")
        if method == "POST" and path.rstrip("/") == JOBS:
            return self._create(body)
        if len(parts) == 6 and "/".join(parts[:4]) == JOBS:
            job_id, action = parts[4], parts[5]
            if (method, action) == ("GET", "status"):
                return self._with_job(job_id, self._status)
            if (method, action) == ("POST", "cancel"):
                return self._with_job(job_id, self._cancel)
        return _reply(404, {"detail": f"stand-in has no route {method} {path}"})

    def _with_job(self, job_id: str, handle: Callable[[dict[str, Any]], JSONResponse]) -> JSONResponse:
        job = self.jobs.get(job_id)
        if job is None:
            return _reply(404, {"detail": f"Customization job {job_id} not found."})
        return handle(job)

    def _create(self, body: Any) -> JSONResponse:
        problem = _problem_with(body)
        if problem:
            return _reply(422, {"detail": problem})
        job_id = f"cust-{secrets.token_hex(8)}"
        outcome = self._next_outcome or self.outcome
        self._next_outcome = None
        created = _now()
        output_model = body.get("output_model") or f"default/{body['config'].split('@')[0].split('/')[-1]}@{job_id}"
        job: dict[str, Any] = {
            "id": job_id,
            "created_at": created,
            "updated_at": created,
            "namespace": "default",
            "name": body.get("name"),
            "description": body.get("description"),
            "config": body["config"],
            "dataset": body["dataset"],
            "hyperparameters": body["hyperparameters"],
            "output_model": output_model,
            "status": "created",
            "outcome": outcome,
            "steps_completed": 0,
            "epochs_completed": 0,
            "percentage_done": 0.0,
            "train_loss": None,
            "val_loss": None,
            "metrics": {"keys": ["train_loss", "val_loss"], "metrics": {"train_loss": [], "val_loss": []}},
            "status_logs": [{"updated_at": created, "message": "Job created."}],
        }
        self.jobs[job_id] = job
        return _reply(200, _public(job))

    def _status(self, job: dict[str, Any]) -> JSONResponse:
        _advance(job, self.steps)
        return _reply(200, _status_view(job))

    def _cancel(self, job: dict[str, Any]) -> JSONResponse:
        if job["status"] in TERMINAL:
            detail = (
                f"Job {job['id']} is already {job['status']}; only a created, pending or running job can be cancelled."
            )
            return _reply(409, {"detail": detail})
        _log(job, "cancelled", "Job cancelled on request; no checkpoint was uploaded.")
        return _reply(200, _public(job))


def nemo_standin(*, api_key: str | None = "k", steps: int = 6, outcome: str = "completed") -> NemoStandIn:
    """`with nemo_standin(api_key="k", steps=6, outcome="completed") as nemo:`; api_key None skips auth."""
    return NemoStandIn(api_key=api_key, steps=steps, outcome=outcome)


# -- job progression (pure, on the job dict) -----------------------------------------------------


def _advance(job: dict[str, Any], steps: int) -> None:
    match job["status"]:
        case "created":
            _log(job, "pending", "Job queued; waiting for a GPU.")
        case "pending":
            _log(job, "running", "Training started.")
            _step(job, steps)
        case "running":
            _step(job, steps)
        case _:
            return  # terminal: nothing moves any more


def _step(job: dict[str, Any], steps: int) -> None:
    step = job["steps_completed"] + 1
    if job["outcome"] == "failed" and step == min(FAIL_AT_STEP, steps):
        _log(job, "failed", f"Training failed at step {step}: CUDA out of memory; lower batch_size and resubmit.")
        return
    epochs = int(job["hyperparameters"].get("epochs", 1))
    job["steps_completed"] = step
    job["epochs_completed"] = step * epochs // steps
    job["percentage_done"] = round(100.0 * step / steps, 1)
    job["train_loss"] = round(2.5 * 0.8**step, 4)
    job["metrics"]["metrics"]["train_loss"].append({"step": step, "value": job["train_loss"], "timestamp": _now()})
    if step % VAL_EVERY_STEPS == 0 or step == steps:
        job["val_loss"] = round(2.6 * 0.85**step, 4)
        job["metrics"]["metrics"]["val_loss"].append({"step": step, "value": job["val_loss"], "timestamp": _now()})
    if step == steps:
        _log(job, "completed", f"Training completed; model uploaded as {job['output_model']}.")
    else:
        _log(job, "running", f"Step {step}/{steps}: train_loss {job['train_loss']}.")


def _log(job: dict[str, Any], status: str, message: str) -> None:
    now = _now()
    job["status"] = status
    job["updated_at"] = now
    job["status_logs"].append({"updated_at": now, "message": message})


def _public(job: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "id",
        "created_at",
        "updated_at",
        "namespace",
        "name",
        "description",
        "config",
        "dataset",
        "hyperparameters",
        "output_model",
        "status",
    )
    return {key: job[key] for key in keys}


def _status_view(job: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "id",
        "created_at",
        "updated_at",
        "status",
        "steps_completed",
        "epochs_completed",
        "percentage_done",
        "train_loss",
        "val_loss",
        "metrics",
        "status_logs",
    )
    view = {key: job[key] for key in keys}
    # Only a completed job has produced a model; a failed or cancelled one uploads nothing.
    view["output_model"] = job["output_model"] if job["status"] == "completed" else None
    return copy.deepcopy(view)  # a copy: later progress must not change an answer already given


def _problem_with(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    if not isinstance(body.get("config"), str) or not body["config"]:
        return "config is required: a string such as 'meta/llama-3.2-1b-instruct@v1.0.0+A100'."
    dataset = body.get("dataset")
    if not isinstance(dataset, dict) or not all(isinstance(dataset.get(k), str) for k in ("name", "namespace")):
        return "dataset is required: an object with string fields name and namespace."
    hyper = body.get("hyperparameters")
    if not isinstance(hyper, dict):
        return "hyperparameters is required: an object with training_type 'sft'."
    if hyper.get("training_type") != "sft":
        return f"hyperparameters.training_type must be 'sft', got {hyper.get('training_type')!r}."
    if hyper.get("finetuning_type", "lora") not in ("lora", "all_weights"):
        return f"hyperparameters.finetuning_type must be 'lora' or 'all_weights', got {hyper['finetuning_type']!r}."
    epochs = hyper.get("epochs", 1)
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        return f"hyperparameters.epochs must be a positive integer, got {epochs!r}."
    return None


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _reply(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _checked_outcome(outcome: str) -> str:
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    return outcome
