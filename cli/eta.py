"""The time left of a long step, from the rate measured over its recent progress.

The demo's ETA was the average rate since the bar appeared, fed every 25 training steps: on a busy machine it jumped
from 38 to 64 minutes as a slow spell entered the average late. A window of recent samples follows a change of
pace within WINDOW_S, and no estimate is shown until MIN_SPAN_S of progress has been seen.
"""

from __future__ import annotations

from collections import deque

WINDOW_S = 60.0  # the rate of the last minute: long enough to smooth a burst, short enough to follow the load
MIN_SPAN_S = 3.0  # fewer seconds of progress than this give no rate worth showing


class StepRate:
    """Units done per second over the last WINDOW_S, from (time, done) samples; times come from the caller's clock."""

    def __init__(self, *, window_s: float = WINDOW_S, min_span_s: float = MIN_SPAN_S) -> None:
        self.window_s = window_s
        self.min_span_s = min_span_s
        self._samples: deque[tuple[float, int]] = deque()

    def observe(self, now: float, done: int) -> None:
        """Record progress `done` at `now`; a repeat of the last count only moves nothing."""
        if self._samples and done < self._samples[-1][1]:
            self._samples.clear()  # counted from the start again (a resumed run): the old pace says nothing
        if not self._samples or done != self._samples[-1][1]:
            self._samples.append((now, done))
        # Keep one sample older than the window, so the window is always covered end to end.
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()

    def per_second(self, now: float) -> float | None:
        """The measured rate, or None before MIN_SPAN_S of progress; a stall since the last step counts."""
        if len(self._samples) < 2:
            return None
        (first_at, first_done), (_, last_done) = self._samples[0], self._samples[-1]
        span = now - first_at
        if span < self.min_span_s or last_done <= first_done:
            return None
        return (last_done - first_done) / span

    def seconds_left(self, now: float, done: int, total: int) -> float | None:
        rate = self.per_second(now)
        if rate is None or done >= total:
            return None
        return (total - done) / rate
