"""`python -m bashgym.trainers.external_job --workdir DIR [--request FILE]`: one training run on rented compute.

The command a Hugging Face Job, a SkyPilot task or a dstack task runs. It trains exactly as the local lane does
(`python -m bashgym.trainers <run_dir>`, its lines streamed to this process's output, which the upstream keeps as
the job's logs), then, when the job names a Hub repo, pushes the run's evidence there before it exits:

- the kept model files (final/, merged/ when kept), each listed with its sha256 in model_profile.json;
- metrics.jsonl (every logged point), effective_config.json, the tail of training.log;
- bashgym-run.json: the job id, the digest of the request it was given, the dataset's digest, the exit code.

The request comes from --request or from $BASHGYM_JOB_REQUEST (JSON). The dataset is the file the request names,
or, with $BASHGYM_DATASET_REPO, a file of a Hub dataset repo ($BASHGYM_DATASET_FILE, $BASHGYM_DATASET_REVISION,
$BASHGYM_DATASET_EVAL_FILE) downloaded first. The Hub token is read from $HF_TOKEN, a secret the upstream injects;
it never appears in an argument, a log line or a pushed file. The push goes only into a private repo created for
the run's project (trainers/hub.py's owner marker), so a job cannot write into someone else's repo.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bashgym.trainers.contracts.external_job import (
    DATASET_EVAL_FILE_ENV,
    DATASET_FILE_ENV,
    DATASET_REPO_ENV,
    DATASET_REVISION_ENV,
    EVIDENCE_FILE,
    EVIDENCE_FILES,
    EVIDENCE_SCHEMA,
    JOB_ID_ENV,
    LOG_TAIL_FILE,
    PROFILE_FILE,
    PUSH_REPO_ENV,
    PUSHED_PREFIX,
    REQUEST_ENV,
)

_LOG_TAIL_LINES = 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bashgym.trainers.external_job")
    parser.add_argument("--workdir", type=Path, required=True, help="where the run directory is made")
    parser.add_argument("--request", type=Path, help="training request JSON (default: $BASHGYM_JOB_REQUEST)")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    try:
        request = _read_request(args.request, env)
        # The digest of the request as the job was given it: the daemon recorded the same digest at submission.
        request_digest = _digest_text(_canonical(request))
        run_dir = args.workdir.resolve() / "run"
        # A fresh run directory: a machine that ran an earlier job keeps its files, and metrics.jsonl appends.
        for stale in (run_dir, run_dir.parent / "data"):
            shutil.rmtree(stale, ignore_errors=True)
        run_dir.mkdir(parents=True)
        request = _with_data(request, run_dir, env)
    except (OSError, ValueError) as exc:
        print(f"bashgym: the job cannot start: {exc}", flush=True)
        return 2
    (run_dir / "request.json").write_text(json.dumps(request, indent=2))
    print(f"bashgym: training {request['method']} on {request['base_model']}", flush=True)
    code = subprocess.call([sys.executable, "-u", "-m", "bashgym.trainers", str(run_dir)])
    _print_log_tail(run_dir)
    evidence = {
        "schema": EVIDENCE_SCHEMA,
        "job_id": env.get(JOB_ID_ENV, ""),
        "request_digest": request_digest,
        "dataset_sha256": _digest_file(Path(request["dataset_path"])),
        "exit_code": code,
    }
    (run_dir / EVIDENCE_FILE).write_text(json.dumps(evidence, indent=2))
    print(f"bashgym: trainer exited with code {code}", flush=True)
    if code != 0:
        return code
    repo = env.get(PUSH_REPO_ENV, "")
    if not repo:
        return 0
    try:
        pushed = push_run(run_dir, request, repo, env)
    except Exception as exc:  # any failure to push fails the job, saying why
        print(f"bashgym: the run trained but its evidence could not be pushed to {repo}: {exc}", flush=True)
        return 3
    print(f"{PUSHED_PREFIX}{pushed['repo_id']}@{pushed['commit_sha']}", flush=True)
    return 0


def push_run(run_dir: Path, request: dict[str, Any], repo: str, env: dict[str, str]) -> dict[str, str]:
    """Upload the kept model files and the evidence into the project's private repo in one commit."""
    from bashgym.trainers.contracts.request import TrainingRequest
    from bashgym.trainers.hub import TOKEN_ENV, _target_repo
    from huggingface_hub import HfApi

    token = env.get(TOKEN_ENV)
    if not token:
        raise RuntimeError(f"no Hugging Face token in ${TOKEN_ENV}; the job must get it as a secret")
    profile = json.loads((run_dir / PROFILE_FILE).read_text())
    tail = (run_dir / "training.log").read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    (run_dir / LOG_TAIL_FILE).write_text("\n".join(tail) + "\n")
    typed = TrainingRequest.model_validate({**request, "hf_repo_name": repo, "hf_private": True, "auto_push_hf": False})
    api = HfApi(endpoint=env.get("HF_ENDPOINT"), token=token)
    repo_id = _target_repo(api, typed)
    patterns = [entry["path"] for entry in profile["files"]] + [
        name for name in EVIDENCE_FILES if (run_dir / name).exists()
    ]
    commit = api.upload_folder(
        repo_id=repo_id,
        folder_path=str(run_dir),
        allow_patterns=patterns,
        commit_message=f"BashGym {request['method']} run {env.get(JOB_ID_ENV, '')}".strip(),
    )
    return {"repo_id": repo_id, "commit_sha": str(commit.oid)}


def _read_request(path: Path | None, env: dict[str, str]) -> dict[str, Any]:
    text = path.read_text() if path is not None else env.get(REQUEST_ENV, "")
    if not text:
        raise ValueError(f"no request: pass --request FILE or set ${REQUEST_ENV}")
    request = json.loads(text)
    if not isinstance(request, dict):
        raise ValueError("the request is not a JSON object")
    return request


def _with_data(request: dict[str, Any], run_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    """The request with its dataset paths pointing at files on this machine (downloaded from the Hub if named)."""
    repo = env.get(DATASET_REPO_ENV, "")
    if not repo:
        return request
    from huggingface_hub import hf_hub_download

    revision = env.get(DATASET_REVISION_ENV) or "main"
    data_dir = run_dir.parent / "data"
    names = {"dataset_path": env.get(DATASET_FILE_ENV) or "train.jsonl"}
    if env.get(DATASET_EVAL_FILE_ENV):
        names["eval_dataset_path"] = env[DATASET_EVAL_FILE_ENV]
    located = {
        field: hf_hub_download(
            repo, name, repo_type="dataset", revision=revision, local_dir=data_dir, token=env.get("HF_TOKEN")
        )
        for field, name in names.items()
    }
    print(f"bashgym: dataset {repo}@{revision} downloaded", flush=True)
    return {**request, **located}


def _print_log_tail(run_dir: Path) -> None:
    """The trainer writes its log to training.log; the upstream keeps this process's output as the job's logs."""
    log = run_dir / "training.log"
    if log.exists():
        for line in log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]:
            print(line, flush=True)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _digest_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
