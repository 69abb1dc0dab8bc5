"""The run and attempt state machine: a fixed transition table and pure checks over it."""

from __future__ import annotations

from bashgym.client.errors import InvalidTransition

TERMINAL = frozenset({"completed", "failed", "cancelled"})

TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"preparing", "running", "unknown", "failed", "cancelled"}),
    "preparing": frozenset({"running", "unknown", "failed", "cancelled"}),
    "running": frozenset({"paused", "unknown", "completed", "failed", "cancelled"}),
    "paused": frozenset({"running", "failed", "cancelled"}),
    "unknown": frozenset({"running", "completed", "failed", "cancelled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}


def is_allowed(current: str, target: str) -> bool:
    """A self-transition is allowed (and is a no-op); terminal states allow nothing else."""
    return current == target or target in TRANSITIONS[current]


def check_transition(current: str, target: str, *, what: str) -> None:
    if is_allowed(current, target):
        return
    allowed = sorted(TRANSITIONS[current])
    if current in TERMINAL:
        hint = f"{what} is {current}, a terminal state; start a new attempt or a new run instead."
    else:
        hint = f"From {current}, {what} may move to: {', '.join(allowed)}."
    raise InvalidTransition(f"{what} cannot move from {current} to {target}.", hint=hint)


def event_type_for(previous: str, target: str) -> str:
    match target:
        case "running":
            return "run.resumed" if previous in {"paused", "unknown"} else "run.started"
        case _:
            return f"run.{target}"
