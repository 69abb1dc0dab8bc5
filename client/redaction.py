"""The one redaction function: logs, ledger payloads, API answers, reports, receipts and bot posts use it.

Secrets never leave the process that holds them: secret-shaped keys lose their values, and strings
lose anything that looks like a credential or equals a secret value this process was told about.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

REDACTED = "[redacted]"

_PATTERNS = (
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
    r"\b(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}",
    r"\bhf_[A-Za-z0-9]{20,}\b",  # Hugging Face
    r"\bbgy_[A-Za-z0-9_-]{20,}",  # BashGym API tokens
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",  # GitHub
    r"\bsk-[A-Za-z0-9_-]{20,}\b",  # OpenAI-style keys
    r"\bnvapi-[A-Za-z0-9_-]{20,}\b",  # NVIDIA
    r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key ids
    r"\b[MN][A-Za-z\d]{23,25}\.[\w-]{6}\.[\w-]{27,}\b",  # Discord bot tokens
)
# One alternation: scanning a string once costs a ninth of nine separate scans, and every string
# written to the ledger passes here.
_CREDENTIAL = re.compile("|".join(f"(?:{pattern})" for pattern in _PATTERNS))
_SHORTEST = 8

_known_lock = threading.Lock()
_known_values: tuple[str, ...] = ()


def register_secret_values(values: list[str]) -> None:
    """Tell the redactor about secret values this process holds (tokens read from the environment)."""
    global _known_values
    with _known_lock:
        merged = {*_known_values, *(v for v in values if v and len(v) >= 6)}
        # Longest first, so a secret that contains another is replaced whole.
        _known_values = tuple(sorted(merged, key=len, reverse=True))


def redact_text(text: str) -> str:
    if len(text) < _SHORTEST:
        return text
    for value in _known_values:
        if value in text:
            text = text.replace(value, REDACTED)
    return _CREDENTIAL.sub(REDACTED, text)


def contains_secret(text: str) -> bool:
    return redact_text(text) != text


def redact_values(value: Any) -> Any:
    """A copy of value with every credential-shaped string redacted, whatever key it sits under: the keys of
    a request or a manifest are settings (`token_level_loss`), not secrets."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_values(item) for item in value]
    return value


def redact(value: Any) -> Any:
    """Return a copy of value with secret-shaped keys and credential-looking strings redacted."""
    from bashgym.client.validation import is_secret_key

    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


# A path segment that is a token: a webhook URL (Discord's /api/webhooks/<id>/<token>, Slack's
# /services/T../B../<token>) is its own credential, so whoever sees the URL can post as the sink's owner.
# A segment is one when it is long, of a token's alphabet, and its pieces between separators hold at least
# _RANDOM_CHARS characters that read as neither words (`webhooks`, `IncomingWebhook`) nor numbers (an id).
_TOKEN_SEGMENT = re.compile(r"[A-Za-z0-9._~=+@:-]{20,}")
_SEPARATORS = re.compile(r"[._~=+@:-]")
_CAMEL_WORD = re.compile(r"(?:[A-Z]?[a-z]+)+")
_RANDOM_CHARS = 16


def _reads_as_word(piece: str) -> bool:
    if piece.isdigit() or (piece.isalpha() and piece.isupper() and len(piece) < _RANDOM_CHARS):
        return True  # an id, or an acronym; a long run of capitals is a token (or its placeholder)
    # Mostly lower case, each capital starting a word: random letters alternate cases far more often.
    return bool(_CAMEL_WORD.fullmatch(piece)) and sum(c.isupper() for c in piece) * 3 <= len(piece)


def _is_opaque_segment(segment: str) -> bool:
    """Whether a URL path segment is a random token (a webhook's secret) rather than words and ids."""
    if not _TOKEN_SEGMENT.fullmatch(segment):
        return False
    return sum(len(p) for p in _SEPARATORS.split(segment) if not _reads_as_word(p)) >= _RANDOM_CHARS


def url_credentials(url: str) -> list[str]:
    """Where a URL carries a credential: a password in its userinfo, a query value, a token in its path, or
    a credential-shaped part. Webhook URLs often do; a stored or displayed URL must not."""
    parts = urlsplit(url)
    found = []
    if parts.password:
        found.append("a password in the userinfo (user:password@)")
    if parts.query:
        found.append("a query string (?...), where endpoints put their tokens")
    if any(_is_opaque_segment(segment) for segment in parts.path.split("/")):
        found.append("a token in its path (a long random segment, where webhook URLs put theirs)")
    if contains_secret(url):
        found.append("a credential-shaped value")
    return found


def redact_url(url: str) -> str:
    """A URL as it may be shown: userinfo, query values and token-like path segments replaced, credential-shaped
    parts redacted; the scheme, host and the path's words and ids stay, so the endpoint is still recognisable."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    if parts.username:
        netloc = f"{REDACTED}@{netloc}"
    path = "/".join(REDACTED if _is_opaque_segment(s) else s for s in parts.path.split("/"))
    query = "&".join(f"{name}={REDACTED}" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    return redact_text(urlunsplit((parts.scheme, netloc, path, query, "")))


_URL = re.compile(r"https?://[^\s'\"<>]+")


def redact_url_text(text: str) -> str:
    """Text (an error message) with every URL in it shown as redact_url shows it."""
    return _URL.sub(lambda match: redact_url(match.group(0)), redact_text(text))
