"""The model a run trains on is the model version its tracking context names: one check, shared by `training plan`
and launch, as the context's dataset digest is held to the data's sha256.

A context that names a version its project recorded is held to that record: its model_config_digest must be the
one recorded (or, for a version that records none, the sha256 of its source_uri, as a composed context states), and
base_model must be what the version is. What that means depends on what the version recorded:

- files (`model register --dir`, a run's model): base_model is a directory whose every file has the recorded
  sha256, with none missing and none added;
- no files, a Hub repo (`model register --hub-id`): base_model is that repo id; the trainer downloads its files,
  which nothing records, so only the id is checked;
- no files, a `file://` directory: base_model is that directory; its files are not recorded, so not checked;
- no files otherwise (a version an earlier launch recorded from its context): only the context's claims are
  compared with the recorded ones.

A context naming a version the project has not recorded makes the launch record it from the context's claims, of
which its model_config_digest must be the sha256 of base_model's config.json (a directory on this host), and with
the sha256 of each of base_model's files (`new_version_files`): later runs naming it are held to those files, so
two models of one config (the same shape, other weights) are told apart. A version an earlier launch recorded from
a context before files were recorded this way (or from a Hub id, or on another lane) is held to its claims alone.
The run's config records which check applied (`model_check`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from pathlib import Path
from typing import Any, Literal

from bashgym.client.errors import NotFound, RuleRejected
from bashgym.client.redaction import redact_text
from bashgym.client.specs import FileDigest, TrackingContext, context_in_workspace
from bashgym.client.validation import hub_repo_of
from bashgym.daemon.blobs import file_digest
from bashgym.daemon.evidence.sources import FILE, RUNS, differing_files, files_of, kept_files
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.request import TrainingRequest

ModelCheck = Literal["files", "hub_repo", "directory", "config_digest", "new_version"]
SHOWN = 8  # differing files named in a refusal; the rest are counted


async def check_model_identity(ledger: Ledger, workspace: str, request: TrainingRequest) -> ModelCheck | None:
    """Refuse a launch whose base_model or model_config_digest is not the model version its context names; answer
    which check applied (None: no context, so no version is claimed)."""
    context, _ = context_in_workspace(request.tracking_context, workspace)
    if context is None:
        return None
    local = request.lane == "local"  # elsewhere base_model names the device's files, which are checked there
    version: dict[str, Any] | None = None
    with contextlib.suppress(NotFound):
        version = await ledger.get_model_version(workspace, context.project_id, context.model_version_id)
    if version is None:
        # The launch records the version from the context: its config digest must be base_model's own.
        new = []
        if local:
            new = await asyncio.to_thread(_config_problems, request.base_model, context.model_config_digest, context)
        if new:
            raise RuleRejected(
                " ".join(new),
                hint=_hint(context, request.base_model),
                details={"reasons": new, "model_version_id": context.model_version_id},
            )
        return "new_version"
    check, problems = await asyncio.to_thread(_files_problems, request.base_model, version)
    if check == "config_digest" and local:  # the claims alone were compared: the config.json loaded is too
        problems += await asyncio.to_thread(
            _config_problems, request.base_model, expected_config_digest(version), context
        )
    problems = [*_claim_problems(context, version), *problems]
    if problems:
        raise RuleRejected(
            " ".join(problems),
            hint=_hint(context, request.base_model),
            details={"reasons": problems, "model_version_id": context.model_version_id},
        )
    return check


async def new_version_files(workspace: str, request: TrainingRequest) -> list[FileDigest]:
    """The files a model version a launch's context names for the first time is recorded with: base_model's (a
    directory on this host), so that later runs naming the version are held to these weights, not only to their
    config. None for a Hub id or another lane's model: there the context's claims stand."""
    context, _ = context_in_workspace(request.tracking_context, workspace)
    directory = Path(request.base_model)
    if context is None or request.lane != "local" or not directory.is_absolute():
        return []
    return await asyncio.to_thread(_directory_files, directory)


def _directory_files(directory: Path) -> list[FileDigest]:
    """Each file of a model directory by its relative path, with its sha256 and size. Blocking: it hashes them."""
    if not directory.is_dir():
        return []
    return [
        FileDigest(path=name, sha256=sha256, size_bytes=size)
        for name, path in files_of(directory).items()
        for sha256, size in [file_digest(path)]
    ]


def expected_config_digest(version: dict[str, Any]) -> str:
    """The model_config_digest a context naming `version` states: the recorded one, or the sha256 of its source_uri
    where it recorded none (a Hub repo, a run's model), as launch.resolve composes it."""
    return str(version["config_digest"] or hashlib.sha256(str(version["source_uri"]).encode()).hexdigest())


def _claim_problems(context: TrackingContext, version: dict[str, Any]) -> list[str]:
    """What the context states about the version that its record does not."""
    vid, expected = context.model_version_id, expected_config_digest(version)
    problems = []
    if context.model_config_digest != expected:
        source = "recorded" if version["config_digest"] else "the sha256 of its source_uri, as it records no config"
        problems.append(
            f"The tracking context gives model_config_digest {context.model_config_digest[:12]} for model version "
            f"{vid!r}, whose digest is {expected[:12]} ({source})."
        )
    for field, stated, recorded in (
        ("model_id", context.model_id, version["model_id"]),
        ("model_source_uri", redact_text(context.model_source_uri), version["source_uri"]),
    ):
        if stated != recorded:
            problems.append(f"The tracking context gives {field} {stated!r} for model version {vid!r}: {recorded!r}.")
    return problems


def _config_problems(base_model: str, expected: str, context: TrackingContext) -> list[str]:
    """How base_model's config.json differs from the model config digest `expected` (a context's claim for a new
    version, or a version recorded from one): a made-up digest, or another model's. Blocking: it hashes the file."""
    config = Path(base_model) / "config.json"
    if not (Path(base_model).is_absolute() and config.is_file()):
        return []  # a Hub id: the trainer downloads it, and no file here says what its config is
    found = hashlib.sha256(config.read_bytes()).hexdigest()
    if found == expected:
        return []
    return [
        f"base_model {base_model} has config.json of sha256 {found[:12]}, and the tracking context's model version "
        f"{context.model_version_id!r} has model_config_digest {expected[:12]}: the context does not describe the "
        "model this run loads."
    ]


def _files_problems(base_model: str, version: dict[str, Any]) -> tuple[ModelCheck, list[str]]:
    """Which check `version` allows, and how base_model fails it. Blocking: it hashes base_model's files."""
    vid, source = version["model_version_id"], str(version["source_uri"])
    if version.get("files"):
        return "files", _differing_from_recorded(base_model, version)
    repo = hub_repo_of(source)
    if repo is not None:
        loaded = "a directory" if base_model.startswith("/") else repr(base_model)
        why = f"Model version {vid!r} is Hub repo {repo} (its files are recorded nowhere, so its repo id is checked)"
        return "hub_repo", [] if base_model == repo else [f"{why}, and base_model is {loaded}."]
    if source.startswith(FILE):
        recorded = Path(source.removeprefix(FILE))
        same = base_model.startswith("/") and Path(base_model).resolve() == recorded.resolve()
        why = f"Model version {vid!r} is directory {recorded} (its files are not recorded, so the directory is checked)"
        return "directory", [] if same else [f"{why}, and base_model is {base_model!r}."]
    return "config_digest", []  # recorded from an earlier launch's context: its claims are all there is to compare


def _differing_from_recorded(base_model: str, version: dict[str, Any]) -> list[str]:
    """How base_model's files differ from those `version` recorded (a run's, by their path in its run directory)."""
    vid, files = version["model_version_id"], version["files"]
    recorded = {str(f["path"]): str(f["sha256"]) for f in files}
    if str(version["source_uri"]).startswith(RUNS):  # its model is the run's merged weights, or else its adapter
        recorded = kept_files(files, "merged" if any(p.startswith("merged/") for p in recorded) else "final")
    directory = Path(base_model)
    if not (directory.is_absolute() and directory.is_dir()):
        return [f"Model version {vid!r} is the files it recorded, and base_model {base_model!r} is no directory here."]
    differing = differing_files(directory, recorded)
    if not differing:
        return []
    more = f" and {len(differing) - SHOWN} more" if len(differing) > SHOWN else ""
    return [
        f"base_model {base_model} is not model version {vid!r}: its files differ from those the version recorded: "
        f"{', '.join(differing[:SHOWN])}{more}."
    ]


def _hint(context: TrackingContext, base_model: str) -> str:
    project, vid = context.project_id, context.model_version_id
    return (
        f"Train on model version {vid}'s own files (launch with ?project={project}&model_version={vid}, which loads "
        f"them, and states its digests), or register what base_model holds as a new version (bashgym model register "
        f"--project {project} --model ID --version NEW --dir {base_model}) and name that one in the tracking context."
    )
