"""`bashgym run download`: a run's artifacts onto this machine, one, a folder of them or all, each streamed to disk
and checked against its recorded sha256; a file already there with that digest is left as it is. `bashgym eval
download`: a measured result's attempts file (every sample whole), checked against the digest the result records."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bashgym.cli.output import progress_bar
from bashgym.cli.registry import Ctx, command, done
from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.tracking import check_artifact_name

RUNS = "bashgym://runs/"


def _download_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run id")
    parser.add_argument(
        "path", nargs="?", default="",
        help="an artifact's path (after bashgym://runs/RUN/ in its uri) or a folder of them (model/); all if left out",
    )  # fmt: skip
    parser.add_argument("--project", required=True, help="the run's project")
    parser.add_argument("--out", type=Path, help="folder to write into, each artifact at its path (default: ./RUN)")


@command("run", "download", help="download a run's artifacts, checked against their sha256")(_download_args)
async def run_download(ctx: Ctx) -> int:
    a = ctx.args
    params = {"workspace": ctx.workspace}
    run = await ctx.client.request("GET", f"/v1/projects/{a.project}/runs/{a.run}", params=params)
    chosen = chosen_artifacts(run, a.path)
    out: Path = a.out or Path(a.run)
    files = []
    total = sum(int(f["size_bytes"]) for f in chosen)
    with progress_bar(total, "artifacts", shown=not ctx.as_json, in_bytes=True) as advance:
        for artifact in chosen:
            target = target_of(out, artifact["path"])
            if target.is_file() and _sha256(target) == artifact["sha256"]:
                advance(int(artifact["size_bytes"]))
                files.append({**artifact, "status": "unchanged", "file": str(target)})
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            route = f"/v1/projects/{a.project}/runs/{a.run}/artifacts/{quote(artifact['path'])}"
            await ctx.client.download(route, target, sha256=artifact["sha256"], params=params, advance=advance)
            files.append({**artifact, "status": "downloaded", "file": str(target)})
    summary = {
        "run_id": a.run,
        "out": str(out),
        "downloaded": sum(f["status"] == "downloaded" for f in files),
        "unchanged": sum(f["status"] == "unchanged" for f in files),
        "bytes": sum(int(f["size_bytes"]) for f in files if f["status"] == "downloaded"),
        "files": files,
    }
    if ctx.as_json:
        return done(ctx, summary)
    return done(ctx, files, columns=["path", "status", "size_bytes", "sha256"], title=f"Run {a.run} into {out}")


def _attempts_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("result", help="a measured evaluation result's id (bashgym eval results)")
    parser.add_argument("--project", required=True, help="the result's project")
    parser.add_argument("--out", type=Path, help="file to write (default: ./RESULT-attempts.jsonl)")


@command("eval", "download", help="download a measured result's attempts file (every sample), checked by sha256")(
    _attempts_args
)
async def eval_download(ctx: Ctx) -> int:
    a = ctx.args
    params = {"workspace": ctx.workspace}
    view = await ctx.client.request("GET", f"/v1/projects/{a.project}/eval-results/{a.result}", params=params)
    held = view.get("attempts_file")
    if not held:
        raise NotFound(
            f"Result {a.result} has no attempts file to download: {view.get('samples_note')}",
            hint=f"See the project's measured results with bashgym eval results --project {a.project}.",
        )
    target: Path = a.out or Path(f"{a.result}-attempts.jsonl")
    status = "unchanged"
    if not (target.is_file() and _sha256(target) == held["sha256"]):
        target.parent.mkdir(parents=True, exist_ok=True)
        route = f"/v1/projects/{a.project}/eval-results/{a.result}/attempts"
        await ctx.client.download(route, target, sha256=held["sha256"], params=params)
        status = "downloaded"
    summary = {"result_id": a.result, "file": str(target), "sha256": held["sha256"], "status": status,
               "size_bytes": target.stat().st_size}  # fmt: skip
    return done(ctx, summary, title=f"Attempts of {a.result}")


def chosen_artifacts(run: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """The run's artifacts at `path` (one artifact), under it (a folder), or all of them (no path), each once."""
    start = f"{RUNS}{run['run_id']}/"
    found: dict[str, dict[str, Any]] = {}
    for record in run.get("artifacts") or []:
        uri = str(record["uri"])
        if uri.startswith(start):
            name = uri.removeprefix(start)
            found.setdefault(name, {"path": name, "sha256": record["sha256"], "size_bytes": record["size_bytes"]})
    if path in found:
        return [found[path]]
    folder = path.rstrip("/") + "/" if path else ""
    chosen = [found[name] for name in sorted(found) if name.startswith(folder)]
    if not chosen:
        raise NotFound(
            f"Run {run['run_id']} recorded no artifact {'at or under ' + repr(path) if path else 'to download'}.",
            hint=f"See its artifacts with bashgym run show --project {run['project_id']} {run['run_id']}.",
        )
    return chosen


def target_of(out: Path, path: str) -> Path:
    """Where an artifact's file goes under `out`: its recorded path, refused when it would leave `out` (a record's
    path is whatever a writer of the project recorded)."""
    try:
        check_artifact_name(path)
    except InvalidInput as exc:
        raise InvalidInput(
            f"{exc.message} Not written under {out}.", hint="Download the run's other artifacts by path."
        ) from None
    target = out / path
    if not target.resolve().is_relative_to(out.resolve()):
        raise InvalidInput(
            f"Artifact {path!r} would be written outside {out} through a link there; nothing was written."
        )
    return target


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
