"""The cards this board's own writes just returned: where its next write on them starts.

A caller that claims a card and then reports and moves it writes three or four times in
a row on a card nobody else touches meanwhile. Each of these writes checks the caller's
authority and the move on a card it read; with the copy its previous write returned, it
checks on that copy instead and writes on the copy's version (compare-and-swap). Every
write of a card bumps its version, so a write that matches it proves the card is still
the copy checked: the outcome is the one a fresh read just before the write would have
given. When the card moved on meanwhile nothing is written and the write reads the card
afresh, as without the copy; a copy is never the reason for a refusal either (a check
that refuses on it is asked again on a fresh read). A card's links are read back with
every write on it, since linking does not bump the version.
"""

from __future__ import annotations

import threading
from typing import Any

from laneboard.board.claims import ClaimsMixin
from laneboard.domain.model import Actor, Card

RECENT_CARDS = 256  # copies kept per board (the oldest is forgotten first)


class RecentCards:
    """The last copies of cards this board wrote, by id and by ref (safe across threads)."""

    def __init__(self, size: int = RECENT_CARDS) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._cards: dict[int, Card] = {}
        self._refs: dict[str, int] = {}

    def get(self, ref: int | str) -> Card | None:
        """The copy of the card ``ref`` (its id, or its ref as ``inputs.card_ref`` gives)."""
        with self._lock:
            cid = ref if isinstance(ref, int) else self._refs.get(ref)
            return self._cards.get(cid) if cid is not None else None

    def put(self, card: Card) -> Card:
        """Keep ``card`` as the copy of its card (replacing an older one); returns it."""
        with self._lock:
            self._cards.pop(card.id, None)  # re-inserted last: the newest is kept longest
            self._cards[card.id] = card
            self._refs[card.ref] = card.id
            while len(self._cards) > self.size:
                old = self._cards.pop(next(iter(self._cards)))
                self._refs.pop(old.ref, None)
        return card

    def drop(self, card_id: int) -> None:
        """Forget the copy of a card (it moved on since)."""
        with self._lock:
            old = self._cards.pop(card_id, None)
            if old is not None:
                self._refs.pop(old.ref, None)


class RecentClaimsMixin(ClaimsMixin):
    """Claims keep the card they return as its copy (its report and moves follow)."""

    recent: RecentCards

    def claim(self, *args: Any, **kwargs: Any) -> Card:
        return self.recent.put(super().claim(*args, **kwargs))

    def claim_next(self, actor: Actor, *args: Any, **kwargs: Any) -> Card:
        return self.recent.put(super().claim_next(actor, *args, **kwargs))
