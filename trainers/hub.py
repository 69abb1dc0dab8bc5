"""Hugging Face Hub upload of a finished run's artifact: private by default, never an invented name.

The token is read from the environment by name (HF_TOKEN) and never printed; the repository id and
the commit sha are recorded in run_state.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bashgym.trainers.rundir import RunDirectory
from bashgym.trainers.specs import TrainingRequest

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
    kind, folder = choose_artifact(run, request)
    from huggingface_hub import HfApi

    api = HfApi(endpoint=env.get("HF_ENDPOINT"), token=token)
    repo = api.create_repo(request.hf_repo_name, private=request.hf_private, exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo.repo_id,
        folder_path=str(folder),
        commit_message=f"BashGym {request.strategy} run {run.root.name} ({kind})",
    )
    return {"repo_id": repo.repo_id, "commit_sha": commit.oid, "artifact": kind, "private": request.hf_private}
