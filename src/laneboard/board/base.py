"""What every part of the board shares: its attributes, lookups and the write guards."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from laneboard.board import inputs
from laneboard.domain import claims
from laneboard.domain.model import Actor, ActorKind, Card, Evidence, Project
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, not_found
from laneboard.store import Store
from laneboard.store.tx import Tx

if TYPE_CHECKING:
    from laneboard.board.links import Candidate


# the runtime's hooks (laneboard.workspace.hooks.install): verify a delivery before
# in_progress -> in_review (evidence, or LaneboardError VERIFICATION_FAILED), land the
# lane before -> done (the merge commit or None, or LaneboardError LANDING_BLOCKED)
DeliveryGate = Callable[[Card], list[Evidence]]
LandingGate = Callable[[Card], "str | None"]


class BoardBase:
    """The parts of ``Board`` (``service.Board``) each derive from this class: it declares
    the attributes ``Board.__init__`` sets and the methods one part calls on another."""

    store: Store
    windows: claims.ClaimWindows
    delivery_gate: DeliveryGate | None
    landing_gate: LandingGate | None

    if TYPE_CHECKING:  # defined by the parts (moves, claims, links)

        def move(
            self,
            actor: Actor,
            ref: str | int,
            to: str,
            *,
            reason: str | None = None,
            question: str | None = None,
            note: str | None = None,
            idempotency_key: str | None = None,
        ) -> Card: ...

        def claim(
            self,
            actor: Actor,
            ref: str | int,
            *,
            holder: str | None = None,
            session_id: str | None = None,
            idempotency_key: str | None = None,
        ) -> Card: ...

        def candidates(
            self,
            *,
            assignees: Sequence[str] = (),
            include_unassigned: bool = False,
            stale: bool = False,
            project: str | int | None = None,
            limit: int = 50,
        ) -> list[Candidate]: ...

    def _card(self, tx: Tx, ref: str | int, *, lock: bool = False) -> Card:
        r = inputs.card_ref(ref)
        cid = r if isinstance(r, int) else tx.card_id_by_ref(r)
        card = tx.card(cid, lock=lock) if cid is not None else None
        if card is None:
            raise not_found("card", ref, "list cards with: lb card list")
        return card

    def _project(self, tx: Tx, ref: str | int) -> Project:
        p: Project | None
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
            p = tx.project(id=int(ref))
        else:
            p = tx.project(key=ref) or tx.project(name=ref)
        if p is None:
            raise not_found("project", ref, "add it with: lb project add KEY --path DIR")
        return p

    @staticmethod
    def _may_write(actor: Actor, card: Card | claims.ClaimProbe) -> None:
        if actor.kind is ActorKind.AGENT and actor.card_id is not None and actor.card_id != card.id:
            raise LaneboardError(
                "FORBIDDEN",
                f"this agent credential is scoped to card {actor.card_id}, not {card.ref}",
                "agents write only the card they were dispatched for",
            )

    @staticmethod
    def _fence(actor: Actor, card: Card) -> None:
        """A claimant's write must carry the current claim epoch."""
        if actor.kind is not ActorKind.AGENT or card.status is not Status.IN_PROGRESS:
            return
        if actor.epoch is not None and actor.epoch != card.claim_epoch:
            raise LaneboardError(
                "STALE_CLAIM",
                f"claim epoch {actor.epoch} on {card.ref} is stale (current {card.claim_epoch})",
                "your claim was taken over; stop working on this card",
            )
        if actor.epoch is not None and actor.card_id == card.id:
            return  # a credential issued for this very claim (e.g. the Director's, per row)
        if card.holder is not None and actor.name != card.holder:
            raise LaneboardError(
                "STALE_CLAIM",
                f"{card.ref} is held by {card.holder}, not {actor.name}",
                "claim the card before writing to it",
            )

    def _save(self, tx: Tx, card: Card, fields: dict[str, Any]) -> Card:
        if not tx.update_card(card.id, card.version, fields):
            raise LaneboardError(
                "VERSION_CONFLICT",
                f"{card.ref} changed while it was being written",
                "read it again and retry",
            )
        fresh = tx.card(card.id)
        assert fresh is not None
        return fresh
