"""Where a registered model version's files are on this host, for training, evaluation and export.

A version points at its files in one of four ways: `file://DIR` (a directory on the daemon's host),
`bashgym://runs/RUN` (a run's kept model), `bashgym://models/ID` (files copied into the content store
by `bashgym model register --dir`), or `hf://ORG/NAME` (a hub id, resolved by the trainer). Stored files
are materialised once, as hard links to their blobs, into `$BASHGYM_HOME/models/<ws>/<project>/<version>/`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from bashgym.client.errors import RuleRejected
from bashgym.client.specs import ModelVersionSpec
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.settings import Settings

RUNS = "bashgym://runs/"
STORED = "bashgym://models/"
HUB = "hf://"
COMPLETE = ".bashgym-complete"  # written last: a directory without it is rebuilt


def kind_of_method(method: str) -> str:
    """The kind of model a run of `method` keeps: the workflows keep their own, every direct method a causal LM."""
    return method if method in {"reward_model", "embedding_retriever"} else "causal_lm"


def run_model_spec(run: dict[str, Any], *, version_id: str, model_id: str) -> ModelVersionSpec:
    """A completed run's kept model as a model version: its files by digest, its lineage, its kind."""
    if run["status"] != "completed":
        raise RuleRejected(
            f"Run {run['run_id']} is {run['status']}; only a completed run's model can be registered.",
            hint="Wait for it to complete (bashgym training status RUN).",
        )
    if not run.get("artifacts"):
        raise RuleRejected(f"Run {run['run_id']} registered no artifacts; there is no model to register.")
    prefix = f"{RUNS}{run['run_id']}/"
    return ModelVersionSpec.model_validate(
        {
            "model_version_id": version_id[:128],
            "model_id": model_id,
            "source_uri": f"{RUNS}{run['run_id']}",
            "parent_version_id": run.get("model_version_id"),
            "kind": kind_of_method(str(run.get("method"))),
            "files": [
                {"path": a["uri"].removeprefix(prefix), "sha256": a["sha256"], "size_bytes": a["size_bytes"]}
                for a in run["artifacts"]
            ],
        }
    )


def run_model_dir(settings: Settings, run_id: str) -> Path:
    """A run's model: its merged weights when it kept them, else its final adapter."""
    run_dir = settings.runs_dir / run_id
    merged = run_dir / "merged"
    return merged if merged.is_dir() else run_dir / "final"


def local_model_dir(settings: Settings, blobs: BlobStore, ws: str, project: str, record: dict[str, Any]) -> Path | None:
    """The version's directory on this host, or None for a hub id (the trainer downloads it). Blocking."""
    source = str(record["source_uri"])
    if source.startswith("file://"):
        return Path(source.removeprefix("file://"))
    if source.startswith(RUNS):
        return run_model_dir(settings, source.removeprefix(RUNS))
    if source.startswith(STORED):
        return _materialise(settings, blobs, ws, project, record)
    return None


def base_model_of(settings: Settings, blobs: BlobStore, ws: str, project: str, record: dict[str, Any]) -> str:
    """What a training request's base_model names for this version: its local directory or its hub id."""
    directory = local_model_dir(settings, blobs, ws, project, record)
    if directory is not None:
        return str(directory)
    return str(record["source_uri"]).removeprefix(HUB)


def _materialise(settings: Settings, blobs: BlobStore, ws: str, project: str, record: dict[str, Any]) -> Path:
    target = settings.home / "models" / ws / project / str(record["model_version_id"])
    if (target / COMPLETE).is_file():
        return target
    files = record.get("files") or []
    missing = [f["path"] for f in files if not blobs.has(f["sha256"])]
    if not files or missing:
        raise RuleRejected(
            f"Model version {record['model_version_id']} has no stored content here"
            + (f" ({', '.join(missing[:5])} missing)." if missing else "."),
            hint="Register it again with bashgym model register --dir DIR.",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        for entry in files:
            relative = PurePosixPath(entry["path"])
            if relative.is_absolute() or ".." in relative.parts:
                raise RuleRejected(f"Model file path {entry['path']!r} leaves its directory.")
            placed = building / relative
            placed.parent.mkdir(parents=True, exist_ok=True)
            blob = blobs.path_for(entry["sha256"])
            try:
                os.link(blob, placed)  # the blob store never rewrites a blob, so a link is as good as a copy
            except OSError:
                shutil.copyfile(blob, placed)
        (building / COMPLETE).write_text(str(record["model_version_id"]) + "\n")
        shutil.rmtree(target, ignore_errors=True)  # an earlier, interrupted build
        building.rename(target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return target
