"""Injectable clocks. Every time the board reads comes from a Clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


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
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
