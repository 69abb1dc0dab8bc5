"""Model exchange: other repositories consume models as versioned, verifiable bundles, not shared code.

A bundle directory holds the model files (adapter or weights, tokenizer), `runcard.json` when the
model came from a carded run, and `manifest.json`: every file's sha256 and size, the base model and
dataset lineage, license and provenance. Import verifies every digest before anything is registered;
a bundle with a changed, missing or extra file is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from bashgym.client.errors import InvalidInput, RuleRejected
from bashgym.client.validation import canonical_json, sha256_text
from bashgym.daemon.blobs import file_digest

MANIFEST = "manifest.json"
SCHEMA = "bashgym.model-bundle/v1"


def export_bundle(
    *,
    source_dir: Path,
    files: list[dict[str, Any]],
    target: Path,
    lineage: dict[str, Any],
    runcard: dict[str, Any] | None,
) -> dict[str, Any]:
    """Copy the version's files from `source_dir` into `target`, check each against its recorded digest,
    and write the manifest; return it."""
    if target.exists() and any(target.iterdir()):
        raise RuleRejected(f"{target} exists and is not empty.", hint="Export into a new directory.")
    target.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for entry in files:
        relative = _safe(entry["path"])
        source = source_dir / relative
        if not source.is_file():
            raise RuleRejected(
                f"{entry['path']} of this model version is not at {source}.",
                hint="Export on the daemon host that holds the run directory.",
            )
        copied = target / relative
        copied.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copied)
        digest, size = file_digest(copied)
        if digest != entry["sha256"]:
            shutil.rmtree(target)
            raise RuleRejected(
                f"{entry['path']} has sha256 {digest[:12]} but the ledger recorded {entry['sha256'][:12]}; "
                "the file changed after it was registered. Nothing was exported.",
            )
        entries.append({"path": str(relative), "sha256": digest, "size_bytes": size})
    if runcard is not None:
        (target / "runcard.json").write_text(json.dumps(runcard, indent=2, sort_keys=True))
        digest, size = file_digest(target / "runcard.json")
        entries.append({"path": "runcard.json", "sha256": digest, "size_bytes": size})
    manifest = {"schema": SCHEMA, **lineage, "files": sorted(entries, key=lambda e: str(e["path"]))}
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def verify_bundle(bundle: Path) -> tuple[dict[str, Any], str]:
    """The manifest and its sha256, after every file matched it and no other file is present."""
    try:
        text = (bundle / MANIFEST).read_text()
        manifest: dict[str, Any] = json.loads(text)
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{bundle} has no readable {MANIFEST}: {exc}.", hint="Point at an exported bundle.") from exc
    if manifest.get("schema") != SCHEMA:
        raise InvalidInput(f"{bundle}/{MANIFEST} is not a {SCHEMA} manifest.")
    problems = []
    listed = set()
    for entry in manifest.get("files", []):
        relative = _safe(entry["path"])
        listed.add(str(relative))
        path = bundle / relative
        if not path.is_file():
            problems.append(f"{entry['path']} is missing")
            continue
        digest, size = file_digest(path)
        if digest != entry["sha256"] or size != entry["size_bytes"]:
            problems.append(
                f"{entry['path']} has sha256 {digest[:12]} ({size} bytes), the manifest says {entry['sha256'][:12]}"
            )
    present = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()} - {MANIFEST}
    problems += [f"{extra} is not in the manifest" for extra in sorted(present - listed)]
    if problems:
        raise RuleRejected(
            f"The bundle at {bundle} does not match its manifest: {'; '.join(problems[:10])}.",
            hint="Nothing was registered. Export the model again from its source.",
        )
    return manifest, sha256_text(canonical_json(manifest))


def _safe(path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise InvalidInput(f"Bundle path {path!r} must stay inside the bundle.")
    return relative
