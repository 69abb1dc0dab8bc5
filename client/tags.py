"""Tags and notes on a run, a model version or a campaign: the wire specs, and the `key=value` form the CLI, the
bot and the API's `tag=` filter read."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Literal

from bashgym.client.errors import InvalidInput
from bashgym.client.specs import Spec
from bashgym.client.validation import check_identifier, is_secret_key
from pydantic import AfterValidator, Field

EntityKind = Literal["run", "model_version", "campaign"]
ENTITY_KINDS: tuple[EntityKind, ...] = ("run", "model_version", "campaign")
TAG_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")  # as metric names: team, stage:eval, mlflow.user
# As a tracked run's tags always were (client/tracking.py), so every run's tags are one model.
TAG_KEY_MAX = 200
TAG_VALUE_MAX = 500
MAX_TAGS = 200  # on one entity, all writes together
NOTE_MAX = 2000
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def check_tag_key(key: str) -> str:
    if not key or len(key) > TAG_KEY_MAX or not TAG_KEY_RE.match(key):
        raise InvalidInput(
            f"Tag key {key[:40]!r} is not a tag key.",
            hint=f"Use 1-{TAG_KEY_MAX} letters, digits and _ . : / - starting with a letter or digit (team, "
            "stage:eval).",
            details={"key": key[:TAG_KEY_MAX]},
        )
    if is_secret_key(key):
        raise InvalidInput(
            f"Tag key {key!r} reads as a secret's name; a tag is shown to every reader of the project.",
            hint="Keep secrets out of tags; name the tag for what it marks.",
        )
    return key


def check_tag_value(value: str) -> str:
    if len(value) > TAG_VALUE_MAX or _CONTROL_RE.search(value):
        raise InvalidInput(
            f"Tag value {value[:40]!r} is over {TAG_VALUE_MAX} characters or holds a control character.",
            hint="Keep a tag's value short and on one line; a longer text belongs in the note.",
        )
    return value


def is_tag(key: str, value: str) -> bool:
    """Whether another system's tag (an MLflow run's) is one BashGym can hold as it is."""
    try:
        check_tag_key(key), check_tag_value(value)
    except InvalidInput:
        return False
    return True


def check_note(text: str) -> str:
    if "\x00" in text:
        raise InvalidInput("A note cannot hold a NUL character.", hint="Send plain text.")
    return text


def _as_value_error(check: Callable[[str], str]) -> Callable[[str], str]:
    """The check as pydantic's validators raise: a ValueError carrying the message, then the hint."""

    def validate(value: str) -> str:
        try:
            return check(value)
        except InvalidInput as exc:
            raise ValueError(f"{exc} {exc.hint}".strip()) from None

    return validate


TagKey = Annotated[str, AfterValidator(_as_value_error(check_tag_key))]
TagValue = Annotated[str, AfterValidator(_as_value_error(check_tag_value))]


class TagsSpec(Spec):
    """Tags to set (a key already set takes the new value)."""

    tags: Annotated[dict[TagKey, TagValue], Field(min_length=1, max_length=MAX_TAGS)]


class NoteSpec(Spec):
    """The entity's note; an empty text clears it (the history stays in the events)."""

    text: Annotated[str, Field(max_length=NOTE_MAX), AfterValidator(_as_value_error(check_note))]


# Each kind's place in the API, as its other routes write it (daemon/api/tags.py serves these).
ENTITY_PATHS: dict[str, str] = {"run": "runs", "model_version": "model-versions", "campaign": "campaigns"}


def entity_path(project: str, kind: EntityKind, entity_id: str) -> str:
    """`/v1/projects/P/runs/R` and its kin: where an entity's tags and note are written (`/tags`, `/note`)."""
    check_identifier(project, field="project")
    check_identifier(entity_id, field=kind.replace("_", " "))
    return f"/v1/projects/{project}/{ENTITY_PATHS[kind]}/{entity_id}"


def parse_tag(text: str) -> tuple[str, str | None]:
    """`key=value` as a (key, value) pair, `key` alone as (key, None): has the tag, whatever its value."""
    key, has_value, value = text.partition("=")
    return check_tag_key(key.strip()), (check_tag_value(value) if has_value else None)


def parse_tags(items: list[str]) -> dict[str, str]:
    """`key=value` words (the CLI's, the bot's) as the tags to set; each must name a value."""
    tags: dict[str, str] = {}
    for item in items:
        key, value = parse_tag(item)
        if value is None:
            raise InvalidInput(f"Tag {item!r} names no value.", hint=f"Write it as {key}=VALUE.")
        tags[key] = value
    return tags
