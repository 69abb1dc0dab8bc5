"""The MCP tool of tags and notes: set and remove tags and set the note of a run, a model version or a campaign
(ledger.annotate), in one call; the list tools search them with `tag`."""

from __future__ import annotations

from typing import Annotated, Any

from bashgym.agents.answers import Answer
from bashgym.agents.daemon import Daemon
from bashgym.agents.tools import Project, Tool
from bashgym.client.errors import BashGymError
from bashgym.client.tags import NOTE_MAX, EntityKind, entity_path
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field


class Labels(Answer):
    entity_kind: str
    entity_id: str
    tags: dict[str, str]
    note: str | None = Field(None, description="the note's text, if any")


def build(daemon: Daemon) -> list[Tool]:
    """The tags tool, bound to one daemon connection."""

    async def tag_entity(
        project: Project,
        kind: EntityKind,
        entity_id: Annotated[str, Field(min_length=1, max_length=200)],
        set_tags: dict[str, str] | None = None,
        remove_tags: list[str] | None = None,
        note: Annotated[str | None, Field(max_length=NOTE_MAX, description='"" removes it')] = None,
    ) -> Labels:
        try:
            path = entity_path(project, kind, entity_id)
        except BashGymError as exc:
            raise ToolError(f"{exc.message} {exc.hint}".strip()) from exc
        written: dict[str, Any] | None = None
        if set_tags:
            written = await daemon.call("PUT", f"{path}/tags", body={"tags": set_tags})
        if remove_tags:
            written = await daemon.call("DELETE", f"{path}/tags", params={"key": remove_tags})
        if note is not None:
            written = await daemon.call("PUT", f"{path}/note", body={"text": note})
        if written is None:
            raise ToolError("Name set_tags, remove_tags or note: nothing was asked, so nothing was changed.")
        record = written["record"]
        text = record["note"]["text"] if record.get("note") else None
        return Labels(entity_kind=kind, entity_id=entity_id, tags=record["tags"], note=text)

    return [
        Tool("tag_entity", "ledger.annotate", tag_entity, "Set or remove tags (list_runs finds them by tag) and set "
             "the note of a run, model_version or campaign.", idempotent=True),
    ]  # fmt: skip
