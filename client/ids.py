"""Short ids, like git's short hashes: where the CLI or an MCP tool takes a run, result, campaign or model version id,
a unique prefix of it is enough. The daemon answers which ids start with it (only among what the token may read);
this module decides what the answer means, for both adapters."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from bashgym.client.errors import ApiError, InvalidInput, NotFound

if TYPE_CHECKING:
    from bashgym.client.http import DaemonClient

WHOLE_ID = re.compile(r"^[a-z]+-(?:[0-9a-f]{12}-[0-9a-f]{8}|[0-9a-f]{24})$")
MIN_PREFIX = 6  # the daemon's minimum; a shorter value is taken as it is (a campaign may be named `demo1`)


class AmbiguousId(InvalidInput):
    """More than one id starts with the prefix given."""


class UnknownId(NotFound):
    """No id the token may read starts with the prefix given."""


async def resolve_id(
    client: DaemonClient,
    value: str,
    *,
    kind: str,
    workspace: str | None = None,
    project: str | None = None,
    strict: bool = False,
) -> str:
    """The whole id `value` is a unique prefix of (among `project`'s, when named), or `value` itself when it is short,
    whole, or the daemon could not say. Raises AmbiguousId naming the candidates; with `strict`, UnknownId when no id
    starts with it (the CLI leaves that to the command, which says what is wrong with the id)."""
    if len(value) < MIN_PREFIX or WHOLE_ID.match(value):
        return value
    try:
        answer: dict[str, Any] = await client.resolve_id(value, kind=kind, workspace=workspace)
    except ApiError:
        return value  # the request itself says what is wrong with the id (not found, no daemon, no right)
    ids = sorted({str(m["id"]) for m in answer["matches"] if project is None or m["project_id"] == project})
    what = kind.replace("_", " ")
    if value in ids or (not ids and not strict):
        return value
    if not ids:
        where = f" in project {project}" if project else ""
        raise UnknownId(f"No {what} id{where} starts with {value!r}.", hint="List them, and give a whole id.")
    if len(ids) == 1:
        return ids[0]
    more = "+" if answer.get("truncated") else ""
    raise AmbiguousId(
        f"{value} is ambiguous: {len(ids)}{more} {what} ids start with it ({', '.join(ids[:5])}).",
        hint="Type more of the id, or the whole id.",
        details={"candidates": ids[:5]},
    )
