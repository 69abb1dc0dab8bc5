"""/tags against the loopback Discord stand-in and a real daemon: a person with ledger.annotate tags and notes a run
(the daemon's answer shown), the id autocompletes by the kind chosen, and a person without it is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.bot.test_discord_bot import running_bot, text_of, world
from tests.support.discord_standin import BOB_ID, EPHEMERAL
from tests.support.factories import tracking_context

pytestmark = pytest.mark.anyio


@pytest.mark.timeout(300)
async def test_a_run_is_tagged_and_noted_from_discord_and_a_person_without_the_capability_is_refused(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w, running_bot(w):
        async with w.admin() as admin:
            context = tracking_context(project_id="nightly")
            made = await admin.post("/v1/runs", json={"method": "sft", "tracking_context": context})
            run_id = made.json()["record"]["run_id"]
        tagged = await w.slash("tags set", project="nightly", kind="run", id=run_id, tags="team=nlp stage=eval")
        assert "tagged" in text_of(tagged) and "stage=eval team=nlp" in text_of(tagged), text_of(tagged)
        noted = await w.slash("tags note", project="nightly", kind="run", id=run_id, text="lr too high")
        assert "lr too high" in text_of(noted)
        removed = await w.slash("tags remove", project="nightly", kind="run", id=run_id, keys="stage")
        assert "removed stage" in text_of(removed) and "team=nlp" in text_of(removed)
        typed = await w.standin.autocomplete("tags set", "id", run_id[:8], {"project": "nightly", "kind": "run"})
        choices = (await w.standin.wait_for_callback(typed)).data["choices"]
        assert [c["value"] for c in choices] == [run_id]
        refused = await w.slash("tags set", user_id=BOB_ID, project="nightly", kind="run", id=run_id, tags="a=b")
        assert refused["flags"] & EPHEMERAL and "lacks the capability ledger.annotate" in text_of(refused)
        bad = await w.slash("tags set", project="nightly", kind="run", id=run_id, tags="a';DROP=1")
        assert bad["flags"] & EPHEMERAL and "is not a tag key" in text_of(bad), text_of(bad)
        async with w.admin() as admin:
            shown = (await admin.get(f"/v1/projects/nightly/runs/{run_id}")).json()
        assert shown["tags"] == {"team": "nlp"} and shown["note"]["text"] == "lr too high"
