"""Replies and notices reach Discord: every reply fits its embed limits whatever the daemon answered (one embed
over them makes Discord refuse the whole reply, 50035), and only a refusal of the notice itself dead-letters it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import discord
import pytest
from bashgym.bot.commands.project import context_embed
from bashgym.bot.core import EMBED_TOTAL_LIMIT, FIELD_VALUE_LIMIT, Reply, send
from bashgym.bot.notifier import is_permanent

pytestmark = pytest.mark.anyio


class Response:
    def __init__(self) -> None:
        self.sent: dict[str, Any] = {}

    def is_done(self) -> bool:
        return bool(self.sent)

    async def send_message(self, **kwargs: Any) -> None:
        self.sent = kwargs


class Interaction:
    """The part of discord.Interaction that `send` uses before anything was answered."""

    def __init__(self) -> None:
        self.response = Response()


def context(aliases: int) -> dict[str, Any]:
    lineage = {
        "aliases": [{"alias": f"alias-{i:03d}-" + "x" * 40, "model_version_id": f"mv-{i}"} for i in range(aliases)]
    }
    return {
        "project": {"project_id": "nightly", "name": "Nightly", "description": "d" * 5000},
        "signals": {},
        "inventory": {"runs": 3, "runs_by_status": {"completed": 3}},
        "lineage": lineage,
        "recent": {"runs": [], "decisions": []},
    }


async def test_a_project_context_with_hundreds_of_aliases_is_sent_within_discords_limits() -> None:
    made = context_embed("nightly", context(300), [])
    assert max(len(f.value or "") for f in made.fields) > FIELD_VALUE_LIMIT  # as built, it would be refused
    interaction = Interaction()
    await send(interaction, Reply(embed=made))  # type: ignore[arg-type]
    [sent] = interaction.response.sent["embeds"]
    assert isinstance(sent, discord.Embed) and len(sent) <= EMBED_TOTAL_LIMIT
    assert all(len(f.value or "") <= FIELD_VALUE_LIMIT for f in sent.fields)
    assert any("(cut)" in (f.value or "") for f in sent.fields), "what was cut says so"


@pytest.mark.parametrize(("status", "permanent"), [(400, True), (403, True), (404, True), (401, False), (429, False),
                                                   (500, False), (503, False)])  # fmt: skip
def test_a_refused_token_is_not_a_refused_notice(status: int, permanent: bool) -> None:
    # A 401 refuses the bot's token: dead-lettering would drop every notice behind it, so it is retried instead.
    response = SimpleNamespace(status=status, reason="refused")
    assert is_permanent(discord.HTTPException(response, {"code": 0, "message": "refused"})) is permanent  # type: ignore[arg-type]
