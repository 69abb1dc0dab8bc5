"""A campaign's training window: training starts only inside it, including windows that wrap midnight."""

from __future__ import annotations

from datetime import UTC, datetime

from bashgym.daemon.campaigns.lifecycle import in_training_window

NIGHT = {"start": "22:00", "end": "06:00", "timezone": "Europe/Paris"}


def test_a_window_that_wraps_midnight() -> None:
    assert in_training_window(NIGHT, datetime(2026, 11, 30, 22, 30, tzinfo=UTC))  # 23:30 in Paris
    assert in_training_window(NIGHT, datetime(2026, 11, 30, 2, 0, tzinfo=UTC))  # 03:00
    assert not in_training_window(NIGHT, datetime(2026, 11, 30, 12, 0, tzinfo=UTC))  # 13:00
    assert not in_training_window(NIGHT, datetime(2026, 11, 30, 5, 0, tzinfo=UTC))  # 06:00, the end is open


def test_a_daytime_window_and_no_window() -> None:
    day = {"start": "09:00", "end": "17:00", "timezone": "UTC"}
    assert in_training_window(day, datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
    assert not in_training_window(day, datetime(2026, 11, 30, 17, 0, tzinfo=UTC))
    assert in_training_window(None, datetime(2026, 11, 30, 3, 0, tzinfo=UTC))
