"""What every part of the board shares: its attributes, lookups and the write guards."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from laneboard.board import authority, inputs
from laneboard.domain import claims, weights
from laneboard.domain.model import Actor, ActorKind, Card, Evidence, Project
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, not_found
from laneboard.store import Store, rows
from laneboard.store.tx import Tx

if TYPE_CHECKING:
    from laneboard.board.links import Candidate
    from laneboard.board.recent import RecentCards


# the runtime's hooks (laneboard.workspace.hooks.install): verify a delivery before
# in_progress -> in_review (evidence, or LaneboardError VERIFICATION_FAILED), land the
# lane before -> done (the merge commit or None, or LaneboardError LANDING_BLOCKED)
DeliveryGate = Callable[[Card], list[Evidence]]
LandingGate = Callable[[Card], "str | None"]
# ... and ask a shared git remote a person names (url, base_ref) before it is written:
# returns, or raises LaneboardError REMOTE_UNREACHABLE / WORKSPACE_BASE_UNRESOLVED
# a shared remote's check: its URL, the base branch (None: the remote's default) and how
# the calling command names a base branch, for the fix (``{}``: the branch)
RemoteCheck = Callable[[str, "str | None", str], None]


class BoardBase:
    """The parts of ``Board`` (``service.Board``) each derive from this class: it declares
    the attributes ``Board.__init__`` sets and the methods one part calls on another."""

    store: Store
    windows: claims.ClaimWindows
    sla: weights.SlaLimits  # the patrol limits that press on the candidate order
    delivery_gate: DeliveryGate | None
    landing_gate: LandingGate | None
    remote_check: RemoteCheck | None
    recent: RecentCards  # the copies of the cards its last writes returned (``recent``)

    if TYPE_CHECKING:  # defined by the parts (moves, claims, links, runs)

        def check_run_for_card(self, tx: Tx, run_id: int, project_id: int) -> None: ...

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
            run_id: int | None = None,
            run_statuses: Sequence[str] = (),
            limit: int = 50,
        ) -> list[Candidate]: ...

    def _card(self, tx: Tx, ref: str | int, *, lock: bool = False) -> Card:
        r = inputs.card_ref(ref)
        card = tx.card(r, lock=lock) if isinstance(r, int) else tx.card_by_ref(r, lock=lock)
        if card is None:
            raise not_found("card", ref, "list cards with: lb card list")
        return card

    def _project(self, tx: Tx, ref: str | int) -> Project:
        p: Project | None
        if isinstance(ref, str) and not (ref.isascii() and ref.isdigit()):
            inputs.text(ref, "a project reference", limit=500)
            p = tx.project(key=ref) or tx.project(name=ref)
        else:
            p = tx.project(id=inputs.row_id(int(ref), "project"))
        if p is None:
            raise not_found("project", ref, "add it with: lb project add KEY --path DIR")
        return p

    @staticmethod
    def _may_write(actor: Actor, card: Card | claims.ClaimProbe) -> None:
        authority.may_write(actor, card)

    @staticmethod
    def _fence(actor: Actor, card: Card) -> None:
        """A claimant's write must carry the current claim epoch."""
        if actor.kind is not ActorKind.AGENT or card.status is not Status.IN_PROGRESS:
            return
        if actor.epoch is not None and actor.epoch != card.claim_epoch:
            raise authority.stale_epoch(actor.epoch, card)
        if actor.epoch is not None and actor.card_id == card.id:
            return  # a credential issued for this very claim (e.g. the Director's, per row)
        if card.holder is not None and actor.name != card.holder:
            raise LaneboardError(
                "STALE_CLAIM",
                f"{card.ref} is held by {card.holder}, not {actor.name}",
                "claim the card before writing to it",
            )

    def _save(self, tx: Tx, card: Card, fields: dict[str, Any]) -> Card:
        row = tx.update_card_returning(card.id, card.version, fields)
        if row is None:
            raise LaneboardError(
                "VERSION_CONFLICT",
                f"{card.ref} changed while it was being written",
                "read it again and retry",
            )
        return rows.card(row, card.depends_on)  # a write never changes the links
