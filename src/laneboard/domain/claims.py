"""Claim rules: who may take a card, and when.

Thresholds are layered: the same holder may re-claim after ``fresh`` (10 min);
an ``in_progress`` card enters the stale recovery pool after ``stale`` (30 min);
anyone may take it over after ``takeover`` (6 h). Every successful claim bumps
the card's claim epoch, the fencing token carried by the claimant's later writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from laneboard.domain.clock import HOUR_MS, MINUTE_MS
from laneboard.domain.model import Card
from laneboard.domain.status import Status


class ClaimState(Protocol):
    """What the claim rules read of a card (a ``Card`` or a lighter claim probe)."""

    @property
    def status(self) -> Status: ...
    @property
    def assignee(self) -> str | None: ...
    @property
    def holder(self) -> str | None: ...
    @property
    def heartbeat_at(self) -> int | None: ...
    @property
    def status_since(self) -> int: ...


@dataclass(frozen=True)
class ClaimProbe:
    """A card's claim fields, read without decoding the rest of the row."""

    id: int
    ref: str
    status: Status
    assignee: str | None
    holder: str | None
    heartbeat_at: int | None
    status_since: int
    claim_epoch: int  # the claim it was read at (a stale credential's test)


@dataclass(frozen=True)
class ClaimWindows:
    fresh_ms: int = 10 * MINUTE_MS
    stale_ms: int = 30 * MINUTE_MS
    takeover_ms: int = 6 * HOUR_MS


DEFAULT_WINDOWS = ClaimWindows()


@dataclass(frozen=True)
class ClaimVerdict:
    ok: bool
    takeover: bool = False
    reason: str = ""


def claim_verdict(
    card: ClaimState,
    holder: str,
    deps_done: bool,
    now_ms: int,
    windows: ClaimWindows = DEFAULT_WINDOWS,
    *,
    may_bypass_assignee: bool = False,
) -> ClaimVerdict:
    """Decide a claim. The store's claim statement encodes exactly these rules."""
    if card.status is Status.TODO:
        if not deps_done:
            return ClaimVerdict(False, reason="a dependency is not done yet")
        if card.assignee not in (None, holder) and not may_bypass_assignee:
            return ClaimVerdict(False, reason=f"the card is assigned to {card.assignee}")
        return ClaimVerdict(True)
    if card.status is Status.IN_PROGRESS:
        beat = card.heartbeat_at
        age = None if beat is None else now_ms - beat
        if card.holder == holder and (age is None or age >= windows.fresh_ms):
            return ClaimVerdict(True)
        # anyone: 6 h after the last heartbeat, or — for a card sent back for rework,
        # which has none until its holder claims it again — 6 h after that move
        since = beat if beat is not None else card.status_since
        if now_ms - since >= windows.takeover_ms:
            return ClaimVerdict(True, takeover=card.holder != holder)
        if card.holder == holder:
            return ClaimVerdict(False, reason="your own claim is still fresh")
        if beat is None:
            return ClaimVerdict(False, reason=f"held by {card.holder}, who has it back for rework")
        mins = int(now_ms - beat) // 60_000
        if now_ms - beat < windows.fresh_ms:
            return ClaimVerdict(
                False, reason=f"held by {card.holder} with a live heartbeat ({mins} min old)"
            )
        left = max(1, -(-(since + windows.takeover_ms - now_ms) // 60_000))
        return ClaimVerdict(
            False,
            reason=f"held by {card.holder}, whose heartbeat is {mins} min old (stale, but "
            f"anyone may take it over only after {windows.takeover_ms // 3_600_000} h: "
            f"{left} min from now)",
        )
    return ClaimVerdict(False, reason=f"the card is {card.status.value}")


def is_stale(card: Card, now_ms: int, windows: ClaimWindows = DEFAULT_WINDOWS) -> bool:
    """In the ``candidates --stale`` recovery pool."""
    if card.status is not Status.IN_PROGRESS:
        return False
    return card.heartbeat_at is None or now_ms - card.heartbeat_at >= windows.stale_ms
