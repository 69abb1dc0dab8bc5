"""The wire contract of a tracked run: a training process BashGym did not launch logs to the daemon (bashgym.track)."""

from __future__ import annotations

from typing import Annotated, Literal

from bashgym.client.environment import RunEnvironment
from bashgym.client.errors import InvalidInput
from bashgym.client.specs import MAX_METRIC_BATCH, MetricPoint, Spec
from bashgym.client.tags import MAX_TAGS, TagKey, TagValue
from bashgym.client.validation import Identifier
from pydantic import Field

# The lane and surface of a tracked run: its compute is the user's own, and it reports to the daemon itself.
TRACKED_LANE, TRACKED_SURFACE = "external", "tracked"
TRACKED_TARGET = f"{TRACKED_LANE}:{TRACKED_SURFACE}"  # the run's compute target, which names its lane

ParamValue = Annotated[str, Field(max_length=2000)] | float | int | bool | None
ParamName = Annotated[str, Field(min_length=1, max_length=200)]
Params = Annotated[dict[ParamName, ParamValue], Field(max_length=2000)]
# A tracked run's tags are tags like any run's (client/tags.py): the same keys and values, searchable.
Tags = Annotated[dict[TagKey, TagValue], Field(max_length=MAX_TAGS)]


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
    # Sent from the spool of a process that died, by another one: the points are the run's, but the run's own
    # process was not heard from, so a run marked `unknown` stays so.
    resent: bool = False


class TrackedEnd(Spec):
    status: Literal["completed", "failed"]
    error_summary: Annotated[str, Field(max_length=4000)] = ""


ARTIFACT_NAME_MAX = 500


def check_artifact_name(name: str) -> str:
    """An artifact's name in its run, a relative POSIX path (`model/config.json`) of printable segments: the name
    ends the artifact's uri (`bashgym://runs/RUN/NAME`), so it never starts at the root, climbs out with `..`, or
    hides a NUL or a backslash."""
    where = "Name the artifact with a relative path such as `model` or `checkpoint-500/config.json`."
    if not name or len(name) > ARTIFACT_NAME_MAX:
        raise InvalidInput(f"An artifact name is 1 to {ARTIFACT_NAME_MAX} characters; this one is {len(name)}.")
    if not name.isprintable() or "\\" in name:
        raise InvalidInput(f"Artifact name {name!r} holds a control character or a backslash.", hint=where)
    if name.startswith("/"):
        raise InvalidInput(f"Artifact name {name!r} is absolute; an artifact is named within its run.", hint=where)
    if any(part in {"", ".", ".."} for part in name.split("/")):
        raise InvalidInput(f"Artifact name {name!r} has an empty, `.` or `..` segment.", hint=where)
    return name
