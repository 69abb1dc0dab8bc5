"""Where a registered model version's files are on this host, for training, evaluation and export.

A version points at its files in one of four ways: `file://DIR` (a directory in a data root),
`bashgym://runs/RUN` (a run's kept model; a tracked run's `model` artifact, from blobs),
`bashgym://models/ID` (files copied into the content store
by `bashgym model register --dir`), or `hf://ORG/NAME` (a Hub repo id, resolved by the trainer); nothing else.
launch.confine.model_files confines each before anything reads it. Stored files are materialised once, as hard
links to their blobs, into `$BASHGYM_HOME/models/<ws>/<project>/<version>/`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from bashgym.client.errors import RuleRejected
from bashgym.client.imports import IMPORTED_LANE, MLFLOW
from bashgym.client.specs import ModelVersionSpec
from bashgym.client.tracking import TRACKED_SURFACE
from bashgym.client.validation import HUB, hub_repo_of
from bashgym.daemon.blobs import file_digest
from bashgym.daemon.settings import Settings
from bashgym.trainers.contracts.evaluation import GOLD, EvalRequest

RUNS = "bashgym://runs/"
STORED = "bashgym://models/"
FILE = "file://"
COMPLETE = ".bashgym-complete"  # written last: a directory without it is rebuilt
TRACKED_MODEL = "model"  # the artifact a tracked run's model is uploaded as (bashgym.track.transformers does)


def is_imported(run: dict[str, Any]) -> bool:
    """Whether the run was imported from another tracker (bashgym import mlflow): a record, never evidence."""
    return str((run.get("config") or {}).get("lane")) == IMPORTED_LANE or run.get("source_system") == MLFLOW


def check_not_imported(run: dict[str, Any]) -> None:
    """Refuse to take an imported run's model as evidence: BashGym holds its history, not its files."""
    if is_imported(run):
        raise RuleRejected(
            f"Run {run['run_id']} was imported from {run.get('source_system')}; BashGym holds its history, not a "
            "model it trained or measured, so it is never evidence on its own.",
            hint="Register the model it made (bashgym model register --hub-id or --dir), then evaluate that version; "
            "or train it again here, or track it with bashgym.track.",
            details={"run_id": run["run_id"], "source_system": run.get("source_system")},
        )


def kind_of_method(method: str) -> str:
    """The kind of model a run of `method` keeps: the workflows keep their own, every direct method a causal LM."""
    return method if method in {"reward_model", "embedding_retriever"} else "causal_lm"


def run_model_spec(run: dict[str, Any], *, version_id: str, model_id: str, kind: str | None = None) -> ModelVersionSpec:
    """A completed run's kept model as a model version: its files by digest, its lineage (parent: the version it
    trained from), its kind. A launched run's kind is what its method made; a tracked run's method is the script's
    own word, so its kind may be given (else it is inferred the same way) and its model is its `model` artifact."""
    check_not_imported(run)
    if run["status"] != "completed":
        raise RuleRejected(
            f"Run {run['run_id']} is {run['status']}; only a completed run's model can be registered.",
            hint=f"Wait for it to complete (bashgym run show {run['run_id']} --project {run['project_id']}).",
        )
    made = kind_of_method(str(run.get("method")))
    if kind is not None and kind != made and not is_tracked(run):
        raise RuleRejected(
            f"Run {run['run_id']} trained with method {run['method']}, so its model is a {made}, not a {kind}.",
            hint=f"Register it without a kind (bashgym model register --run {run['run_id']}), which takes {made}.",
        )
    files = run_files(run)
    if is_tracked(run):
        files = [f for f in files if str(f["path"]).startswith(f"{TRACKED_MODEL}/")]
    if not files:
        raise RuleRejected(f"Run {run['run_id']} registered no {what_is_kept(run)}; there is no model to register.")
    config = next((f["sha256"] for f in files if f["path"] == f"{kept_dir_name(run)}/config.json"), None)
    return ModelVersionSpec.model_validate(
        {
            "model_version_id": version_id[:128],
            "model_id": model_id,
            "source_uri": f"{RUNS}{run['run_id']}",
            "config_digest": config if is_tracked(run) else None,
            "parent_version_id": run.get("model_version_id"),
            "kind": kind or made,
            "files": files,
        }
    )


def is_tracked(run: dict[str, Any]) -> bool:
    """A run BashGym did not launch, recorded through bashgym.track: its model is what it uploaded."""
    return run.get("source_system") == TRACKED_SURFACE


def what_is_kept(run: dict[str, Any]) -> str:
    if is_tracked(run):
        return (
            f'`{TRACKED_MODEL}` artifact (log one with run.log_artifact(DIR, name="{TRACKED_MODEL}"); '
            "BashGymCallback does at train end)"
        )
    return "artifacts"


def kept_dir_name(run: dict[str, Any]) -> str:
    """The folder of a run's files that holds its model: a tracked run's `model` artifact, else `final` (or
    `merged` when it kept merged weights, which run_model_dir finds on disk)."""
    return TRACKED_MODEL if is_tracked(run) else "final"


def run_model_dir(settings: Settings, run_id: str) -> Path:
    """A launched run's model: its merged weights when it kept them, else its final adapter."""
    run_dir = settings.runs_dir / run_id
    merged = run_dir / "merged"
    return merged if merged.is_dir() else run_dir / "final"


def tracked_model_dir(settings: Settings, run: dict[str, Any], held: dict[str, Path]) -> Path:
    """A tracked run's `model` artifact as a directory, materialised once from its blobs into the run's directory
    (`held`: each file's sha256 to its blob, every one held by the run's project). Blocking."""
    files = [{"path": path, "sha256": sha256} for path, sha256 in kept_files(run_files(run), TRACKED_MODEL).items()]
    if not files:
        raise RuleRejected(
            f"Run {run['run_id']} logged no {what_is_kept(run)}.",
            hint="Evaluate a registered model version instead (--model-version).",
        )
    return materialised(settings.runs_dir / str(run["run_id"]) / TRACKED_MODEL, files, held, label=run["run_id"])


def kept_files(files: list[dict[str, Any]], directory: str) -> dict[str, str]:
    """The sha256 of each recorded file under `directory` (a run's `final` or `merged`), by its path there: what a
    run's kept model is made of, from the files its run or its version recorded by their path in the run."""
    prefix = f"{directory}/"
    return {str(f["path"]).removeprefix(prefix): str(f["sha256"]) for f in files if str(f["path"]).startswith(prefix)}


def run_files(run: dict[str, Any]) -> list[dict[str, Any]]:
    """A run's recorded artifacts as files by their path in its run directory."""
    prefix = f"{RUNS}{run['run_id']}/"
    return [
        {"path": a["uri"].removeprefix(prefix), "sha256": a["sha256"], "size_bytes": a["size_bytes"]}
        for a in run.get("artifacts") or []
    ]


def files_of(directory: Path) -> dict[str, Path]:
    """A model directory's files by their relative path, sorted, without the completion marker a materialised copy
    carries: what a version's files are compared with or recorded from."""
    found = (p for p in directory.rglob("*") if p.is_file() and p.name != COMPLETE)
    return {str(p.relative_to(directory)): p for p in sorted(found)}


def differing_files(directory: Path, recorded: dict[str, str]) -> list[str]:
    """Each file of `directory` that is not as `recorded` (sha256 by relative path) says so: missing, other bytes,
    or not recorded at all (a planted file is loaded too). Empty when the directory is exactly what was recorded.
    Blocking: it hashes every file."""
    found = files_of(directory)
    problems = []
    for path, sha256 in sorted(recorded.items()):
        if path not in found:
            problems.append(f"{path} (missing)")
        elif (actual := file_digest(found[path])[0]) != sha256:
            problems.append(f"{path} (sha256 {actual[:12]}, recorded {sha256[:12]})")
    return problems + [f"{path} (not recorded)" for path in sorted(found.keys() - recorded.keys())]


def stored_model_dir(settings: Settings, ws: str, project: str, record: dict[str, Any], held: dict[str, Path]) -> Path:
    """A stored version's directory, materialised once from its blobs: `held` maps each file's sha256 to its blob,
    every one held by the project (launch.confine.held_blob gives them). Blocking."""
    target = settings.home / "models" / ws / project / str(record["model_version_id"])
    if (target / COMPLETE).is_file():
        return target
    files = record.get("files") or []
    if not files:
        raise RuleRejected(
            f"Model version {record['model_version_id']} has no stored content here.",
            hint="Register it again with bashgym model register --dir DIR.",
        )
    return materialised(target, files, held, label=str(record["model_version_id"]))


def materialised(target: Path, files: list[dict[str, Any]], held: dict[str, Path], *, label: str) -> Path:
    """`target` holding `files` (relative path and sha256 each) as hard links to their blobs in `held`, built once:
    a directory without its completion marker is rebuilt. Blocking."""
    if (target / COMPLETE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        for entry in files:
            relative = PurePosixPath(entry["path"])
            if relative.is_absolute() or ".." in relative.parts:
                raise RuleRejected(f"Model file path {entry['path']!r} leaves its directory.")
            placed = building / relative
            placed.parent.mkdir(parents=True, exist_ok=True)
            blob = held[entry["sha256"]]
            try:
                os.link(blob, placed)  # the blob store never rewrites a blob, so a link is as good as a copy
            except OSError:
                shutil.copyfile(blob, placed)
        (building / COMPLETE).write_text(label + "\n")
        shutil.rmtree(target, ignore_errors=True)  # an earlier, interrupted build
        building.rename(target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return target


def hub_models_loaded(request: EvalRequest) -> list[str]:
    """The Hub repos an evaluator of `request` loads by id: an adapter's base (its adapter_config.json), and a
    full-weights run's reference model. Paths and the gold model name no repo. Blocking (it reads the config)."""
    named = [request.reference_model or ""]
    config = Path(request.model) / "adapter_config.json"
    if request.model != GOLD and config.is_file():
        # An unreadable config: the evaluator's own load says what is wrong with it.
        with contextlib.suppress(OSError, ValueError):
            named.append(str(json.loads(config.read_text()).get("base_model_name_or_path") or ""))
    return list(dict.fromkeys(n for n in named if hub_repo_of(HUB + n) is not None and not Path(n).exists()))
