"""The one redaction function, and the rate limiter's arithmetic."""

from __future__ import annotations

import pytest
from bashgym.client.errors import InvalidInput, RateLimited
from bashgym.client.redaction import REDACTED, redact, redact_text, register_secret_values
from bashgym.daemon.authority import RateLimiter, check_grantable


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer abcdefghijklmnop",
        "token hf_abcdefghijklmnopqrstuvwxyz0123 leaked",
        "bgy_" + "a" * 43,
        "ghp_" + "b" * 36,
        "sk-" + "c" * 40,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----",
        "AKIAABCDEFGHIJKLMNOP",
    ],
)
def test_credential_shaped_strings_are_redacted(text: str) -> None:
    assert REDACTED in redact_text(text)


def test_ordinary_text_is_left_alone() -> None:
    text = "loss 0.31 at step 40; tokens_per_second=1200; see run-0192f3a1b2c4"
    assert redact_text(text) == text


def test_registered_secret_values_are_redacted_wherever_they_appear() -> None:
    register_secret_values(["plain-looking-secret-42"])
    assert redact_text("connect with plain-looking-secret-42 now") == f"connect with {REDACTED} now"


def test_nested_structures_lose_secret_keys_and_secret_values() -> None:
    value = {"api_key": "x", "nested": [{"note": "Bearer abcdefghijkl"}], "steps": 3}
    assert redact(value) == {"api_key": REDACTED, "nested": [{"note": REDACTED}], "steps": 3}


def test_the_rate_limiter_refills_at_its_rate() -> None:
    limiter = RateLimiter(per_minute=60, burst=2)
    limiter.check("alice", now_s=0.0)
    limiter.check("alice", now_s=0.0)
    with pytest.raises(RateLimited) as limited:
        limiter.check("alice", now_s=0.0)
    assert limited.value.retry_after_s == 1
    limiter.check("alice", now_s=1.0)
    limiter.check("bob", now_s=0.0)


def test_grants_name_known_profiles_and_capabilities() -> None:
    assert "training.stop" in check_grantable("lead", [])
    assert "promotion.override" not in check_grantable("admin", [])
    with pytest.raises(InvalidInput, match="Unknown capability"):
        check_grantable("", ["training.nuke"])
    with pytest.raises(InvalidInput):
        check_grantable("", [])
