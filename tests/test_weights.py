"""The candidate weight's SLA pressure, case by case (``domain.weights``), no database."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.test_domain_rules import T0, make_card

from laneboard.domain import weights
from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.model import CardKind
from laneboard.domain.status import Status

M = MINUTE_MS
REVIEW = {"review_of": "WEB-1", "review_round": 1}


def card(id: int, minutes_ago: float, **over: Any) -> Any:
    """A card created and put in its status ``minutes_ago`` before ``NOW``."""
    at = NOW - int(minutes_ago * M)
    return make_card(id=id, ref=f"WEB-{id}", created_at=at, status_since=at, **over)


NOW = T0 + 1000 * M


@dataclass(frozen=True)
class PressureCase:
    card: Any
    row: str | None
    pressure_min: float
    limits: weights.SlaLimits = field(default_factory=weights.SlaLimits)


PRESSURE = {
    "plain todo card: no SLA, no pressure": PressureCase(card(1, 500), None, 0),
    "review card at half its limit: none yet": PressureCase(
        card(1, 30, meta=REVIEW), "review_aging", 0
    ),
    "review card near its limit: 2 per minute": PressureCase(
        card(1, 45, meta=REVIEW), "review_aging", 30
    ),
    "review card at its limit: the limit": PressureCase(
        card(1, 60, meta=REVIEW), "review_aging", 60
    ),
    "review card past its limit: 4 per minute more": PressureCase(
        card(1, 90, meta=REVIEW), "review_aging", 60 + 4 * 30
    ),
    "configured review_aging limit": PressureCase(
        card(1, 20, meta=REVIEW), "review_aging", 20, weights.SlaLimits(review_aging_min=20)
    ),
    "meta.review_of null: not a review card": PressureCase(
        card(1, 90, meta={"review_of": None}), None, 0
    ),
    "review card blocked: not measured while it waits here": PressureCase(
        card(1, 90, meta=REVIEW, status=Status.BLOCKED), None, 0
    ),
    "stale claim: heartbeat_stale from the heartbeat": PressureCase(
        card(1, 500, status=Status.IN_PROGRESS, heartbeat_at=NOW - 45 * M),
        "heartbeat_stale",
        (30 - 15) * 2 + 4 * 15,
    ),
    "claim without a heartbeat: measured from the claim": PressureCase(
        card(1, 40, status=Status.IN_PROGRESS), "heartbeat_stale", 30 + 4 * 10
    ),
    "epic in progress: never pulses, no pressure": PressureCase(
        card(1, 500, status=Status.IN_PROGRESS, kind=CardKind.EPIC), None, 0
    ),
    "review card in progress: the heavier of its two rows": PressureCase(
        card(1, 50, meta=REVIEW, status=Status.IN_PROGRESS, heartbeat_at=NOW - 40 * M),
        "heartbeat_stale",
        30 + 4 * 10,  # review_aging would be 2 * 20 = 40
    ),
    "heartbeat in the future: nothing measured yet": PressureCase(
        card(1, 100, status=Status.IN_PROGRESS, heartbeat_at=NOW + 5 * M),
        "heartbeat_stale",
        0,
    ),
}


@pytest.mark.parametrize("case", PRESSURE.values(), ids=PRESSURE.keys())
def test_sla_pressure(case: PressureCase) -> None:
    clock = weights.card_sla_clock(case.card, NOW, case.limits)
    assert (clock.row if clock else None) == case.row
    got = clock.pressure_ms(NOW) / M if clock else 0.0
    assert got == case.pressure_min
    plain = weights.weight(case.card, NOW, 0)
    assert weights.weight(case.card, NOW, 0, clock) == plain + case.pressure_min


@dataclass(frozen=True)
class OrderCase:
    cards: list[Any]
    expected: list[int]


def _review(id: int, minutes_ago: float, **over: Any) -> Any:
    return card(id, minutes_ago, meta=REVIEW, **over)


ORDER = {
    "a review card near its SLA outranks an otherwise equal card": OrderCase(
        [card(1, 45), _review(2, 45)], [2, 1]
    ),
    "a review card over its SLA outranks an otherwise equal card": OrderCase(
        [card(1, 75), _review(2, 75)], [2, 1]
    ),
    "a review card early in its SLA ties: the lower id first": OrderCase(
        [_review(1, 20), card(2, 20)], [1, 2]
    ),
    "an overdue review card outranks an older plain card": OrderCase(
        # plain: 100 + 50 = 150; review: 90 + 45 + 60 + 4 * 30 = 315
        [card(1, 100), _review(2, 90)],
        [2, 1],
    ),
    "a much older plain card still outranks a fresh review card": OrderCase(
        [card(1, 300), _review(2, 40)], [1, 2]
    ),
    "tier still dominates: priority 1 before an overdue priority 2 review card": OrderCase(
        [_review(1, 900), card(2, 0, priority=1)], [2, 1]
    ),
    "a stale claim with its pressure outranks an equally old todo card": OrderCase(
        [card(1, 60), card(2, 60, status=Status.IN_PROGRESS, heartbeat_at=NOW - 60 * M)],
        [2, 1],
    ),
}


@pytest.mark.parametrize("case", ORDER.values(), ids=ORDER.keys())
def test_order_with_sla_pressure(case: OrderCase) -> None:
    sla = {c.id: s for c in case.cards if (s := weights.card_sla_clock(c, NOW))}
    got = weights.order(case.cards, NOW, {}, sla)
    assert [w.card.id for w in got] == case.expected
    assert [c.id for c in weights.first(case.cards, NOW, {}, len(case.cards), sla)] == [
        w.card.id for w in got
    ]
    for w in got:
        clock = sla.get(w.card.id)
        assert w.sla_row == (clock.row if clock else None)
        assert w.sla_pressure == (clock.pressure_ms(NOW) / M if clock else 0.0)
        assert w.weight == weights.weight(w.card, NOW, 0) + w.sla_pressure


def test_no_sla_map_means_no_pressure() -> None:
    overdue = _review(1, 500)
    (w,) = weights.order([overdue], NOW, {})
    assert w.sla_pressure == 0.0 and w.sla_row is None
    assert w.weight == 500 + 250
