"""One path for every hold: the card is parked for a person and the operator is told.

``place_hold`` parks the card (``Board.hold``: ``blocked``, a question naming the cycle,
its bound and the way out, ``meta.hold_*``) and raises an alert in the same transaction
(key ``hold|<card>|r<round>|<cycle>``), which the notifier (``notifier.flush``) sends to
``--notify`` once. The cycle names what looped: ``no_delivery``, ``hang``,
``agent_failure``, ``crash``, ``dispatch``, ``admission``, ``boundary``, ``scope``,
``rework``, ``review_verdict``, ``route``, ``stop`` (a person stopped the running turn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laneboard.domain.model import Card
from laneboard.store.tx import Tx
from laneboard.supervisor.alerts import raise_alert

if TYPE_CHECKING:
    from laneboard.supervisor.runtime import Runtime

HOLD_SEVERITY = "warning"


def place_hold(
    rt: Runtime,
    tx: Tx,
    card: Card,
    cycle: str,
    bound: int,
    detail: str,
    *,
    reason: str = "resource",
    fix: str = "",
    announce: bool = True,
    question: str | None = None,
) -> Card:
    """Hold ``card`` at the bound of ``cycle`` inside ``tx`` and raise its alert.

    ``reason`` is the kind of hold (``resource``, ``decision``, ``configuration``,
    ``boundary_violation``); ``fix`` (for a configuration hold) says what to repair
    before releasing; ``announce=False`` is for a caller that raises its own, more
    specific alert for the hold in the same transaction; ``question`` replaces the
    hold comment's text. A card that cannot be held (done, canceled, already blocked) is
    returned unchanged and nothing is raised.
    """
    held = rt.board.hold(tx, rt.actor, card, cycle, bound, detail, reason=reason, question=question)
    if held is card or held.version == card.version:
        return held
    if fix:
        tx.update_card(held.id, held.version, {"meta": {**held.meta, "hold_fix": fix}})
        fresh = tx.card(held.id)
        held = fresh if fresh is not None else held
    if not announce:
        return held
    raise_alert(
        tx,
        f"hold|{card.ref}|r{card.delivery_round}|{cycle}",
        f"held at {held.meta.get('hold_at')}",
        HOLD_SEVERITY,
        {
            "alert": "hold",
            "row": "hold",
            "card": card.ref,
            "cycle": cycle,
            "bound": bound,
            "reason": reason,
            "detail": detail,
            "fix": fix,
            "round": card.delivery_round,
            "release": f"lb card move {card.ref} todo",
        },
        actor=rt.actor,
        card_id=card.id,
        project_id=card.project_id,
    )
    return held


def hold_card(
    rt: Runtime,
    card_id: int,
    cycle: str,
    bound: int,
    detail: str,
    *,
    reason: str = "resource",
    fix: str = "",
) -> Card | None:
    """``place_hold`` in its own transaction, for a caller that holds no transaction."""
    with rt.store.write() as tx:
        card = tx.card(card_id, lock=True)
        if card is None:
            return None
        return place_hold(rt, tx, card, cycle, bound, detail, reason=reason, fix=fix)
