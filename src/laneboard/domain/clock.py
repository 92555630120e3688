"""Injectable clocks. Every time the board reads comes from a Clock."""

from __future__ import annotations

import time
from datetime import date
from functools import lru_cache
from typing import Protocol

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to (tests, simulations)."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:
        self.t = start_ms

    def now_ms(self) -> int:
        return self.t

    def advance(self, ms: int = 0, *, seconds: float = 0, minutes: float = 0) -> None:
        self.t += ms + int(seconds * 1000) + int(minutes * MINUTE_MS)


def iso(ms: int | None) -> str | None:
    """Render epoch milliseconds as an ISO-8601 UTC string (None stays None)."""
    if ms is None:
        return None
    return _iso(ms)


@lru_cache(maxsize=32768)
def _iso(ms: int) -> str:
    """A pure function of its input, kept: lists and pages render the same cards again."""
    day, rest = divmod(ms, DAY_MS)
    second, milli = divmod(rest, 1000)
    hour, second = divmod(second, 3600)
    minute, second = divmod(second, 60)
    return f"{_day(day)}T{hour:02d}:{minute:02d}:{second:02d}.{milli:03d}Z"


@lru_cache(maxsize=4096)
def _day(day: int) -> str:
    """The calendar date of a day since the epoch (a list's timestamps share a few days)."""
    return date.fromordinal(EPOCH_ORDINAL + day).isoformat()
