"""A loopback stand-in of NVIDIA NeMo Customizer's v1 jobs API (create, status, cancel), with the two
stores a job trains from: the Entity Store's dataset routes on the same port (POST /v1/datasets,
GET /v1/datasets/{namespace}/{name}) and the Data Store, tests/support/hub_standin.py serving the Hugging Face API
under /v1/hf on a port of its own (`datastore_url`).

It records every request, keeps jobs and datasets in memory, and answers unknown routes with a loud 404
naming the method and path (facts in PROTOCOLS.md and daemon/lanes/nemo.py). A job is created only for a
dataset registered in the Entity Store whose files the Data Store holds, in the format its training_type
needs; its hyperparameters are checked as the Customizer documents them (422 naming what is wrong).
A job advances one stage on each GET of its status, not with wall time, so a test that polls N times
knows exactly what it sees:

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

from tests.support.hub_standin import HubStandIn, Repo

JOBS = "/v1/customization/jobs"
DATASETS = "/v1/datasets"
TRAINING_TYPES = ("sft", "dpo")
HYPERPARAMETERS = {"training_type", "finetuning_type", "epochs", "batch_size", "learning_rate", "max_steps", "seed"}
LORA_KEYS = {"adapter_dim", "adapter_dropout", "alpha"}
DPO_KEYS = {"ref_policy_kl_penalty", "preference_loss_weight", "preference_average_log_probs", "sft_loss_weight"}
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
        self.datasets: dict[str, dict[str, Any]] = {}  # the Entity Store, by "<namespace>/<name>"
        self.datastore = HubStandIn(prefix="/v1/hf", api_key=api_key)
        self.datastore_url = self.datastore.url
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
        self.datastore.__enter__()
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
        self.datastore.__exit__()

    def seed_dataset(self, dataset_id: str, rows: list[dict[str, Any]], **custom_fields: str) -> None:
        """A dataset someone else uploaded and registered: its training file in the Data Store, its entity here."""
        content = "".join(json.dumps(row) + "\n" for row in rows).encode()
        self.datastore.state.repos[dataset_id] = Repo(
            dataset_id, private=False, files={"training/training.jsonl": content}, repo_type="dataset"
        )
        namespace, name = dataset_id.split("/")
        self.datasets[dataset_id] = _entity(
            {"name": name, "namespace": namespace, "files_url": f"hf://datasets/{dataset_id}"}, custom_fields
        )

    def uploaded(self, dataset_id: str) -> dict[str, bytes]:
        """The files the Data Store holds for a dataset."""
        return dict(self.datastore.state.repos[dataset_id].files)

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
        if method == "POST" and path.rstrip("/") == DATASETS:
            return self._register(body)
        if method == "GET" and len(parts) == 5 and "/".join(parts[:3]) == DATASETS:
            found = self.datasets.get(f"{parts[3]}/{parts[4]}")
            if found is None:
                return _reply(404, {"detail": f"Dataset {parts[3]}/{parts[4]} not found."})
            return _reply(200, copy.deepcopy(found))
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

    def _register(self, body: Any) -> JSONResponse:
        problem = _entity_problem(body)
        if problem:
            return _reply(422, {"detail": problem})
        dataset_id = f"{body['namespace']}/{body['name']}"
        if dataset_id in self.datasets:
            return _reply(409, {"detail": f"Dataset {dataset_id} already exists."})
        self.datasets[dataset_id] = _entity(body, body.get("custom_fields") or {})
        return _reply(200, copy.deepcopy(self.datasets[dataset_id]))

    def _create(self, body: Any) -> JSONResponse:
        problem = _problem_with(body)
        if problem:
            return _reply(422, {"detail": problem})
        missing, problem = self._dataset_problem(body["dataset"], body["hyperparameters"].get("training_type", "sft"))
        if missing or problem:
            return _reply(404 if missing else 422, {"detail": missing or problem})
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

    def _dataset_problem(self, dataset: dict[str, str], training_type: str) -> tuple[str | None, str | None]:
        """(what is missing, what is wrong) with the dataset a job names: registered, uploaded, in its format."""
        dataset_id = f"{dataset['namespace']}/{dataset['name']}"
        if dataset_id not in self.datasets:
            return f"Dataset {dataset_id} is not registered in the Entity Store; upload and register it first.", None
        repo = self.datastore.state.repos.get(dataset_id)
        training = {p: b for p, b in (repo.files if repo else {}).items() if p.startswith("training/")}
        if not training:
            return f"Dataset {dataset_id} has no files under training/ in the Data Store; upload them first.", None
        for path, content in sorted(training.items()):
            for number, line in enumerate(content.decode().splitlines(), start=1):
                problem = _row_problem(json.loads(line), training_type)
                if problem:
                    return None, f"{dataset_id} {path} line {number}: {problem}"
        return None, None


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
        return "hyperparameters is required: an object with training_type 'sft' or 'dpo'."
    return _hyperparameter_problem(hyper)


def _hyperparameter_problem(hyper: dict[str, Any]) -> str | None:
    unknown = sorted(set(hyper) - HYPERPARAMETERS - {"lora", "dpo"})
    if unknown:
        return f"hyperparameters has unknown fields {unknown}."
    training_type, finetuning_type = hyper.get("training_type", "sft"), hyper.get("finetuning_type")
    if training_type not in TRAINING_TYPES:
        return f"hyperparameters.training_type must be one of {', '.join(TRAINING_TYPES)} here, got {training_type!r}."
    if finetuning_type not in ("lora", "all_weights"):
        return f"hyperparameters.finetuning_type must be 'lora' or 'all_weights', got {finetuning_type!r}."
    if "lora" in hyper and (finetuning_type != "lora" or not set(hyper["lora"]) <= LORA_KEYS):
        return (
            f"hyperparameters.lora ({sorted(hyper['lora'])}) goes only with finetuning_type 'lora', keys {LORA_KEYS}."
        )
    if "dpo" in hyper and (training_type != "dpo" or not set(hyper["dpo"]) <= DPO_KEYS):
        return f"hyperparameters.dpo ({sorted(hyper['dpo'])}) goes only with training_type 'dpo', keys {DPO_KEYS}."
    for name in ("epochs", "batch_size", "max_steps", "seed"):
        value = hyper.get(name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or (value < 1 and name != "max_steps"):
            return f"hyperparameters.{name} must be a positive integer, got {value!r}."
    return None


def _row_problem(row: Any, training_type: str) -> str | None:
    """A training row in the format the Customizer documents for `training_type`."""
    if not isinstance(row, dict):
        return "a row must be a JSON object."
    if training_type == "dpo":
        missing = [k for k in ("prompt", "chosen_response", "rejected_response") if k not in row]
        return f"a dpo row needs prompt, chosen_response and rejected_response; missing {missing}." if missing else None
    if isinstance(row.get("messages"), list) or {"prompt", "completion"} <= set(row):
        return None
    return f"an sft row needs messages, or prompt and completion; got keys {sorted(row)}."


def _entity_problem(body: Any) -> str | None:
    if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in ("name", "namespace", "files_url")):
        return "A dataset needs string fields name, namespace and files_url."
    expected = f"hf://datasets/{body['namespace']}/{body['name']}"
    if body["files_url"] != expected:
        return f"files_url must name the Data Store repository {expected!r}, got {body['files_url']!r}."
    fields = body.get("custom_fields") or {}
    if not isinstance(fields, dict) or not all(isinstance(v, str) for v in fields.values()):
        return "custom_fields must map names to strings."
    return None


def _entity(body: dict[str, Any], custom_fields: dict[str, str]) -> dict[str, Any]:
    return {
        "id": f"dataset-{secrets.token_hex(8)}",
        "name": body["name"],
        "namespace": body["namespace"],
        "description": body.get("description"),
        "files_url": body["files_url"],
        "custom_fields": dict(custom_fields),
        "created_at": _now(),
    }


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
