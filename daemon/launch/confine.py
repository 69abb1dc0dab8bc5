"""The host paths and blobs a request names, confined before anything reads them.

A request reaches the daemon's host only through these: a file or directory inside a data root
(host_paths.HostPaths), or a blob its project holds (`bashgym://artifacts/sha256/<digest>`, the form the
CLI sends after uploading; held_blob is the only way a digest becomes bytes). A model is a hub id or one of
those, and so is every model version a launch resolves (model_files). Every path into a launch (training and
plan routes, evaluations, exports, model registration, campaign recipes and runs) passes through here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.models import BLOB_URI
from bashgym.client.validation import HUB, MODEL_SOURCES, hub_repo_of
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.evidence.sources import (
    FILE,
    RUNS,
    STORED,
    TRACKED_MODEL,
    is_tracked,
    kept_files,
    run_files,
    run_model_dir,
    stored_model_dir,
    tracked_model_dir,
)
from bashgym.daemon.host_paths import HostPaths
from bashgym.daemon.settings import Settings
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.fields import names_a_local_path

DATA_FIELDS = ("dataset_path", "eval_dataset_path")
MODEL_FIELDS = ("base_model", "teacher_model")


@dataclass(frozen=True)
class Reach:
    """What one request may reach on the daemon's host: its workspace's blobs that a project holds, and the roots."""

    settings: Settings
    ledger: Ledger
    blobs: BlobStore
    workspace: str

    @property
    def paths(self) -> HostPaths:
        return HostPaths(self.settings, workspace=self.workspace)


async def held_blob(reach: Reach, project: str, sha256: str) -> Path:
    """The one way a digest becomes bytes: the blob's path, when the request's project holds it. Knowing a digest
    is not a right to its bytes, so a blob not held there and one not stored at all get the same answer."""
    if not await reach.ledger.holds_blob(reach.workspace, project, sha256) or not reach.blobs.has(sha256):
        raise NotFound(
            f"Project {project!r} holds no uploaded file with sha256 {sha256[:12]}.",
            hint=f"Upload it for this project first: PUT /v1/blobs?project={project} (the CLI does this for you).",
        )
    return reach.blobs.path_for(sha256)


async def confine_request(
    reach: Reach, payload: dict[str, Any], project: str, *, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The payload with its data and model fields made safe: host paths confined, blobs checked and placed.
    Fields of the wrong type are left for the request model to refuse."""
    confined = dict(payload)
    for field in DATA_FIELDS:
        value = confined.get(field)
        if field not in skip and isinstance(value, str) and value:
            confined[field] = await data_reference(reach, value, field=field, project=project)
    for field in MODEL_FIELDS:
        value = confined.get(field)
        if field not in skip and isinstance(value, str) and value:
            confined[field] = model_reference(reach, value, field=field)
    return confined


async def data_reference(reach: Reach, value: str, *, field: str, project: str) -> str:
    """Where on this host the data `value` names may be read: a blob `project` holds, or a file in a data root."""
    if value.startswith(BLOB_URI):
        return str(await held_blob(reach, project, value.removeprefix(BLOB_URI)))
    return str(reach.paths.readable(value, field=field))


def model_reference(reach: Reach, value: str, *, field: str) -> str:
    """A model is a name the trainer or the lane resolves (a hub id `org/name`, a NeMo Customizer config) or a
    directory in a data root. A relative path is neither: whose working directory would it name?"""
    if value.startswith("/"):
        return str(reach.paths.readable(value, field=field))
    if value.startswith((".", "~")) or ".." in value.split("/") or "\\" in value:
        raise InvalidInput(
            f"`{field}` is {value!r}: name a hub model id (org/name) or an absolute path inside a data root.",
            hint="A model directory on your machine: register it (bashgym model register --dir) or copy it into "
            "$BASHGYM_HOME/data on the daemon's host.",
        )
    return value


async def check_model_source(reach: Reach, project: str, version: dict[str, Any]) -> None:
    """A model version's source, checked when it is registered as model_files checks it before its files are
    read (nothing is placed)."""
    await model_files(reach, project, version, place=False)


async def model_files(reach: Reach, project: str, version: dict[str, Any], *, place: bool = True) -> Path | None:
    """Where a model version's files are on this host (None for a Hub repo: the trainer downloads it), confined as a
    path a caller types, whenever the version was registered: a `file://` directory lies in a data root, a run's
    model is a run of this project (run directories are named by id alone), stored files are blobs the project
    holds (materialised here once when `place`), and `hf://` names a Hub repo id that is no path where trainers
    start. Any other source is refused, so a record made before these rules is held to them too."""
    source = str(version["source_uri"])
    if source.startswith(FILE):
        return reach.paths.readable(source.removeprefix(FILE), field="source_uri")
    if source.startswith(RUNS):
        run = await reach.ledger.get_run(reach.workspace, project, source.removeprefix(RUNS))  # NotFound elsewhere
        return await kept_model_dir(reach, project, run) if place else None
    if source.startswith(STORED):
        held = {str(f["sha256"]): await held_blob(reach, project, str(f["sha256"])) for f in version.get("files") or []}
        if not place:
            return None
        return await asyncio.to_thread(stored_model_dir, reach.settings, reach.workspace, project, version, held)
    hub_repo(version)
    return None


async def kept_model_dir(reach: Reach, project: str, run: dict[str, Any]) -> Path:
    """Where a run of `project` keeps its model on this host: a launched run's directory, or a tracked run's `model`
    artifact materialised from the blobs the project holds."""
    if not is_tracked(run):
        return await asyncio.to_thread(run_model_dir, reach.settings, str(run["run_id"]))
    files = kept_files(run_files(run), TRACKED_MODEL).values()
    held = {sha256: await held_blob(reach, project, sha256) for sha256 in files}
    return await asyncio.to_thread(tracked_model_dir, reach.settings, run, held)


async def base_model_of(reach: Reach, project: str, version: dict[str, Any]) -> str:
    """What a training request's base_model is for a model version: its confined directory here, or its Hub repo."""
    directory = await model_files(reach, project, version)
    return str(directory) if directory is not None else hub_repo(version)


def hub_repo(version: dict[str, Any]) -> str:
    """The Hub repo id of an `hf://` version; refused for any other source, and for an id that names a path where
    trainers start (transformers would load that path instead)."""
    source = str(version["source_uri"])
    repo = hub_repo_of(source)
    if repo is None:
        why = "names no Hub repo id" if source.startswith(HUB) else "is none of the accepted forms"
    elif names_a_local_path(repo):
        why = "names a Hub repo id that is also a path in the working directory where the daemon's trainers start"
    else:
        return repo
    raise InvalidInput(
        f"Model version {version['model_version_id']}: `source_uri` {source!r} {why}. A model version's source_uri is "
        f"{MODEL_SOURCES}.",
        hint="Register the model again in one of those forms (bashgym model register --hub-id ORG/NAME --revision "
        "SHA, or --dir DIR).",
        details={"field": "source_uri"},
    )
