"""/tags: set and remove tags and set the note of a run, a model version or a campaign (ledger.annotate)."""

from __future__ import annotations

from typing import Any

from bashgym.bot.commands.shared import (
    Interaction,
    call,
    campaigns_ac,
    model_versions_ac,
    projects_ac,
    runs_ac,
)
from bashgym.bot.core import Reply, answer, fields_embed
from bashgym.client.errors import ApiError, InvalidInput
from bashgym.client.tags import NOTE_MAX, EntityKind, entity_path, parse_tags
from discord import app_commands


async def entities_ac(interaction: Interaction, current: str) -> list[app_commands.Choice[str]]:
    """The ids of the kind chosen in the same command (runs until one is chosen)."""
    kind = getattr(interaction.namespace, "kind", None) or "run"
    complete = {"run": runs_ac, "model_version": model_versions_ac, "campaign": campaigns_ac}[kind]
    return await complete(interaction, current)


def _tags(words: str) -> dict[str, str]:
    """The typed `key=value` words, or the reply saying which word is wrong (nothing is sent)."""
    try:
        return parse_tags(words.split())
    except InvalidInput as exc:
        raise ApiError(422, exc.code, exc.message, exc.hint) from exc


def _shown(entity: str, data: dict[str, Any], verb: str) -> Reply:
    record = data["record"]
    tags = " ".join(f"{k}={v}" for k, v in sorted(record["tags"].items())) or "(none)"
    note = record.get("note")
    shown = {"tags": tags, "note": f"{note['text']} ({note['set_by']})" if note else "(none)"}
    title = f"{entity}: {verb}" + (" (already so)" if data["replayed"] else "")
    return Reply(embed=fields_embed(title, shown, ["tags", "note"]))


class TagsGroup(app_commands.Group, name="tags", description="Tags and notes of runs, model versions, campaigns"):
    @app_commands.command(name="set", description="Set tags key=value (ledger.annotate)")
    @app_commands.describe(
        kind="what is tagged",
        id="the run, model version or campaign id",
        tags="key=value pairs, separated by spaces (team=nlp stage=eval)",
    )
    @app_commands.autocomplete(project=projects_ac, id=entities_ac)
    async def set_(self, interaction: Interaction, project: str, kind: EntityKind, id: str, tags: str) -> None:
        async def work() -> Reply:
            body = {"tags": _tags(tags)}
            data = await call(interaction, "PUT", f"{entity_path(project, kind, id)}/tags", body=body)
            return _shown(id, data, "tagged")

        await answer(interaction, work())

    @app_commands.command(name="remove", description="Remove tags by key (ledger.annotate)")
    @app_commands.describe(
        kind="what is untagged", id="the run, model version or campaign id", keys="tag keys, separated by spaces"
    )
    @app_commands.autocomplete(project=projects_ac, id=entities_ac)
    async def remove(self, interaction: Interaction, project: str, kind: EntityKind, id: str, keys: str) -> None:
        async def work() -> Reply:
            path = f"{entity_path(project, kind, id)}/tags"
            data = await call(interaction, "DELETE", path, params={"key": keys.split()})
            return _shown(id, data, f"removed {', '.join(data['record']['removed']) or 'nothing'}")

        await answer(interaction, work())

    @app_commands.command(name="note", description="Set the note; an empty text removes it (ledger.annotate)")
    @app_commands.describe(kind="what the note is on", id="the run, model version or campaign id", text="the note")
    @app_commands.autocomplete(project=projects_ac, id=entities_ac)
    async def note(
        self,
        interaction: Interaction,
        project: str,
        kind: EntityKind,
        id: str,
        text: app_commands.Range[str, 0, NOTE_MAX] = "",
    ) -> None:
        async def work() -> Reply:
            data = await call(interaction, "PUT", f"{entity_path(project, kind, id)}/note", body={"text": text})
            return _shown(id, data, "noted")

        await answer(interaction, work())
