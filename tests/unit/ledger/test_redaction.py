"""The one redaction function, and the rate limiter's arithmetic."""

from __future__ import annotations

import pytest
from bashgym.client.errors import InvalidInput, RateLimited
from bashgym.client.redaction import (
    REDACTED,
    redact,
    redact_text,
    redact_url,
    redact_url_text,
    register_secret_values,
    url_credentials,
)
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


# Shaped like real webhook secrets (none is one): each URL is its own credential.
DISCORD_TOKEN = "kJ3x_9fQ-ZpLmW2vRt8yUq4sNb7cXe1aHg5dKo0iPzT6jYwLrVuEfBnMxS3QAC-hGt9Dq2"
SLACK_TOKEN = "xYz9AbC1dEf2GhI3jKl4MnO5"
WEBHOOK_UUID = "0192f3a1-b2c4-7d5e-8f90-1a2b3c4d5e6f"


@pytest.mark.parametrize(
    ("url", "token", "shown"),
    [
        (
            f"https://discord.com/api/webhooks/1234567890123456789/{DISCORD_TOKEN}",
            DISCORD_TOKEN,
            f"https://discord.com/api/webhooks/1234567890123456789/{REDACTED}",
        ),
        (
            f"https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/{SLACK_TOKEN}",
            SLACK_TOKEN,
            f"https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/{REDACTED}",
        ),
        (
            "https://hooks.slack.com/services/T000/B000/" + "X" * 24,
            "X" * 24,
            f"https://hooks.slack.com/services/T000/B000/{REDACTED}",
        ),
        (f"https://webhook.site/{WEBHOOK_UUID}", WEBHOOK_UUID, f"https://webhook.site/{REDACTED}"),
        (
            f"https://example.webhook.office.com/webhookb2/{WEBHOOK_UUID}@{WEBHOOK_UUID}/IncomingWebhook/{'ab12' * 8}",
            "ab12" * 8,
            f"https://example.webhook.office.com/webhookb2/{REDACTED}/IncomingWebhook/{REDACTED}",
        ),
    ],
    ids=["discord", "slack", "slack-placeholder", "webhook.site", "teams"],
)
def test_a_webhook_token_in_a_url_path_is_refused_and_shown_redacted(url: str, token: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert token not in redact_url_text(f"ConnectError posting to {url} after 3 tries")
    assert any("path" in reason for reason in url_credentials(url))


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/bashgym",
        "http://127.0.0.1:9/hook",
        "https://wiki.example.org/api/v2/IncomingWebhookHandler/release-2024-12-04-nightly",
        "https://example.com/NASA-JPL/models/model.safetensors.index.json",
    ],
)
def test_a_url_path_of_words_dates_and_ids_is_shown_as_it_is(url: str) -> None:
    assert redact_url(url) == url
    assert url_credentials(url) == []


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
