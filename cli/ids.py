"""Short ids, like git's short hashes: where a command takes a run, result, campaign or model version id, a
unique prefix of it is enough. The daemon answers which ids start with it (only among what the token may read);
the line on stderr says which id it resolved to."""

from __future__ import annotations

import re
from typing import Any

from bashgym.cli.output import note
from bashgym.cli.registry import Ctx
from bashgym.cli.usage import UsageError
from bashgym.client.errors import ApiError

# The argument (its dest) and the kind of id it names.
ID_ARGUMENTS = {
    "run": "run",
    "runs": "run",
    "baseline": "eval_result",
    "candidate": "eval_result",
    "campaign": "campaign",
    "model_version": "model_version",
}
WHOLE_ID = re.compile(r"^[a-z]+-(?:[0-9a-f]{12}-[0-9a-f]{8}|[0-9a-f]{24})$")
MIN_PREFIX = 6  # the daemon's minimum; a shorter value is taken as it is (a campaign may be named `demo1`)


async def resolve_prefixes(ctx: Ctx) -> None:
    """Replace each id argument given as a unique prefix with the whole id, in place."""
    for dest, kind in ID_ARGUMENTS.items():
        value = getattr(ctx.args, dest, None)
        if isinstance(value, list):
            setattr(ctx.args, dest, [await _resolve(ctx, str(v), kind) for v in value])
        elif isinstance(value, str):
            setattr(ctx.args, dest, await _resolve(ctx, value, kind))


async def _resolve(ctx: Ctx, value: str, kind: str) -> str:
    if len(value) < MIN_PREFIX or WHOLE_ID.match(value):
        return value
    try:
        answer: dict[str, Any] = await ctx.client.resolve_id(value, kind=kind, workspace=ctx.workspace)
    except ApiError:
        return value  # the command itself says what is wrong with the id (not found, no daemon, no right)
    project = getattr(ctx.args, "project", None)
    ids = sorted({str(m["id"]) for m in answer["matches"] if project is None or m["project_id"] == project})
    if not ids or value in ids:
        return value
    if len(ids) == 1:
        note(f"{value} → {ids[0]}")
        return ids[0]
    more = "+" if answer.get("truncated") else ""
    raise UsageError(
        f"{value} is ambiguous: {len(ids)}{more} {kind.replace('_', ' ')} ids start with it ({', '.join(ids[:5])}).",
        hint="Type more of the id, or the whole id.",
    )
