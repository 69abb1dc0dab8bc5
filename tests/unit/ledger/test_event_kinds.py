"""Guard: every event kind the ledger accepts round-trips through it with its payload intact."""

from __future__ import annotations

from typing import Any

import pytest
from bashgym.client.errors import InvalidInput
from bashgym.client.specs import Actor, ProjectSpec
from bashgym.ledger.events import EVENT_TYPES, GateFinding
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import Tx

pytestmark = pytest.mark.anyio
SAMPLES: dict[Any, Any] = {
    str: "sample",
    int: 3,
    float: 0.5,
    list[str]: ["a", "b"],
    bool: True,
    list[dict[str, Any]]: [{"machine_rank": 0}],
    list[GateFinding]: [{"code": "no_evaluation", "message": "m", "next_action": "n"}],
}


def minimal_payload(event_type: str) -> dict[str, Any]:
    model = EVENT_TYPES[event_type]
    payload = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if getattr(annotation, "__origin__", None) is dict:  # a mapping of names to values: params, tags
            payload[name] = {"name": "value"}
            continue
        if annotation not in SAMPLES:  # optional fields such as `str | None`
            annotation = next((a for a in getattr(annotation, "__args__", ()) if a in SAMPLES), str)
        payload[name] = SAMPLES[annotation]
    return payload


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
async def test_each_event_kind_round_trips(ledger: Ledger, actor: Actor, event_type: str) -> None:
    await ledger.create_project(actor, "default", ProjectSpec(project_id="p", name="P"))
    payload = minimal_payload(event_type)

    def append(tx: Tx) -> int:
        return tx.append_event(event_type, workspace_id="default", project_id="p", payload=payload)

    cursor = await ledger.write(actor, append)
    page = await ledger.events_page("default", "p", after_cursor=cursor - 1, limit=1)
    assert page.events[0].event_type == event_type
    assert page.events[0].payload == payload
    assert (await ledger.verify())["ok"] is True


async def test_an_unknown_event_kind_is_refused(ledger: Ledger, actor: Actor) -> None:
    def append(tx: Tx) -> int:
        return tx.append_event("run.exploded", workspace_id="default", project_id="p", payload={})

    with pytest.raises(InvalidInput, match="Unknown event type"):
        await ledger.write(actor, append)
