"""Content-addressed file store under the home: artifacts/sha256/<2>/<rest>, never duplicated."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import BinaryIO

from bashgym.client.errors import InvalidInput, PayloadTooLarge

CHUNK = 1024 * 1024


def file_digest(path: Path) -> tuple[str, int]:
    """sha256 and size of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256[2:]

    def has(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    async def put_stream(
        self,
        chunks: AsyncIterator[bytes],
        *,
        max_bytes: int,
        admit: Callable[[str, int], Awaitable[None]] | None = None,
    ) -> tuple[str, int]:
        """Write a stream to the store; return its sha256 and size. A known digest is stored once.

        `admit(sha256, size)`, when given, may refuse the file once its digest is known (a quota): it raises,
        and nothing is stored."""
        handle, tmp = await asyncio.to_thread(self._open_temp)
        digest = hashlib.sha256()
        size = 0
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise PayloadTooLarge(
                        f"The upload is over {max_bytes} bytes.",
                        hint="Raise BASHGYM_MAX_UPLOAD_BYTES, or register the file by URI.",
                    )
                digest.update(chunk)
                await asyncio.to_thread(handle.write, chunk)
            if size == 0:
                raise InvalidInput("The uploaded file is empty.")
            sha = digest.hexdigest()
            if admit is not None:
                await admit(sha, size)
            await asyncio.to_thread(self._commit, handle, tmp, sha)
            return sha, size
        except BaseException:
            handle.close()
            tmp.unlink(missing_ok=True)
            raise

    async def put_file(self, path: Path) -> tuple[str, int]:
        """Store a local file; return its sha256 and size."""

        async def chunks() -> AsyncIterator[bytes]:
            with path.open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    yield chunk

        return await self.put_stream(chunks(), max_bytes=2**40)

    def _open_temp(self) -> tuple[BinaryIO, Path]:
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=tmp_dir)
        return os.fdopen(fd, "wb"), Path(name)

    def _commit(self, handle: BinaryIO, tmp: Path, sha: str) -> None:
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        target = self.path_for(sha)
        if target.exists():
            tmp.unlink()
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(target)


def count_rows(path: Path, filename: str) -> int:
    """Rows of a dataset file: non-empty lines for JSONL/text, lines after the header for CSV/TSV."""
    lines = 0
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                lines += 1
    if filename.lower().endswith((".csv", ".tsv")):
        return max(lines - 1, 0)
    return lines
