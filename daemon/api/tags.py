"""Tags and a note on a run, a model version or a campaign: PUT and DELETE the tags, PUT the note
(`ledger.annotate` in the project), and the model versions' list, searchable by tag like the runs' and campaigns'."""

from __future__ import annotations

from typing import Annotated, Any

from bashgym.client.errors import InvalidInput
from bashgym.client.models import WriteResult
from bashgym.client.tags import (
    ENTITY_KINDS,
    ENTITY_PATHS,
    MAX_TAGS,
    EntityKind,
    NoteSpec,
    TagsSpec,
    check_tag_key,
    parse_tag,
)
from bashgym.client.validation import check_identifier
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ReadCall, requires, written
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

router = APIRouter(prefix="/v1/projects/{project}", tags=["tags"])

AnnotateCall = Annotated[Call, requires("ledger.annotate")]
# The name of each kind's id in its paths (client/tags.py's ENTITY_PATHS), as the kind's other routes write it.
ID_PARAMS: dict[EntityKind, str] = {"run": "run_id", "model_version": "version", "campaign": "campaign_id"}
MAX_TAG_FILTERS = 20


def tag_query(tag: list[str] | None) -> list[tuple[str, str | None]]:
    """A list route's `tag=key=value` (or `tag=key`: carries the tag) filters, all of which must hold."""
    if not tag:
        return []
    if len(tag) > MAX_TAG_FILTERS:
        raise InvalidInput(f"{len(tag)} tag filters; at most {MAX_TAG_FILTERS} are read.", hint="Name fewer tags.")
    return [parse_tag(item) for item in tag]


TagQuery = Annotated[list[str] | None, Query(description="key=value, or key alone: carries the tag (repeatable)")]


def _entity(kind: EntityKind, request: Request) -> str:
    return check_identifier(request.path_params[ID_PARAMS[kind]], field=ID_PARAMS[kind])


def _add_routes(kind: EntityKind) -> None:
    path = f"/{ENTITY_PATHS[kind]}/{{{ID_PARAMS[kind]}}}"
    name = kind.replace("_", " ")

    async def put_tags(call: AnnotateCall, project: str, request: Request, body: TagsSpec) -> Response:
        ledger = call.services.ledger
        return written(
            await ledger.set_tags(call.actor, call.workspace, project, kind, _entity(kind, request), body.tags)
        )

    async def delete_tags(
        call: AnnotateCall, project: str, request: Request, key: Annotated[list[str], Query()]
    ) -> Response:
        if len(key) > MAX_TAGS:
            raise InvalidInput(f"{len(key)} keys named; an entity holds at most {MAX_TAGS}.", hint="Name fewer.")
        keys = [check_tag_key(k) for k in key]
        ledger = call.services.ledger
        return written(await ledger.unset_tags(call.actor, call.workspace, project, kind, _entity(kind, request), keys))

    async def put_note(call: AnnotateCall, project: str, request: Request, body: NoteSpec) -> Response:
        ledger = call.services.ledger
        return written(
            await ledger.set_note(call.actor, call.workspace, project, kind, _entity(kind, request), body.text)
        )

    put_tags.__doc__ = f"Set tags on a {name} (a key already set takes the new value)."
    delete_tags.__doc__ = f"Remove the tags named by `key` (repeatable) from a {name}."
    put_note.__doc__ = f"Replace a {name}'s note (an empty text removes it; the events keep every earlier one)."
    for handler, method, suffix in (
        (put_tags, "PUT", "tags"),
        (delete_tags, "DELETE", "tags"),
        (put_note, "PUT", "note"),
    ):
        handler.__name__ = f"{method.lower()}_{kind}_{suffix}"
        router.add_api_route(f"{path}/{suffix}", handler, methods=[method], response_model=WriteResult)


for entity_kind in ENTITY_KINDS:
    _add_routes(entity_kind)


@router.get("/model-versions")
async def list_model_versions(call: ReadCall, project: str, tag: TagQuery = None, limit: int = 50) -> Response:
    """The project's model versions, newest first, with their tags; `tag=key=value` keeps those carrying it."""
    versions: list[dict[str, Any]] = await call.services.ledger.list_model_versions(
        call.workspace, project, tags=tag_query(tag), limit=limit
    )
    return json_response({"model_versions": versions})
