"""The operator skill bundle: where it lies, its lock of sha256 digests, and whether a copy still matches it.

Stdlib only: `bashgym doctor` and `bashgym skills check` verify the bundle without loading anything heavy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

LOCK_NAME = "skills.lock.json"
LOCK_SCHEMA = "bashgym.skills.lock/v1"
# In the source tree the bundle folder is also the package `bashgym.skills` (so it installs with the wheel);
# these are packaging, not bundle files.
_NOT_BUNDLE = frozenset({LOCK_NAME, "__init__.py", "__pycache__"})


class SkillsError(Exception):
    """A bundle or lock that cannot be read or written; the message names the path."""


class TargetModified(SkillsError):
    """An install would overwrite edited files, or mix with others, in the target; the message names them."""


@dataclass(frozen=True)
class SkillCheck:
    """How a bundle directory compares with its lock; every differing file is named by its relative path."""

    root: Path
    changed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    problem: str | None = None  # the lock itself is absent or unreadable

    @property
    def verified(self) -> bool:
        return self.problem is None and not (self.changed or self.missing or self.extra)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "verified": self.verified,
            "changed": list(self.changed),
            "missing": list(self.missing),
            "extra": list(self.extra),
            "problem": self.problem,
        }

    def describe(self) -> list[str]:
        """One line per finding, for people."""
        lines = [self.problem] if self.problem else []
        lines += [f"changed: {path}" for path in self.changed]
        lines += [f"missing: {path}" for path in self.missing]
        lines += [f"extra: {path}" for path in self.extra]
        return lines


def bundle_root() -> Path:
    """The shipped bundle: the repository's `skills/` in an editable install, the package data otherwise."""
    spec = importlib.util.find_spec("bashgym.skills")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / LOCK_NAME).is_file():
                return Path(location)
    # daemon/ and skills/ are siblings both in the source tree and under site-packages/bashgym/.
    return Path(__file__).resolve().parent.parent / "skills"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_files(root: Path, scope: set[str] | None = None) -> list[str]:
    """Bundle files under root as sorted POSIX paths relative to it, packaging files left out.

    With scope, only the files of those top-level entries (a shared skills directory may hold others).
    """
    if not root.is_dir():
        return []
    found: list[str] = []
    for current, dirs, files in os.walk(root):
        relative = Path(current).relative_to(root)
        at_top = relative == Path(".")
        dirs[:] = sorted(d for d in dirs if d not in _NOT_BUNDLE and (not at_top or scope is None or d in scope))
        for name in files:
            if name.endswith(".pyc") or (at_top and (name in _NOT_BUNDLE or (scope is not None and name not in scope))):
                continue
            found.append((relative / name).as_posix())
    return sorted(found)


def top_level(names: Iterable[str]) -> set[str]:
    return {name.split("/", 1)[0] for name in names}


def compute_lock(root: Path) -> dict[str, Any]:
    """The lock a bundle directory would have: every bundle file with its sha256."""
    if not root.is_dir():
        raise SkillsError(f"{root} is not a directory.")
    return {"schema": LOCK_SCHEMA, "files": {path: file_sha256(root / path) for path in bundle_files(root)}}


def read_lock(root: Path) -> dict[str, str]:
    """The locked files of a bundle directory; SkillsError says why the lock cannot be used."""
    path = root / LOCK_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SkillsError(f"{path} is missing.") from exc
    except (OSError, ValueError) as exc:
        raise SkillsError(f"{path} cannot be read: {exc}.") from exc
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("schema") != LOCK_SCHEMA or not isinstance(files, dict):
        raise SkillsError(f"{path} is not a {LOCK_SCHEMA} lock.")
    for name in files:
        # Names are joined to the bundle directory: one that escapes it would be hashed, copied or removed outside.
        parts = PurePosixPath(str(name)).parts
        if not parts or str(name).startswith("/") or "\\" in str(name) or ".." in parts or name in _NOT_BUNDLE:
            raise SkillsError(f"{path} names {name!r}, which is not a file inside the bundle.")
    return {str(name): str(digest) for name, digest in files.items()}


def verify(root: Path | None = None) -> SkillCheck:
    """Compare a bundle directory (default: the shipped one) with its lock.

    Only the lock's own top-level entries are the bundle's: other skills beside it in a shared skills
    directory are not extra files, while a file added inside one of its folders is.
    """
    root = bundle_root() if root is None else root
    try:
        locked = read_lock(root)
    except SkillsError as exc:
        return SkillCheck(root=root, problem=str(exc))
    present = bundle_files(root, top_level(locked))
    changed = [p for p in present if p in locked and file_sha256(root / p) != locked[p]]
    missing = sorted(set(locked) - set(present))
    extra = [p for p in present if p not in locked]
    return SkillCheck(root=root, changed=tuple(changed), missing=tuple(missing), extra=tuple(extra))


def write_lock(root: Path | None = None) -> dict[str, Any]:
    """Rewrite a bundle's lock from its files, after an intended edit; returns the new lock."""
    root = bundle_root() if root is None else root
    lock = compute_lock(root)
    _write_atomic(root / LOCK_NAME, json.dumps(lock, indent=2) + "\n")
    return lock


@dataclass(frozen=True)
class Installed:
    """What `install` did: the files it wrote, the stale ones it removed, and the copy's check."""

    target: Path
    written: tuple[str, ...]
    removed: tuple[str, ...]
    check: SkillCheck


def install(target: Path, *, force: bool = False) -> Installed:
    """Copy the shipped bundle and its lock into target.

    A bundle already there is replaced only when it still matches its own lock (an intact older
    version) and nothing else sits in the bundle's folders; otherwise SkillsError names the files, so
    no edit is lost, unless force, which replaces them.
    """
    source = bundle_root()
    shipped = verify(source)
    if not shipped.verified:
        raise SkillsError(f"The shipped bundle at {source} does not match its lock: {'; '.join(shipped.describe())}.")
    locked = read_lock(source)
    previous = _old_lock(target)
    present = bundle_files(target, top_level(locked))
    existing = verify(target) if previous is not None or present else None
    foreign = [p for p in present if p not in locked and p not in (previous or {})]
    findings = existing.describe() if existing is not None else []
    findings += [f"not in any bundle: {p}" for p in foreign]
    if findings and not force:
        raise TargetModified(f"{target} holds files the bundle would overwrite or mix with: {'; '.join(findings)}.")
    # An intact older copy's own files go; with force, so does whatever else sits in the bundle's folders.
    doomed = set(previous or {})
    if force:
        doomed |= set(foreign) | set(existing.extra if existing is not None else ())
    stale = sorted(name for name in doomed - set(locked) if (target / name).is_file())
    for name in stale:
        (target / name).unlink()
    for name in sorted(locked):
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, destination)
    shutil.copyfile(source / LOCK_NAME, target / LOCK_NAME)
    return Installed(target=target, written=tuple(sorted(locked)), removed=tuple(stale), check=verify(target))


def _old_lock(target: Path) -> dict[str, str] | None:
    """The lock of a copy already in target: None when there is none, empty when it is unusable."""
    if not (target / LOCK_NAME).exists():
        return None
    try:
        return read_lock(target)
    except SkillsError:
        return {}


def _write_atomic(path: Path, text: str) -> None:
    # A lock half-written by a crash would fail every later check; replace it in one rename instead.
    try:
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False) as handle:
            handle.write(text)
        os.chmod(handle.name, 0o644)  # a temporary file is private; the lock is read by every user of the bundle
        os.replace(handle.name, path)
    except OSError as exc:
        raise SkillsError(f"Cannot write {path}: {exc.strerror}.") from exc
