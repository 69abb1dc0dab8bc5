"""Short ids in the CLI: where a command takes a run, result, campaign or model version id, a unique prefix of it is
enough (client/ids.py decides, as for MCP tools); the line on stderr says which id it resolved to."""

from __future__ import annotations

from bashgym.cli.output import note
from bashgym.cli.registry import Ctx
from bashgym.cli.usage import UsageError
from bashgym.client.ids import AmbiguousId, resolve_id

# The argument (its dest) and the kind of id it names.
ID_ARGUMENTS = {
    "run": "run",
    "runs": "run",
    "baseline": "eval_result",
    "candidate": "eval_result",
    "campaign": "campaign",
    "model_version": "model_version",
}


async def resolve_prefixes(ctx: Ctx) -> None:
    """Replace each id argument given as a unique prefix with the whole id, in place."""
    for dest, kind in ID_ARGUMENTS.items():
        value = getattr(ctx.args, dest, None)
        if isinstance(value, list):
            setattr(ctx.args, dest, [await _resolve(ctx, str(v), kind) for v in value])
        elif isinstance(value, str):
            setattr(ctx.args, dest, await _resolve(ctx, value, kind))


async def _resolve(ctx: Ctx, value: str, kind: str) -> str:
    project = getattr(ctx.args, "project", None)
    try:
        whole = await resolve_id(ctx.client, value, kind=kind, workspace=ctx.workspace, project=project)
    except AmbiguousId as exc:
        raise UsageError(exc.message, hint=exc.hint) from exc
    if whole != value:
        note(f"{value} → {whole}")
    return whole
