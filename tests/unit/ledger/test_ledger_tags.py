"""Tags and notes (ledger.tags): set, replace, unset, notes with history, searched lists, and what is refused."""

from __future__ import annotations

import pytest
from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.specs import Actor, ProjectSpec, RunRegistration
from bashgym.client.tags import MAX_TAGS, TAG_KEY_MAX, TAG_VALUE_MAX, NoteSpec, TagsSpec, parse_tag, parse_tags
from bashgym.ledger.store import Ledger
from pydantic import ValidationError

from tests.support.factories import tracking_context

pytestmark = pytest.mark.anyio
WS = "default"


async def _run(ledger: Ledger, actor: Actor, **context: str) -> tuple[str, str]:
    written = await ledger.register_run(
        actor, WS, RunRegistration(method="sft", tracking_context=tracking_context(**context))
    )
    return written.record["project_id"], written.record["run_id"]


async def test_tags_are_set_replaced_and_unset_each_with_its_event(ledger: Ledger, actor: Actor) -> None:
    project, run_id = await _run(ledger, actor)
    first = await ledger.set_tags(actor, WS, project, "run", run_id, {"team": "nlp", "stage": "eval"})
    assert first.record["tags"] == {"stage": "eval", "team": "nlp"} and not first.replayed
    again = await ledger.set_tags(actor, WS, project, "run", run_id, {"team": "nlp"})
    assert again.replayed and again.cursor is None
    await ledger.set_tags(actor, WS, project, "run", run_id, {"team": "vision"})
    gone = await ledger.unset_tags(actor, WS, project, "run", run_id, ["stage", "never-set"])
    assert gone.record["tags"] == {"team": "vision"} and gone.record["removed"] == ["stage"]
    events = [e for e in (await ledger.events_page(WS, project, after_cursor=0, limit=100)).events]
    labelled = [(e.event_type, e.payload) for e in events if e.event_type.startswith("tags.")]
    assert labelled == [
        ("tags.set", {"entity_kind": "run", "entity_id": run_id, "tags": {"team": "nlp", "stage": "eval"}}),
        ("tags.set", {"entity_kind": "run", "entity_id": run_id, "tags": {"team": "vision"}}),
        ("tags.unset", {"entity_kind": "run", "entity_id": run_id, "keys": ["stage"]}),
    ]
    assert all(e.run_id == run_id for e in events if e.event_type.startswith("tags."))
    assert (await ledger.verify())["ok"] is True


async def test_a_note_is_replaced_with_who_and_when_and_its_history_kept(ledger: Ledger, actor: Actor) -> None:
    project, run_id = await _run(ledger, actor)
    await ledger.set_note(actor, WS, project, "run", run_id, "lr too high")
    written = await ledger.set_note(actor, WS, project, "run", run_id, "lr fine after warmup")
    note = written.record["note"]
    assert note["text"] == "lr fine after warmup" and note["set_by"] == actor.actor_id and note["set_at"]
    cleared = await ledger.set_note(actor, WS, project, "run", run_id, "")
    assert cleared.record["note"] is None
    texts = [
        e.payload["text"]
        for e in (await ledger.events_page(WS, project, after_cursor=0, limit=100)).events
        if e.event_type == "note.set"
    ]
    assert texts == ["lr too high", "lr fine after warmup", ""]


async def test_lists_find_runs_by_tag_and_carry_their_tags(ledger: Ledger, actor: Actor) -> None:
    project, tagged = await _run(ledger, actor)
    _, other = await _run(ledger, actor, dataset_version_id="traces-v2")
    await ledger.set_tags(actor, WS, project, "run", tagged, {"team": "nlp"})
    await ledger.set_tags(actor, WS, project, "run", other, {"team": "vision"})
    found = await ledger.list_runs(WS, project, tags=[("team", "nlp")])
    assert [(r["run_id"], r["tags"]) for r in found] == [(tagged, {"team": "nlp"})]
    assert {r["run_id"] for r in await ledger.list_runs(WS, project, tags=[("team", None)])} == {tagged, other}
    assert await ledger.list_runs(WS, project, tags=[("team", "nlp"), ("stage", None)]) == []
    # A value that reads as SQL is a value like any other: it matches nothing and changes nothing.
    assert await ledger.list_runs(WS, project, tags=[("team", "nlp' OR '1'='1")]) == []


async def test_model_versions_and_campaign_lists_filter_by_tag(ledger: Ledger, actor: Actor) -> None:
    project, _ = await _run(ledger, actor)
    await ledger.set_tags(actor, WS, project, "model_version", "tiny-v1", {"release": "candidate"})
    found = await ledger.list_model_versions(WS, project, tags=[("release", "candidate")])
    assert [(v["model_version_id"], v["tags"]) for v in found] == [("tiny-v1", {"release": "candidate"})]
    assert await ledger.list_model_versions(WS, project, tags=[("release", "final")]) == []
    assert await ledger.list_campaigns(WS, project, tags=[("release", None)]) == []


async def test_an_entity_elsewhere_is_not_found_and_nothing_is_written(ledger: Ledger, actor: Actor) -> None:
    project, run_id = await _run(ledger, actor)
    await ledger.create_project(actor, "other-ws", ProjectSpec(project_id=project, name="theirs"))
    before = ledger.last_cursor
    with pytest.raises(NotFound, match="No run"):
        await ledger.set_tags(actor, "other-ws", project, "run", run_id, {"team": "x"})
    with pytest.raises(NotFound, match="No campaign 'c1'"):
        await ledger.set_note(actor, WS, project, "campaign", "c1", "text")
    with pytest.raises(NotFound, match="No model version"):
        await ledger.unset_tags(actor, WS, project, "model_version", "nope", ["team"])
    assert ledger.last_cursor == before


async def test_an_entity_holds_at_most_max_tags(ledger: Ledger, actor: Actor) -> None:
    project, run_id = await _run(ledger, actor)
    await ledger.set_tags(actor, WS, project, "run", run_id, {f"k{i}": "v" for i in range(MAX_TAGS)})
    with pytest.raises(InvalidInput, match=f"limit of {MAX_TAGS}"):
        await ledger.set_tags(actor, WS, project, "run", run_id, {"one-more": "v"})
    assert len((await ledger.labels_of(WS, project, "run", run_id))["tags"]) == MAX_TAGS


@pytest.mark.parametrize(
    "tags",
    [
        {"a'; DROP TABLE runs; --": "x"},
        {"": "x"},
        {"-lead": "x"},
        {"k" * (TAG_KEY_MAX + 1): "x"},
        {"api_token": "x"},
        {"team": "line\nbreak"},
        {"team": "v" * (TAG_VALUE_MAX + 1)},
        {f"k{i}": "v" for i in range(MAX_TAGS + 1)},
        {},
    ],
)
def test_hostile_or_oversized_tags_are_refused_at_the_edge(tags: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        TagsSpec(tags=tags)


def test_notes_over_2000_characters_are_refused_and_tag_words_parse() -> None:
    with pytest.raises(ValidationError):
        NoteSpec(text="x" * 2001)
    assert parse_tags(["team=nlp", "url=a=b"]) == {"team": "nlp", "url": "a=b"}
    assert parse_tag("team") == ("team", None)
    with pytest.raises(InvalidInput, match="names no value"):
        parse_tags(["team"])
    with pytest.raises(InvalidInput, match="is not a tag key"):
        parse_tag("a'; DROP=1")
