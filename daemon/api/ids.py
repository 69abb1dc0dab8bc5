"""Id prefixes: `GET /v1/ids/{prefix}` answers the full ids that start with what a user typed, like git's short
hashes, among the projects the caller may read."""

from __future__ import annotations

from bashgym.client.errors import InvalidInput
from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import NamedProjectsRead, check_optional
from bashgym.ledger.ids import check_kind
from fastapi import APIRouter
from starlette.responses import Response

# Shorter prefixes match too much to name anything; a whole id shorter than this is used as it is.
MIN_PREFIX_CHARS = 6

router = APIRouter(prefix="/v1", tags=["ids"])


@router.get("/ids/{prefix}")
async def resolve_id(call: NamedProjectsRead, prefix: str, kind: str | None = None) -> Response:
    """Up to 10 ids starting with `prefix`, each with its kind and project. Another project's ids are left out,
    never refused, so the answer is the same whether or not they exist."""
    check_prefix(prefix)
    check_optional(kind, check_kind)
    ledger = call.services.ledger
    projects = [p["project_id"] for p in await ledger.list_projects(call.workspace)]
    readable = [p for p in projects if call.principal.holds("ledger.read", p)]
    return json_response(await ledger.ids_with_prefix(call.workspace, prefix, projects=readable, kind=kind))


def check_prefix(prefix: str) -> None:
    """Raise InvalidInput unless `prefix` could start an id and is long enough to mean one."""
    check_identifier(prefix, field="id prefix")
    if len(prefix) < MIN_PREFIX_CHARS:
        raise InvalidInput(
            f"The id prefix {prefix!r} is {len(prefix)} characters; type at least {MIN_PREFIX_CHARS}.",
            hint="Type more of the id (run-01a245a5 for run-01a245a59798-f8857d00, say), or the whole id.",
            details={"prefix": prefix, "min_chars": MIN_PREFIX_CHARS},
        )
