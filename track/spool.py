"""Spool files left by a process that died: BASHGYM_HOME/track/RUN.jsonl, one line per batch not yet sent, with the
batch's Idempotency-Key. The next run opened in the same home sends them to their runs; the keys and the ledger's
one-point-per-step make a batch that did arrive before add nothing."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from bashgym.client.errors import ApiError
from bashgym.track.sender import Sender

log = logging.getLogger("bashgym.track")
RUN_PATH = re.compile(r"/v1/projects/[^/]+/tracked-runs/[^/]+")  # a line names its run, and nothing else
_open_here: set[Path] = set()  # the spool files of this process's open runs: never an orphan


def hold_spool(spool: Path) -> None:
    _open_here.add(spool)


def release_spool(spool: Path) -> None:
    _open_here.discard(spool)


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def orphans(directory: Path) -> list[Path]:
    """The spool files no live process owns: their writer died, or it is this process and the run ended unsent."""
    found = []
    for spool in sorted(directory.glob("*.jsonl")):
        if spool in _open_here:
            continue
        batches = read(spool)
        pid = int(batches[0].get("pid", 0)) if batches else 0
        if pid and pid != os.getpid() and is_alive(pid):
            continue  # a live process spooling while the daemon is down: it sends its own
        found.append(spool)
    return found


def read(spool: Path) -> list[dict[str, Any]]:
    try:
        lines = spool.read_text().splitlines()
    except FileNotFoundError:  # its owner sent it meanwhile
        return []
    return [json.loads(line) for line in lines if line.strip()]


def resend_orphans(sender: Sender, directory: Path) -> None:
    """Send each orphan spool's batches to their run under their own keys, then remove it; a refusal keeps it."""
    for spool in orphans(directory):
        batches = read(spool)
        try:
            points = sender.call(_send(sender, batches))
        except (ApiError, ValueError, KeyError) as exc:
            reason = exc.message if isinstance(exc, ApiError) else str(exc)
            log.warning("The spool %s a stopped process left could not be sent (%s); it is kept. Remove it once its "
                        "points are not wanted.", spool, reason)  # fmt: skip
            continue
        spool.unlink(missing_ok=True)
        run = str(batches[0]["path"]).rsplit("/", 1)[-1] if batches else spool.stem
        log.warning("Sent %d points in %d batches that a stopped process left in %s to run %s; removed the file.",
                    points, len(batches), spool, run)  # fmt: skip


async def _send(sender: Sender, batches: list[dict[str, Any]]) -> int:
    points = 0
    for batch in batches:
        if not RUN_PATH.fullmatch(str(batch["path"])):
            raise ValueError(f"a line names {batch['path']!r}, not a tracked run")
        body = {"points": batch["points"], "resent": True}
        await sender.retried("POST", f"{batch['path']}/metrics", body=body, idempotency_key=batch["key"])
        points += len(batch["points"])
    return points
