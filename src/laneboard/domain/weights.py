"""Candidate ordering.

Cards are ordered by priority tier first (0 before 3): no weight lifts a card into
another tier. Within a tier the heaviest card comes first, ties go to the lower id. The
weight, in minutes, is

    minutes in the current status
  + half the card's age in minutes
  + 30 per card that transitively waits on it (downstream fan-out)
  + SLA pressure

SLA pressure comes from the patrol row that measures a card while it waits to be
claimed (``sla_clock``): a review card not yet in review is measured by ``review_aging``
from its creation; an ``in_progress`` card offered for stale recovery by
``heartbeat_stale`` from its last heartbeat. With ``T`` the wall-clock time the row has
measured and ``L`` its limit, the pressure is nothing for the first half of the limit,
then 2 minutes per minute up to the limit (``L`` at the limit) and 4 minutes per minute
past it. A card that no row measures has none.

The order is computed on exact integers (``order_key``), so the store can rank in SQL
to the same order (``store.claim_sql``): the weight in minutes is only its rendering.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.model import Card, CardKind

FANOUT_MINUTES = 30.0
SLA_RAMP = 2  # weight minutes per measured minute over the second half of the limit
SLA_OVERDUE = 4  # weight minutes per measured minute past the limit

REVIEW_AGING = "review_aging"
HEARTBEAT_STALE = "heartbeat_stale"


class Weighable(Protocol):
    """What the ordering reads of a card (a ``Card`` or a lighter row)."""

    @property
    def id(self) -> int: ...

    @property
    def priority(self) -> int: ...

    @property
    def status_since(self) -> int: ...

    @property
    def created_at(self) -> int: ...


W = TypeVar("W", bound=Weighable)


@dataclass(frozen=True)
class SlaLimits:
    """The patrol limits that weigh in, in minutes (the ``[patrol]`` settings' names)."""

    review_aging_min: int = 60
    stale_min: int = 30


DEFAULT_SLA = SlaLimits()


@dataclass(frozen=True)
class SlaClock:
    """The SLA row measuring a waiting card: its name, since when (ms), its limit."""

    row: str
    since: int
    limit_min: int

    def pressure_ms(self, now_ms: int) -> int:
        """The pressure in milliseconds of weight (exact: a limit is a whole minute)."""
        measured = max(0, now_ms - self.since)
        limit = self.limit_min * MINUTE_MS
        half = limit // 2
        ramp = max(0, min(measured, limit) - half)
        return SLA_RAMP * ramp + SLA_OVERDUE * max(0, measured - limit)


def sla_clock(
    *,
    status: str,
    review: bool,
    epic: bool,
    created_at: int,
    heartbeat_at: int | None,
    status_since: int,
    now_ms: int,
    limits: SlaLimits = DEFAULT_SLA,
) -> SlaClock | None:
    """The row that measures a candidate while it waits; the heavier at ``now_ms`` of two.

    ``review``: the card is a review card (``meta.review_of``). Only ``todo`` and
    ``in_progress`` cards are candidates; a plain ``todo`` card has no SLA.
    """
    clocks: list[SlaClock] = []
    if review and status in ("todo", "in_progress"):
        clocks.append(SlaClock(REVIEW_AGING, created_at, limits.review_aging_min))
    if status == "in_progress" and not epic:
        since = heartbeat_at if heartbeat_at is not None else status_since
        clocks.append(SlaClock(HEARTBEAT_STALE, since, limits.stale_min))
    if not clocks:
        return None
    return max(clocks, key=lambda c: (c.pressure_ms(now_ms), c.row))


def card_sla_clock(card: Card, now_ms: int, limits: SlaLimits = DEFAULT_SLA) -> SlaClock | None:
    """``sla_clock`` of a full card."""
    return sla_clock(
        status=card.status.value,
        review=card.meta.get("review_of") is not None,
        epic=card.kind is CardKind.EPIC,
        created_at=card.created_at,
        heartbeat_at=card.heartbeat_at,
        status_since=card.status_since,
        now_ms=now_ms,
        limits=limits,
    )


@dataclass(frozen=True)
class Weighted(Generic[W]):
    card: W
    weight: float
    fanout: int
    sla_pressure: float = 0.0  # minutes of the weight that are SLA pressure
    sla_row: str | None = None


def weight_units(card: Weighable, now_ms: int, fanout: int, sla: SlaClock | None = None) -> int:
    """The weight in half-milliseconds: ``weight`` × 2 × ``MINUTE_MS``, exactly."""
    in_status = max(0, now_ms - card.status_since)
    age = max(0, now_ms - card.created_at)
    pressure = sla.pressure_ms(now_ms) if sla is not None else 0
    return 2 * in_status + age + int(2 * FANOUT_MINUTES) * MINUTE_MS * fanout + 2 * pressure


def weight(card: Weighable, now_ms: int, fanout: int, sla: SlaClock | None = None) -> float:
    """The weight in minutes."""
    return weight_units(card, now_ms, fanout, sla) / (2 * MINUTE_MS)


def order_key(
    card: Weighable, now_ms: int, fanout: int, sla: SlaClock | None = None
) -> tuple[int, int, int]:
    """Tier, then heavier first, then the lower id: the whole order, in integers."""
    return (card.priority, -weight_units(card, now_ms, fanout, sla), card.id)


def order(
    cards: list[W],
    now_ms: int,
    fanout: Mapping[int, int],
    sla: Mapping[int, SlaClock] | None = None,
) -> list[Weighted[W]]:
    """Every card in candidate order, with its weight and the parts it is explained by."""
    clocks = sla or {}
    rows: list[tuple[tuple[int, int, int], Weighted[W]]] = []
    for c in cards:
        f, s = fanout.get(c.id, 0), clocks.get(c.id)
        key = order_key(c, now_ms, f, s)
        pressure = s.pressure_ms(now_ms) / MINUTE_MS if s is not None else 0.0
        w = Weighted(c, -key[1] / (2 * MINUTE_MS), f, pressure, s.row if s else None)
        rows.append((key, w))
    rows.sort(key=lambda r: r[0])
    return [w for _, w in rows]


def first(
    cards: list[W],
    now_ms: int,
    fanout: Mapping[int, int],
    n: int,
    sla: Mapping[int, SlaClock] | None = None,
) -> list[W]:
    """The first ``n`` cards of ``order``: only the tiers that can hold them are weighed."""
    clocks = sla or {}
    tiers = sorted({c.priority for c in cards})
    pool: list[W] = []
    for tier in tiers:
        pool.extend(c for c in cards if c.priority == tier)
        if len(pool) >= n:
            break

    def key(c: W) -> tuple[int, int, int]:
        return order_key(c, now_ms, fanout.get(c.id, 0), clocks.get(c.id))

    return heapq.nsmallest(n, pool, key=key)
