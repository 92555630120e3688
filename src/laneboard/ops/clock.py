"""``LANEBOARD_NOW``: a clock pinned for reproducible scripts and tests.

A board whose clock is pinned (``lb serve`` or ``lb start`` run with ``LANEBOARD_NOW``)
accepts a caller's own pinned time for the length of one call, so a scripted run against
a remote board gets the same timestamps as against a local one. A board on the real
clock never does: there the time is always the server's.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from laneboard.errors import LaneboardError

_AT: contextvars.ContextVar[int | None] = contextvars.ContextVar("laneboard_now", default=None)
HEADER = "X-Laneboard-Now"


def pinned_ms(raw: str) -> int:
    """``LANEBOARD_NOW`` as epoch milliseconds (ISO-8601 or digits)."""
    if raw.isdigit():
        return int(raw)
    from datetime import datetime

    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"LANEBOARD_NOW={raw!r} is not a time",
            "use ISO-8601 like 2026-01-01T00:00:00Z or epoch ms",
        ) from None
    return int(dt.timestamp() * 1000)


class PinnedClock:
    """Always the pinned time, or the time a call pinned for itself (``at``)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        override = _AT.get()
        return self.ms if override is None else override

    @contextlib.contextmanager
    def at(self, ms: int | None) -> Iterator[None]:
        if ms is None:
            yield
            return
        token = _AT.set(ms)
        try:
            yield
        finally:
            _AT.reset(token)


def call_time(clock: object, raw: str | None) -> int | None:
    """The time a caller pinned, when this board's clock is pinned too (else ``None``)."""
    if not raw or not isinstance(clock, PinnedClock):
        return None
    if not raw.isdigit() or len(raw) > 15:
        raise LaneboardError("BAD_INPUT", f"{HEADER} is not epoch ms", "send digits only")
    return int(raw)
