"""The resolve stage: a launch's payload becomes a training request, and a launch that names its project and
registered versions gets its tracking context composed from the ledger's own records, never guessed.

A person who picks a project in Discord (or `?project=` on the API) asks for an official run there: the daemon
fills the context from what the project has registered (the project's name, the model version and dataset
version with their digests, the experiment) and from where the run goes (the environment). The campaign runner
composes its candidates' contexts the same way.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.specs import context_in_workspace
from bashgym.client.validation import HUB, check_identifier
from bashgym.daemon.authority import Principal
from bashgym.daemon.launch.confine import Reach, base_model_of, held_blob, hub_repo
from bashgym.daemon.version import bashgym_version
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.fields import request_from_recipe
from bashgym.trainers.contracts.request import METHOD_ALIASES, METHODS, TrainingRequest
from pydantic import ValidationError

# The experiment of runs launched one at a time, outside a campaign, when the launch names none.
ADHOC_EXPERIMENT = "adhoc"
ADHOC = {
    "name": "Ad-hoc runs",
    "objective": "Runs launched one at a time, outside a campaign.",
    "task_type": "adhoc",
}


@dataclass(frozen=True)
class Upstream:
    """Compute that is not this daemon's (an external job): it downloads its base model from the Hub and never reads
    this host's files."""

    target: str  # the run's compute target, which names its environment: hf-jobs, managed:NAME, skypilot
    name: str  # how a refusal names it: "a Hugging Face Job"


def runtime_digest() -> str:
    """The daemon's runtime: the BashGym and Python versions its trainers run with."""
    return hashlib.sha256(f"bashgym {bashgym_version()} python {platform.python_version()}".encode()).hexdigest()


def environment_id(compute_target: str, *, prefix: str = "") -> str:
    """The environment a run goes to, named by its compute target (`ssh:gpu1` -> `ssh-gpu1`)."""
    return f"{prefix}{compute_target.replace(':', '-')}"[:128]


async def registered_context(
    ledger: Ledger,
    ws: str,
    project: str,
    *,
    model: dict[str, Any],
    dataset: dict[str, Any],
    experiment: dict[str, str],
    environment: str,
) -> dict[str, Any]:
    """A complete tracking context from a project's records: `model` and `dataset` are its registered version
    records, `experiment` holds experiment_id, name, objective and task_type."""
    project_record = await ledger.get_project(ws, project)
    return {
        "workspace_id": ws,
        "project_id": project,
        "project_display_name": project_record["name"],
        "experiment_id": experiment["experiment_id"],
        "experiment_name": experiment["name"],
        "objective": experiment["objective"],
        "task_type": experiment["task_type"],
        "model_id": model["model_id"],
        "model_version_id": model["model_version_id"],
        "model_source_uri": model["source_uri"],
        "model_source_revision": model.get("source_revision") or "",
        "model_config_digest": model["config_digest"] or hashlib.sha256(model["source_uri"].encode()).hexdigest(),
        "dataset_id": dataset["dataset_id"],
        "dataset_version_id": dataset["dataset_version_id"],
        "dataset_source_uri": dataset["source_uri"],
        "dataset_content_digest": dataset["content_digest"],
        "environment_id": environment,
        "environment_runtime_digest": runtime_digest(),
    }


async def named_experiment(ledger: Ledger, ws: str, project: str, experiment_id: str | None) -> dict[str, str]:
    """The experiment a launch names: its registered name and objective, or a new one with the ad-hoc wording;
    none named is the project's ad-hoc experiment."""
    wanted = experiment_id or ADHOC_EXPERIMENT
    record = next((e for e in await ledger.list_experiments(ws, project) if e["experiment_id"] == wanted), None)
    if record is None:
        name = ADHOC["name"] if wanted == ADHOC_EXPERIMENT else wanted
        return {"experiment_id": wanted, **ADHOC, "name": name}
    return {
        "experiment_id": wanted,
        "name": record["name"],
        "objective": record["objective"],
        "task_type": record["task_type"],
    }


def read_payload(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body or b"{}")
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"Request body is not valid JSON: {exc.msg} at line {exc.lineno}.") from exc
    if not isinstance(payload, dict):
        raise InvalidInput("A training request is a JSON object.")
    return payload


def parse_training_request(payload: dict[str, Any]) -> TrainingRequest:
    """The request as sent, or InvalidInput naming every problem in the user's own field names."""
    try:
        return request_from_recipe(payload)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"`{where}`: {message}" if where else message)
        raise InvalidInput(
            problems[0] if len(problems) == 1 else f"{len(problems)} problems in the request: {'; '.join(problems)}.",
            hint="Fix the request; `bashgym training plan` checks it without launching.",
            details={"problems": problems} if len(problems) > 1 else None,
        ) from exc
    except ValueError as exc:  # request_from_recipe's own checks
        raise InvalidInput(str(exc)) from exc


def context_of(payload: dict[str, Any]) -> dict[str, Any] | None:
    context = payload.get("tracking_context")
    return context if isinstance(context, dict) else None


async def in_named_project(
    principal: Principal,
    reach: Reach,
    payload: dict[str, Any],
    query: Mapping[str, str],
    *,
    upstream: Upstream | None = None,
) -> dict[str, Any]:
    """The payload with the complete tracking context of the project the launch names (`?project=`), and the base
    model of the registered model version it names: an explicit project is where the run is recorded, never
    `unassigned`. An `upstream` job's model version must be a Hub repo: the upstream cannot read this host."""
    project = check_identifier(query["project"], field="project")
    if context_of(payload) is not None:
        raise InvalidInput("Name the run's project with ?project= or in tracking_context, not both.")
    missing = [name for name in ("model_version", "dataset_version") if not query.get(name)]
    if missing:
        raise InvalidInput(
            f"A launch into project {project} names its registered versions; {' and '.join(missing)} missing.",
            hint="Register them (bashgym model register, bashgym dataset register) and name them, so the run is "
            "fully identified; or send a complete tracking_context instead.",
        )
    if payload.get("base_model"):
        raise InvalidInput("base_model comes from model_version in a launch that names its project; drop it.")
    ledger, ws = reach.ledger, reach.workspace
    principal.require("ledger.read", workspace_id=ws, project_id=project)
    model = await _registered(
        ledger.get_model_version(ws, project, query["model_version"]),
        f"bashgym model register --project {project} --model ID --version {query['model_version']} --hub-id HUB_ID "
        "(or --dir DIR)",
    )
    dataset = await _registered(
        ledger.get_dataset_version(ws, project, query["dataset_version"]),
        f"bashgym dataset register --project {project} --dataset ID --version {query['dataset_version']} --file FILE",
    )
    check_kind(model, str(payload.get("method") or payload.get("strategy") or ""))
    base_model = await base_model_of(reach, project, model) if upstream is None else hub_model_for(model, upstream)
    experiment = await named_experiment(ledger, ws, project, query.get("experiment"))
    target = upstream.target if upstream else str(payload.get("compute_target") or "local")
    context = await registered_context(
        ledger, ws, project, model=model, dataset=dataset, experiment=experiment, environment=environment_id(target)
    )
    _, missing = context_in_workspace(context, ws)
    if missing:  # a launch that names its project is official, or refused: never `unassigned` by accident
        raise InvalidInput(
            f"Project {project}'s records leave the run's tracking context incomplete ({', '.join(missing)} "
            f"empty; experiment {experiment['experiment_id']!r}): the run would be recorded under `unassigned`.",
            hint=f"Name an experiment that states its objective and task type (bashgym experiment create --project "
            f"{project} --id E --name N --objective TEXT --task-type TYPE), or leave experiment out for the "
            "project's ad-hoc one.",
            details={"missing_context_fields": missing},
        )
    return {**payload, "base_model": base_model, "tracking_context": context}


def hub_model_for(model: dict[str, Any], upstream: Upstream) -> str:
    """The Hub repo an upstream job trains from for a model version; a version whose files are on this host (uploaded,
    a data root's directory, a run's model) is refused: nothing sends them upstream."""
    source = str(model["source_uri"])
    if not source.startswith(HUB):
        version, project = model["model_version_id"], model["project_id"]
        raise InvalidInput(
            f"Model version {version} is {source!r}, files on this daemon's host; {upstream.name} downloads its base "
            "model from the Hugging Face Hub and cannot read them.",
            hint=f"Push the model to a private Hub repo and register that (bashgym model register --project {project} "
            f"--model {model['model_id']} --version V --hub-id ORG/NAME --revision SHA), then name that version; or "
            f"train {version} here (bashgym training start --project {project} --model-version {version} ...).",
            details={"field": "model_version", "source_uri": source},
        )
    return hub_repo(model)


# What each method trains from: a retriever from a retriever, a reward model from a causal LM (its head is new) or
# a reward model (trained further), every policy method from a causal LM.
TRAINS_FROM = {"embedding_retriever": {"embedding_retriever"}, "reward_model": {"causal_lm", "reward_model"}}


def check_kind(model: dict[str, Any], method: str) -> None:
    method = METHOD_ALIASES.get(method.lower(), method.lower())
    kind = str(model.get("kind") or "causal_lm")
    allowed = TRAINS_FROM.get(method, {"causal_lm"})
    if method in METHODS and kind not in allowed:
        raise InvalidInput(
            f"Model version {model['model_version_id']} is a {kind}; method {method} trains from "
            f"{' or '.join(sorted(allowed))}.",
            hint="Name a model version of that kind (bashgym ledger context lists the project's models).",
        )


async def _registered(record: Awaitable[dict[str, Any]], register: str) -> dict[str, Any]:
    """The version record, or NotFound saying how to register it."""
    try:
        return await record
    except NotFound as exc:
        raise NotFound(exc.message, hint=f"Register it first: {register}; then launch with that version.") from exc


async def dataset_version_path(
    principal: Principal, reach: Reach, payload: dict[str, Any], query: Mapping[str, str], version: str
) -> str:
    """Where a registered dataset version's stored content is (`?dataset_version=`), in the project named by
    `?dataset_project=` or the tracking context."""
    context = context_of(payload) or {}
    project = query.get("dataset_project") or context.get("project_id")
    if not project:
        raise InvalidInput(
            "dataset_version needs its project: name it with dataset_project or in the tracking context.",
            hint="bashgym training start --dataset-version V --dataset-project P ...",
        )
    project = check_identifier(str(project), field="dataset_project")
    principal.require("ledger.read", workspace_id=reach.workspace, project_id=project)
    record = await reach.ledger.get_dataset_version(reach.workspace, project, version)
    return str(await held_blob(reach, project, str(record["content_digest"])))
