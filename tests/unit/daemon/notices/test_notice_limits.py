"""Every embed the bot builds fits Discord's limits, and a notice Discord refuses for good is recorded once (its
consumer moved past it), told in the default channel and explained by the doctor."""

from __future__ import annotations

from types import SimpleNamespace

import discord
import pytest
from bashgym.bot.core import CUT_MARK, cut, embed, fields_embed
from bashgym.bot.notifier import Refusal, is_permanent, notice_embed
from bashgym.client.errors import NotFound
from bashgym.client.models import Notice, NoticeField
from bashgym.client.specs import Actor, ProjectSpec
from bashgym.daemon.api.operator import notice_failure_advice
from bashgym.ledger.store import Ledger


def oversized_notice() -> Notice:
    return Notice(
        cursor=7,
        event_id="evt-1",
        event_type="run.failed",
        workspace_id="default",
        project_id="nightly",
        channel_id="101",
        nonce="n" * 25,
        outcome="failure",
        title="T" * 400,
        description="D" * 5000,
        fields=[NoticeField(name=f"field {i} " + "n" * 300, value="v" * 1500) for i in range(40)],
        footer="F" * 3000,
    )


def assert_within_discords_limits(made: discord.Embed) -> None:
    assert len(made.title or "") <= 256 and len(made.description or "") <= 4096
    assert len(made.fields) <= 25
    assert all(len(f.name or "") <= 256 and len(f.value or "") <= 1024 for f in made.fields)
    assert all(f.name and f.value for f in made.fields), "Discord refuses an empty field name or value"
    assert len(made.footer.text or "") <= 2048 and len(made.author.name or "") <= 256
    assert len(made) <= 6000


def test_an_oversized_notice_is_cut_with_a_mark_and_says_how_many_fields_it_left_out() -> None:
    made = notice_embed(oversized_notice())

    assert_within_discords_limits(made)
    assert made.title == "T" * (256 - len(CUT_MARK)) + CUT_MARK
    assert (made.footer.text or "").endswith(CUT_MARK) and len(made.footer.text or "") == 2048
    assert (made.description or "").endswith(CUT_MARK)
    kept, note = made.fields[:-1], made.fields[-1]
    assert [f.name for f in kept] == [cut(f"field {i} " + "n" * 300, 256) for i in range(len(kept))]
    assert all((f.value or "").endswith(CUT_MARK) and len(f.value or "") == 1024 for f in kept)
    assert (note.name, note.value) == ("left out", f"{40 - len(kept)} more fields, over Discord's limits")
    assert len(made) == 6000, "what the fields leave over goes to the description"


def test_a_notice_within_the_limits_is_left_as_it_is() -> None:
    notice = oversized_notice().model_copy(
        update={"title": "Run failed", "description": "OOM", "fields": [NoticeField(name="run", value="")]}
    )
    made = notice_embed(notice.model_copy(update={"footer": "nightly · #7"}))
    assert (made.title, made.description, made.footer.text) == ("Run failed", "OOM", "nightly · #7")
    assert [(f.name, f.value) for f in made.fields] == [("run", "—")]


def test_a_reply_embed_keeps_25_fields_and_6000_characters() -> None:
    many = fields_embed("Run", {f"key{i}": "x" * 10 for i in range(30)}, [f"key{i}" for i in range(30)])
    assert_within_discords_limits(many)
    assert len(many.fields) == 25 and many.fields[-1].value == "6 more fields, over Discord's limits"

    long = embed("Report", description="d" * 5000, footer="f" * 3000)
    assert_within_discords_limits(long)
    assert (long.description or "").endswith(CUT_MARK) and len(long) == 6000


def test_cut_leaves_short_text_alone_and_marks_what_it_cut() -> None:
    assert cut("abc", 3) == "abc"
    assert cut("abcdefghij" * 3, 20) == "abcdefghijabc" + CUT_MARK
    assert len(cut("x" * 50, 20)) == 20


@pytest.mark.parametrize(
    "status, permanent", [(400, True), (403, True), (404, True), (413, True), (429, False), (500, False), (503, False)]
)
def test_only_a_4xx_other_than_429_is_a_permanent_refusal(status: int, permanent: bool) -> None:
    exc = discord.HTTPException(SimpleNamespace(status=status, reason="x"), {"message": "m", "code": 0})  # type: ignore[arg-type]
    assert is_permanent(exc) is permanent


def test_the_default_channel_says_where_a_notice_was_refused_and_why() -> None:
    message = "Cannot send messages in a non-text channel\nmore detail"
    line = Refusal(count=2, status=400, code=50008, message=message).line(123)
    assert line.startswith("⚠ 2 notices could not be posted in <#123>")
    assert "Discord answered 400 50008 (Cannot send messages in a non-text channel)" in line
    assert "more detail" not in line and "`bashgym doctor`" in line


@pytest.mark.parametrize(
    "status, code, says",
    [
        (400, 50008, "Channel 123 is not a text channel (a category or forum?): set a text channel with "
         "`bashgym project channel nightly --channel ID`"),
        (403, 50013, "give it View Channels, Send Messages, Embed Links and Attach Files there"),
        (404, 10003, "Channel 123 does not exist or the bot is not in its server"),
        (400, 50035, "a BashGym bug; report it with event evt-1"),
        (400, 0, "Read Discord's message"),
    ],
)  # fmt: skip
def test_the_doctor_says_what_to_do_about_each_refusal(status: int, code: int, says: str) -> None:
    failure = {"channel_id": "123", "project_id": "nightly", "event_id": "evt-1", "status": status, "code": code}
    assert says in notice_failure_advice(failure)


@pytest.mark.anyio
async def test_a_refused_notice_is_recorded_once_and_its_consumer_moved_past_it(ledger: Ledger, actor: Actor) -> None:
    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly"))
    notice = (await ledger.events_page("default", "nightly", after_cursor=0)).events[-1]
    await ledger.ack_consumer_cursor("discord-notifier", notice.cursor - 1, actor=actor, ws="default")
    secret = "bgy_" + "s" * 30
    failure = {"cursor": notice.cursor, "event_id": notice.event_id, "channel_id": "123", "status": 400}
    failure |= {"code": 50008, "message": f"Cannot send messages in a non-text channel {secret}"}

    moved = await ledger.record_notice_failure(actor, "default", "discord-notifier", **failure)
    again = await ledger.record_notice_failure(actor, "default", "discord-notifier", **failure)

    assert moved["cursor"] == again["cursor"] == notice.cursor
    recorded = (await ledger.events_page("default", "nightly", after_cursor=notice.cursor)).events
    assert [e.event_type for e in recorded] == ["notice.failed"], "a resend records nothing more"
    assert recorded[0].payload == {
        **failure,
        "consumer": "discord-notifier",
        "event_type": notice.event_type,
        "message": "Cannot send messages in a non-text channel [redacted]",
    }
    count, latest = await ledger.notice_failures("default", since="2000-01-01T00:00:00Z")
    assert count == 1 and latest[0]["channel_id"] == "123" and latest[0]["project_id"] == "nightly"
    with pytest.raises(NotFound, match="No event 'evt-nope'"):
        await ledger.record_notice_failure(actor, "default", "discord-notifier", **{**failure, "event_id": "evt-nope"})
