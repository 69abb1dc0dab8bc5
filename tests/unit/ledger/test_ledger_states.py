"""The run and attempt state machine, walked through the ledger for every pair of states."""

from __future__ import annotations

import itertools

import pytest
from bashgym.client.errors import InvalidTransition
from bashgym.client.specs import Actor, RunRegistration, RunTransition
from bashgym.client.states import TERMINAL, TRANSITIONS, is_allowed
from bashgym.ledger.store import Ledger

pytestmark = pytest.mark.anyio
STATES = list(TRANSITIONS)
# A shortest legal path from queued to each state.
PATH_TO = {
    "queued": [],
    "preparing": ["preparing"],
    "running": ["running"],
    "paused": ["running", "paused"],
    "unknown": ["running", "unknown"],
    "completed": ["running", "completed"],
    "failed": ["failed"],
    "cancelled": ["cancelled"],
}
ALLOWED = {
    ("queued", "preparing"),
    ("queued", "running"),
    ("queued", "failed"),
    ("queued", "cancelled"),
    ("queued", "unknown"),  # after a restart that cannot prove how a launch went
    ("preparing", "unknown"),
    ("preparing", "running"),
    ("preparing", "failed"),
    ("preparing", "cancelled"),
    ("running", "paused"),
    ("running", "unknown"),
    ("running", "completed"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("paused", "running"),
    ("paused", "failed"),
    ("paused", "cancelled"),
    ("unknown", "running"),
    ("unknown", "completed"),
    ("unknown", "failed"),
    ("unknown", "cancelled"),
}


def test_the_table_is_exactly_the_documented_one() -> None:
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == ALLOWED
    assert all(not TRANSITIONS[state] for state in TERMINAL)


@pytest.mark.parametrize("current, target", list(itertools.product(STATES, STATES)))
async def test_every_transition_is_allowed_or_refused_as_the_table_says(
    ledger: Ledger, actor: Actor, current: str, target: str
) -> None:
    run = (await ledger.register_run(actor, "default", RunRegistration(method="sft"))).record
    project, run_id = run["project_id"], run["run_id"]
    for step in PATH_TO[current]:
        await ledger.transition_run(actor, "default", project, run_id, RunTransition(status=step))
    cursor = ledger.last_cursor
    if current == target:
        result = await ledger.transition_run(actor, "default", project, run_id, RunTransition(status=target))
        assert result.replayed is True
        assert ledger.last_cursor == cursor
    elif (current, target) in ALLOWED:
        result = await ledger.transition_run(actor, "default", project, run_id, RunTransition(status=target))
        assert result.record["status"] == target
        assert ledger.last_cursor == cursor + 1
    else:
        with pytest.raises(InvalidTransition) as refused:
            await ledger.transition_run(actor, "default", project, run_id, RunTransition(status=target))
        assert refused.value.code == "ledger_invalid_transition"
        assert ledger.last_cursor == cursor
        detail = await ledger.get_run("default", project, run_id)
        assert detail["status"] == current


def test_is_allowed_treats_a_self_transition_as_a_no_op() -> None:
    assert all(is_allowed(state, state) for state in STATES)


async def test_transitions_append_named_events(ledger: Ledger, actor: Actor) -> None:
    run = (await ledger.register_run(actor, "default", RunRegistration(method="sft"))).record
    for status in ("running", "paused", "running", "completed"):
        await ledger.transition_run(actor, "default", run["project_id"], run["run_id"], RunTransition(status=status))
    page = await ledger.events_page("default", run["project_id"], after_cursor=0, limit=100)
    kinds = [e.event_type for e in page.events if e.event_type.startswith("run.")]
    assert kinds == ["run.registered", "run.queued", "run.started", "run.paused", "run.resumed", "run.completed"]
