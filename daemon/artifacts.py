"""A run's recorded artifacts as bytes to download: found through the ledger's records alone, checked against their
recorded sha256, served whole or as one byte range.

A caller names an artifact by its path in its `bashgym://runs/<run>/<path>` uri, and the path is only ever compared
with the run's records, never joined onto a directory as given. The bytes are the blob the project holds with that
digest (a tracked run's uploads), else the file of that recorded path in the run's own directory (a launched run's),
which must stay inside that directory once its links are followed. Bytes that no longer hash to the record are
refused, never served as the artifact.

An evaluation's per-sample file (its evaluator's attempts.jsonl) downloads the same way, named by its result: only a
measured result's, whose digest the daemon itself recorded (an importer's details name no file), under the authority
that reads the result's tasks, and never while a line of it looks like a credential (the page shows those redacted).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import quote

from bashgym.client.errors import Conflict, Forbidden, NotFound
from bashgym.client.redaction import contains_secret
from bashgym.client.tracking import check_artifact_name
from bashgym.daemon.blobs import CHUNK, BlobStore
from bashgym.daemon.evidence.sources import RUNS, is_imported, is_tracked
from bashgym.ledger.store import Ledger
from starlette.responses import Response, StreamingResponse

SEND_CHUNK = 256 * 1024  # bounded reads: a 10 GB checkpoint streams in pieces of this size
# Artifacts are sent as bytes to save, whatever they hold: an HTML file must not run as a page of the daemon.
DOWNLOAD_HEADERS = {
    "Content-Type": "application/octet-stream",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "sandbox; default-src 'none'",
    "Accept-Ranges": "bytes",
}
RANGE = re.compile(r"bytes=(\d*)-(\d*)")
SHA256 = re.compile(r"[0-9a-f]{64}")
WITHHELD = "This suite is protected: its per-task rows and samples open only with eval.protected."


class ArtifactChanged(Conflict):
    code = "artifact_changed"


@dataclass(frozen=True)
class Artifact:
    """A recorded artifact, opened and verified: its record and a handle at offset 0."""

    record: dict[str, Any]
    path: str
    handle: BinaryIO
    size_bytes: int

    @property
    def sha256(self) -> str:
        return str(self.record["sha256"])


def recorded_artifact(run: dict[str, Any], path: str) -> dict[str, Any]:
    """The run's record of the artifact at `path`: its first one, as a name keeps its first content."""
    uri = f"{RUNS}{run['run_id']}/{check_artifact_name(path)}"
    for record in run.get("artifacts") or []:
        if record["uri"] == uri:
            return dict(record)
    raise NotFound(
        f"Run {run['run_id']} recorded no artifact {path!r}.",
        hint=f"See its artifacts with bashgym run show --project {run['project_id']} {run['run_id']}; download one "
        "by the path after bashgym://runs/<run>/ in its uri.",
    )


async def open_artifact(
    ledger: Ledger, blobs: BlobStore, runs_dir: Path, ws: str, project: str, run_id: str, path: str
) -> Artifact:
    """The artifact `path` of run `run_id` in the project, opened and verified against its record. NotFound for a
    run or artifact the caller's project does not hold; ArtifactChanged when its bytes no longer hash to the record."""
    run = await ledger.get_run(ws, project, run_id)  # NotFound for another project's or workspace's run
    record = recorded_artifact(run, path)
    sha256 = str(record["sha256"])
    if await ledger.holds_blob(ws, project, sha256) and blobs.has(sha256):
        source = blobs.path_for(sha256)
    elif is_tracked(run) or is_imported(run):
        raise NotFound(
            f"Artifact {path!r} of run {run_id} (sha256 {sha256[:12]}) has no bytes held by project {project!r} here.",
            hint="Log it again from the script that made it (run.log_artifact), or ask the operator whether the "
            "blob store was restored without it.",
        )
    else:
        source = await asyncio.to_thread(file_in_run, runs_dir / run_id, path)
    handle, size = await asyncio.to_thread(open_verified, source, record, label=f"{path!r} of run {run_id}")
    return Artifact(record, path, handle, size)


def held_attempts(blobs: BlobStore, record: dict[str, Any]) -> tuple[str | None, str]:
    """The digest of a result's attempts file where this daemon holds it for the result, else None; and why not."""
    digest = str((record.get("details") or {}).get("attempts_sha256") or "")
    if record.get("provenance") != "measured":
        return None, "Samples are kept for measured results only; this one was imported, with its importer's figures."
    if not SHA256.fullmatch(digest) or not blobs.has(digest):
        return None, "This result's attempts file is not held here: no samples to show."
    return digest, ""


async def open_attempts(
    ledger: Ledger, blobs: BlobStore, ws: str, project: str, result_id: str, *, may_see_protected: bool
) -> Artifact:
    """Result `result_id`'s attempts file, opened and verified against its recorded digest. NotFound for a result the
    project does not hold or one without a file here; Forbidden for a protected suite's without eval.protected;
    ArtifactChanged when the bytes changed or a line looks like a credential."""
    record = await ledger.eval_result(ws, project, result_id)
    if record["suite_id"] in await ledger.protected_suites(ws, project) and not may_see_protected:
        raise Forbidden(WITHHELD, hint="Ask a project lead for eval.protected, or read the result's summary.")
    digest, why = held_attempts(blobs, record)
    if digest is None:
        raise NotFound(f"Result {result_id}: {why}", hint=f"Read its figures at /v1/projects/{project}/eval-results/"
                       f"{result_id}; a measured result of the same suite has its samples.")  # fmt: skip
    source = blobs.path_for(digest)
    label = f"attempts file of result {result_id}"
    size = (await asyncio.to_thread(source.stat)).st_size
    handle, size = await asyncio.to_thread(open_verified, source, {"sha256": digest, "size_bytes": size}, label=label)
    if await asyncio.to_thread(_holds_credential, handle, digest):
        handle.close()
        raise ArtifactChanged(
            f"The {label} holds text shaped like a credential (a sample's command or output), so it is not served "
            "whole.",
            hint=f"Read its samples, redacted, on the result's page (/ui/p/{project}/evaluations/{result_id}).",
        )
    return Artifact({"sha256": digest, "size_bytes": size}, f"{result_id}-attempts.jsonl", handle, size)


# Digests of attempts files already scanned -> whether a line looked like a credential (content never changes).
_SCANNED: OrderedDict[str, bool] = OrderedDict()


def _holds_credential(handle: BinaryIO, digest: str) -> bool:
    """Whether a line of the file looks like a credential (client/redaction.py's patterns and the secret values
    this process holds); the handle is left at offset 0. Blocking."""
    if digest not in _SCANNED:
        _SCANNED[digest] = any(contains_secret(line.decode("utf-8", "replace")) for line in handle)
        handle.seek(0)
        while len(_SCANNED) > _VERIFIED_MAX:
            _SCANNED.popitem(last=False)
    return _SCANNED[digest]


def file_in_run(run_dir: Path, path: str) -> Path:
    """The file of a recorded path in a launched run's directory, its links followed, refused when they lead out
    of the directory. Blocking."""
    base = run_dir.resolve()
    target = (base / PurePosixPath(path)).resolve()
    if not target.is_relative_to(base) or target == base:
        raise ArtifactChanged(
            f"Artifact {path!r} of run {run_dir.name} is a link that leads out of its run directory; it is not served.",
            hint="Ask the operator to put the run's own file back in its directory.",
        )
    if not target.is_file():
        raise NotFound(
            f"Artifact {path!r} of run {run_dir.name} is recorded, but its file is no longer on this host.",
            hint="Ask the operator whether the run's directory was cleaned up or moved.",
        )
    return target


# (device, inode, size, mtime, ctime) of a file already hashed -> its sha256: a file rewritten in place changes its
# ctime, which no one can set back, so a hit is the same bytes and a second download need not hash them again.
_VERIFIED: OrderedDict[tuple[int, ...], str] = OrderedDict()
_VERIFIED_MAX = 4096


def open_verified(source: Path, record: dict[str, Any], *, label: str) -> tuple[BinaryIO, int]:
    """`source` opened (no link at its last step) once its bytes hash to `record`'s sha256 and size. Blocking."""
    handle = os.fdopen(os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb")
    try:
        stat = os.fstat(handle.fileno())
        key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        expected = str(record["sha256"])
        actual = _VERIFIED.get(key) or _digest(handle)
        if actual != expected or stat.st_size != int(record["size_bytes"]):
            raise ArtifactChanged(
                f"Artifact {label} is recorded with sha256 {expected} ({record['size_bytes']} bytes), but its bytes "
                f"here hash to {actual} ({stat.st_size} bytes): they changed after they were recorded, so they are "
                "not served as that artifact.",
                hint="Ask the operator to restore the file from a backup; a new version belongs under a new name.",
                details={"recorded_sha256": expected, "sha256": actual},
            )
        _VERIFIED[key] = actual
        _VERIFIED.move_to_end(key)
        while len(_VERIFIED) > _VERIFIED_MAX:
            _VERIFIED.popitem(last=False)
        handle.seek(0)
        return handle, stat.st_size
    except BaseException:
        handle.close()
        raise


def _digest(handle: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range (first, last byte, inclusive) a Range header asks of `size` bytes; None for the whole file (no
    header, one this does not read, or several ranges: the whole file is a valid answer to those). Raises
    ValueError when the range is unsatisfiable."""
    match = RANGE.fullmatch((header or "").strip())
    if match is None or not any(match.groups()):
        return None
    first, last = match.groups()
    if not first:  # bytes=-N: the last N bytes
        if int(last) == 0 or size == 0:
            raise ValueError(header)
        return max(0, size - int(last)), size - 1
    if int(first) >= size or (last and int(last) < int(first)):
        raise ValueError(header)
    return int(first), min(int(last), size - 1) if last else size - 1


def download_response(artifact: Artifact, headers: dict[str, str], *, extra: dict[str, str]) -> Response:
    """The artifact as a download: 200 whole, 206 one range, 304 for a matching If-None-Match, 416 for a range
    outside it. Its sha256 rides in `Repr-Digest` (RFC 9530, base64) and `X-Content-SHA256` (hex), and is its ETag."""
    etag = f'"{artifact.sha256}"'
    digest = base64.b64encode(bytes.fromhex(artifact.sha256)).decode()
    name = PurePosixPath(artifact.path).name
    common = {
        **extra,
        **DOWNLOAD_HEADERS,
        "ETag": etag,
        "Repr-Digest": f"sha-256=:{digest}:",
        "X-Content-SHA256": artifact.sha256,
        "Content-Disposition": f"attachment; filename=\"{_ascii(name)}\"; filename*=UTF-8''{quote(name, safe='')}",
    }
    size = artifact.size_bytes
    if etag in [tag.strip() for tag in headers.get("if-none-match", "").split(",")]:
        artifact.handle.close()
        return Response(status_code=304, headers={k: common[k] for k in ("ETag", "Repr-Digest", "X-Content-SHA256")})
    if_range = headers.get("if-range")
    try:
        wanted = byte_range(headers.get("range"), size) if if_range in (None, etag) else None
    except ValueError:
        artifact.handle.close()
        return Response(status_code=416, headers={**common, "Content-Range": f"bytes */{size}"})
    first, last = wanted or (0, size - 1)
    common["Content-Length"] = str(last - first + 1)
    if wanted is not None:
        common["Content-Range"] = f"bytes {first}-{last}/{size}"
    body = _chunks(artifact.handle, first, last - first + 1)
    return StreamingResponse(body, status_code=206 if wanted else 200, headers=common)


async def _chunks(handle: BinaryIO, offset: int, length: int) -> AsyncIterator[bytes]:
    """`length` bytes of `handle` from `offset`, read off the event loop in bounded chunks; the handle is closed
    when they are sent or the client goes."""
    try:
        await asyncio.to_thread(handle.seek, offset)
        while length > 0:
            chunk = await asyncio.to_thread(handle.read, min(SEND_CHUNK, length))
            if not chunk:
                return  # shorter than it was when verified: the client sees a short body, never other bytes
            length -= len(chunk)
            yield chunk
    finally:
        handle.close()


def _ascii(name: str) -> str:
    return "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name) or "artifact"
