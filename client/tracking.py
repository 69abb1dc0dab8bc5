"""The wire contract of a tracked run: a training process BashGym did not launch logs to the daemon (bashgym.track)."""

from __future__ import annotations

from typing import Annotated, Literal

from bashgym.client.environment import RunEnvironment
from bashgym.client.specs import MAX_METRIC_BATCH, MetricPoint, Spec
from bashgym.client.validation import Identifier
from pydantic import Field

# The lane and surface of a tracked run: its compute is the user's own, and it reports to the daemon itself.
TRACKED_LANE, TRACKED_SURFACE = "external", "tracked"
TRACKED_TARGET = f"{TRACKED_LANE}:{TRACKED_SURFACE}"  # the run's compute target, which names its lane

ParamValue = Annotated[str, Field(max_length=2000)] | float | int | bool | None
ParamName = Annotated[str, Field(min_length=1, max_length=200)]
TagValue = Annotated[str, Field(max_length=500)]
Params = Annotated[dict[ParamName, ParamValue], Field(max_length=2000)]
Tags = Annotated[dict[ParamName, TagValue], Field(max_length=200)]


class TrackedRunOpen(Spec):
    """Open a tracked run; its project, experiment and versions are named in the query, as for a launch."""

    method: Identifier = "custom"  # what the user's script trains, in their words (sft, dpo, ...)
    params: Params = Field(default_factory=dict)
    tags: Tags = Field(default_factory=dict)
    # What the script's process measured (bashgym.trainers.contracts.runtime); the daemon computes the digest.
    environment: RunEnvironment | None = None


class TrackedValues(Spec):
    """Params and tags a tracked run logs after it opened; a later value of a name replaces the earlier one."""

    params: Params = Field(default_factory=dict)
    tags: Tags = Field(default_factory=dict)


class TrackedPoints(Spec):
    """One batch of a tracked run's metric points, sent with an Idempotency-Key: a replay adds nothing."""

    points: list[MetricPoint] = Field(min_length=1, max_length=MAX_METRIC_BATCH)


class TrackedEnd(Spec):
    status: Literal["completed", "failed"]
    error_summary: Annotated[str, Field(max_length=4000)] = ""
