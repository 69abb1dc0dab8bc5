"""Pure checks on what enters the ledger: identifiers, digests, metric values and JSON payloads."""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from typing import Annotated, Any

from bashgym.client.errors import InvalidInput, PayloadTooLarge
from bashgym.client.states import TRANSITIONS
from pydantic import AfterValidator, Field

IDENTIFIER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
IDENTIFIER_MAX = 160
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_PAYLOAD_BYTES = 128 * 1024

SECRET_KEYS = frozenset(
    {
        "token",
        "password",
        "secret",
        "api_key",
        "apikey",
        "authorization",
        "credential",
        "credentials",
        "private_key",
        "access_token",
        "refresh_token",
        "client_secret",
    }
)
SECRET_SUFFIXES = ("_password", "_token", "_secret", "_api_key", "_private_key", "_credentials")
RAW_DATA_KEYS = frozenset({"raw_data", "dataset_rows", "examples"})


def check_identifier(value: str, *, field: str = "identifier") -> str:
    """Return value when it is a valid BashGym identifier, else raise InvalidInput naming the field."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be a non-empty identifier.")
    if len(value) > IDENTIFIER_MAX:
        raise InvalidInput(f"{field} is {len(value)} characters long; the maximum is {IDENTIFIER_MAX}.")
    if not IDENTIFIER_RE.match(value):
        raise InvalidInput(
            f"{field} {value!r} is not a valid identifier.",
            hint="Use letters, digits and _ . : - only, starting with a letter or digit.",
        )
    return value


def check_digest(value: str, *, field: str = "digest") -> str:
    """Return value when it is a lowercase sha256 hex digest."""
    if not isinstance(value, str) or not DIGEST_RE.match(value):
        raise InvalidInput(f"{field} must be a lowercase sha256 hex digest (64 characters of 0-9a-f).")
    return value


METRIC_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")  # as trainers name them: train.loss, eval/pass_at_1
METRIC_NAME_MAX = 200
SCOPE_RE = re.compile(r"^(project|campaign-[A-Za-z0-9][A-Za-z0-9_.:-]*)$")
RUN_STATES = tuple(TRANSITIONS)


def check_run_status(value: str) -> str:
    """A filter on run status names one of the run states; anything else would match nothing, silently."""
    if value not in RUN_STATES:
        raise InvalidInput(f"status {value!r} is not a run state.", hint=f"Use one of {', '.join(RUN_STATES)}.")
    return value


def check_metric_name(value: str) -> str:
    """A metric filter names what a metric batch could have stored (MetricPoint.metric takes the same pattern)."""
    if len(value) > METRIC_NAME_MAX or not METRIC_NAME_RE.match(value):
        raise InvalidInput(
            f"metric {value!r} is not a metric name.",
            hint="Metric names are letters, digits and _ . : / -, starting with a letter or digit (train.loss).",
        )
    return value


def check_scope(value: str) -> str:
    if len(value) > IDENTIFIER_MAX or not SCOPE_RE.match(value):
        raise InvalidInput(
            f"scope {value!r} is not a budget scope.", hint="Use `project`, or `campaign-<campaign_id>`."
        )
    return value


def check_timestamp(value: str, *, field: str) -> str:
    """An ISO 8601 date or time (UTC when it names no zone), as the ledger's timestamps compare."""
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{field} {value!r} is not an ISO 8601 date or time.",
            hint="For example 2026-11-29 or 2026-11-29T09:00:00Z.",
        ) from None
    return value


def check_finite(value: float, *, field: str = "value") -> float:
    if not math.isfinite(value):
        raise InvalidInput(f"{field} is {value}; metric values must be finite numbers.")
    return value


def _identifier(value: str) -> str:
    if not IDENTIFIER_RE.match(value) or len(value) > IDENTIFIER_MAX:
        raise ValueError(
            f"{value!r} is not a valid identifier: 1..{IDENTIFIER_MAX} of letters, digits, _ . : -, "
            "starting with a letter or digit"
        )
    return value


def _digest(value: str) -> str:
    if not DIGEST_RE.match(value):
        raise ValueError("must be a lowercase sha256 hex digest (64 characters of 0-9a-f)")
    return value


Identifier = Annotated[str, AfterValidator(_identifier)]
Digest = Annotated[str, AfterValidator(_digest)]

# A Hugging Face Hub repo id, `org/name`: letters, digits and _ . - (the Hub also refuses `..` and `--`). It never
# starts with `/`, `.` or `~` and holds one `/`, so it is never taken for an absolute or climbing path.
HUB_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
HUB = "hf://"
MODEL_SOURCES = (
    "hf://ORG/NAME (a Hub repo id), file:///DIR (a directory in a data root), bashgym://models/ID (files uploaded for "
    "the project: bashgym model register --dir) or bashgym://runs/RUN (a run of the project)"
)


def hub_repo_of(source_uri: str) -> str | None:
    """The Hub repo id an `hf://` model source names, or None when it names none (a path, a bad id)."""
    repo = source_uri.removeprefix(HUB)
    if not source_uri.startswith(HUB) or not HUB_REPO_RE.match(repo) or ".." in repo or "--" in repo:
        return None
    return repo


def _model_source(value: str) -> str:
    if value.startswith(HUB) and hub_repo_of(value) is None:
        raise ValueError(f"{value!r} names no Hub repo (hf://ORG/NAME); a model's source is {MODEL_SOURCES}")
    return value


# What a model version's files are; an `hf://` one is checked here, the rest where the daemon resolves them.
ModelSourceUri = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_model_source)]


def is_secret_key(key: str) -> bool:
    """True when a mapping key names a secret (token, password, ...), whatever its value."""
    lowered = key.lower()
    return lowered in SECRET_KEYS or lowered.endswith(SECRET_SUFFIXES)


def find_forbidden_key(payload: Any, path: str = "$") -> tuple[str, str] | None:
    """Return (path, reason) of the first secret-shaped or raw-data key in payload, or None."""
    if isinstance(payload, dict):
        for key, value in payload.items():
            child = f"{path}.{key}"
            if is_secret_key(str(key)):
                return child, "looks like a secret"
            if str(key).lower() in RAW_DATA_KEYS:
                return child, "holds raw data"
            found = find_forbidden_key(value, child)
            if found:
                return found
    elif isinstance(payload, list):
        for index, value in enumerate(payload):
            found = find_forbidden_key(value, f"{path}[{index}]")
            if found:
                return found
    return None


def check_payload(payload: Any, *, field: str = "payload") -> str:
    """Validate a JSON payload for storage and return its canonical text."""
    found = find_forbidden_key(payload)
    if found:
        key_path, reason = found
        hint = (
            "Reference secrets by name (an environment variable or file path in config), never by value."
            if reason == "looks like a secret"
            else "Keep raw rows in BashGym artifact storage and reference them by digest."
        )
        raise InvalidInput(f"{field} key {key_path} {reason}; it cannot be stored in the ledger.", hint=hint)
    try:
        text = canonical_json(payload)
    except ValueError as exc:
        raise InvalidInput(f"{field} is not valid JSON: {exc}.") from exc
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(
            f"{field} is {size} bytes; the ledger stores at most {MAX_PAYLOAD_BYTES} bytes per payload.",
            hint="Store large content as an artifact and reference it by sha256.",
        )
    return text


def canonical_json(value: Any) -> str:
    """Key-sorted compact JSON without NaN: the form every digest is computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def identity_digest(identity: dict[str, Any]) -> str:
    """Digest of a record's identity; callers leave timestamps and status out of identity."""
    return sha256_text(canonical_json(identity))


def differing_fields(stored: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(key for key in stored.keys() | new.keys() if stored.get(key) != new.get(key))
