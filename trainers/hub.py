"""Hugging Face Hub upload of a finished run's artifact: private by default, never an invented name.

The token is read from the environment by name (HF_TOKEN) and never printed; the repository id and
the commit sha are recorded in run_state.json.

The token can often write far more than this run should (an organisation's public repositories), so the
target is checked, not the flag: a repository is pushed into only if this trainer created it for the run's
project (it then holds that project's owner marker) or an earlier run of the same project did, and a private
push never goes into a repository that is public, checked again after creating it. The daemon has already
limited the namespace to those the operator allows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bashgym.trainers.contracts.external_job import owner_marker
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.rundir import RunDirectory

TOKEN_ENV = "HF_TOKEN"


class UploadFailed(RuntimeError):
    """The requested upload cannot happen as asked; the message says what to change."""


def choose_artifact(run: RunDirectory, request: TrainingRequest) -> tuple[str, Path]:
    """`auto` takes merged weights when present, else the adapter; `merged` must exist."""
    match request.hf_upload_artifact:
        case "merged":
            if not run.merged_dir.exists():
                raise UploadFailed(
                    "hf_upload_artifact is `merged`, but this run has no merged weights; use "
                    "artifact_retention `deployable` (with use_lora) or upload `adapter`."
                )
            return "merged", run.merged_dir
        case "adapter":
            return "adapter", run.final_dir
        case _:
            return ("merged", run.merged_dir) if run.merged_dir.exists() else ("adapter", run.final_dir)


def push_to_hub(run: RunDirectory, request: TrainingRequest, env: dict[str, str]) -> dict[str, Any]:
    if not request.hf_repo_name:
        raise UploadFailed("auto_push_hf needs hf_repo_name; BashGym never invents a repository name.")
    token = env.get(TOKEN_ENV)
    if not token:
        raise UploadFailed(f"auto_push_hf needs a Hugging Face token in ${TOKEN_ENV}; set it for the trainer.")
    if not request.hf_repo_owner:
        raise UploadFailed("This request names no owning project (hf_repo_owner); launch it through the daemon.")
    kind, folder = choose_artifact(run, request)
    from huggingface_hub import HfApi

    api = HfApi(endpoint=env.get("HF_ENDPOINT"), token=token)
    repo_id = _target_repo(api, request)
    commit = api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        commit_message=f"BashGym {request.method} run {run.root.name} ({kind})",
    )
    return {"repo_id": repo_id, "commit_sha": commit.oid, "artifact": kind, "private": request.hf_private}


def _target_repo(api: Any, request: TrainingRequest) -> str:
    """The repository to push into, created for this run's project if it does not exist; UploadFailed if it
    exists and is not this project's, or would expose a private run publicly."""
    name, owner = str(request.hf_repo_name), str(request.hf_repo_owner)
    marker = owner_marker(owner)
    info = _repo_info(api, name)
    if info is None:
        created = _create(api, name, private=request.hf_private)
        info = _repo_info(api, created)
        if info is None:
            raise UploadFailed(f"The Hub created {created} but does not show it; nothing was uploaded.")
        _check_visibility(info, request)
        body = json.dumps({"schema": "bashgym.hub-owner/v1", "owner": owner}).encode()
        api.upload_file(
            path_or_fileobj=body, path_in_repo=marker, repo_id=info.id, commit_message="BashGym: owner of this repo"
        )
        return str(info.id)
    _check_visibility(info, request)
    present = {sibling.rfilename for sibling in info.siblings or []}
    if marker not in present:
        raise UploadFailed(
            f"The Hub repository {info.id} exists and was not created for project {owner}; BashGym pushes only "
            "into repositories it created for the run's project. Nothing was uploaded."
        )
    return str(info.id)


def _repo_info(api: Any, repo_id: str) -> Any:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return api.repo_info(repo_id)
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code == 404:
            return None
        raise


def _create(api: Any, repo_id: str, *, private: bool) -> str:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return str(api.create_repo(repo_id, private=private, exist_ok=False).repo_id)
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code == 409:
            raise UploadFailed(
                f"The Hub repository {repo_id} appeared while this run created it; nothing was uploaded. "
                "Retry the push with a repository of this project's."
            ) from exc
        raise


def _check_visibility(info: Any, request: TrainingRequest) -> None:
    if request.hf_private and not info.private:
        raise UploadFailed(
            f"The Hub repository {info.id} is public, and this run asked for a private upload (hf_private); "
            "nothing was uploaded. Name a private repository of this project's."
        )
