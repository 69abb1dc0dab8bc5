"""Confirmations in Discord ask the daemon first: a person without the right is refused privately before any
prompt, and a Confirm pressed after the bot restarted says the confirmation expired instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.bot.test_discord_bot import running_bot, text_of, world
from tests.support.discord_standin import ALICE_ID, BOB_ID, EPHEMERAL

pytestmark = pytest.mark.anyio
AMEND = {"project": "nightly", "reason": "one more", "runs": 1}


@pytest.mark.timeout(300)
async def test_a_person_without_the_right_is_refused_before_any_prompt(tmp_path: Path) -> None:
    async with world(tmp_path) as w, running_bot(w):
        refused = await w.slash("budget amend", user_id=BOB_ID, **AMEND)
        assert refused["flags"] & EPHEMERAL, "refused privately"
        assert f"discord:{BOB_ID} lacks the capability budget.amend" in text_of(refused)
        assert not refused.get("components"), "no Confirm button was ever shown"
        assert "Amend the budget" not in text_of(refused)
        stop = await w.slash("run stop", user_id=BOB_ID, project="nightly", run="run-nope")
        assert stop["flags"] & EPHEMERAL and "Amend" not in text_of(stop) and not stop.get("components")

        prompt = await w.slash("budget amend", user_id=ALICE_ID, **AMEND)  # a lead holds budget.amend
        assert "Amend the budget" in text_of(prompt) and prompt.get("components")
        async with w.admin() as admin:
            budget = (await admin.get("/v1/projects/nightly/budget")).json()
        assert budget["limit"]["runs"] in (0, None) or budget["amended"]["runs"] == 0, "nothing amended yet"

        # A lead may decide a promotion, but overriding the gate is a right granted only explicitly: asked first too.
        promote = {"project": "nightly", "run": "run-1"}
        override = await w.slash("promote decide", user_id=ALICE_ID, override_reason="ship it", **promote)
        assert override["flags"] & EPHEMERAL and not override.get("components")
        assert f"discord:{ALICE_ID} lacks the capability promotion.override" in text_of(override)
        plain = await w.slash("promote decide", user_id=ALICE_ID, **promote)
        assert "Promote run run-1?" in text_of(plain) and plain.get("components")


@pytest.mark.timeout(300)
async def test_a_confirmation_from_before_a_restart_says_it_expired(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        async with running_bot(w):
            prompt = await w.slash("budget amend", user_id=ALICE_ID, **AMEND)
            assert "Amend the budget" in text_of(prompt)
        async with running_bot(w):  # a new bot process: the old view is gone, its buttons are still there
            pressed = await w.standin.click(prompt, "confirm", user_id=ALICE_ID)
            reply = await w.standin.wait_for_reply(pressed, timeout_s=10)
        assert reply["flags"] & EPHEMERAL
        assert "This confirmation expired; run the command again" in text_of(reply)
        async with w.admin() as admin:
            events = (await admin.get("/v1/projects/nightly/events", params={"type": "budget.amended"})).json()
        assert events["events"] == [], "an expired confirmation sends nothing"
