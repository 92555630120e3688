"""Candidate ordering.

Cards are ordered by priority tier first (0 before 3). Within a tier the weight
adds the minutes spent in the current status, half the card's age in minutes,
30 minutes per card that transitively waits on it (downstream fan-out) and any
SLA pressure in minutes; the heaviest card comes first, ties go to the lower id.
"""

from __future__ import annotations

from dataclasses import dataclass

from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.model import Card

FANOUT_MINUTES = 30.0


@dataclass(frozen=True)
class Weighted:
    card: Card
    weight: float
    fanout: int


def weight(card: Card, now_ms: int, fanout: int, sla_pressure_min: float = 0.0) -> float:
    in_status = max(0, now_ms - card.status_since) / MINUTE_MS
    age = max(0, now_ms - card.created_at) / MINUTE_MS
    return in_status + age / 2 + FANOUT_MINUTES * fanout + sla_pressure_min


def order(cards: list[Card], now_ms: int, fanout: dict[int, int]) -> list[Weighted]:
    rows = [Weighted(c, weight(c, now_ms, fanout.get(c.id, 0)), fanout.get(c.id, 0)) for c in cards]
    rows.sort(key=lambda w: (w.card.priority, -w.weight, w.card.id))
    return rows
