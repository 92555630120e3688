"""A person's decisions on a card in one call each: answer its open question, reject a
delivery with the items that must be fixed."""

from __future__ import annotations

from collections.abc import Sequence

from laneboard.board import inputs
from laneboard.board.authority import Caller, require
from laneboard.board.moves import MovesMixin
from laneboard.domain import verdict
from laneboard.domain.model import Actor, Card, CommentKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, bad_input

MUST_FIX_MAX = verdict.ITEMS_MAX


class DecisionsMixin(MovesMixin):
    def answer(self, actor: Actor, ref: str | int, body: str) -> Card:
        """Answer a card's open question: an ``answer`` comment that releases the card to
        ``todo`` (from ``awaiting``, or from ``in_progress`` where its agent waits on the
        question, which then resumes in the same session)."""
        require(actor, Caller.PERSON, "answer questions")
        body = inputs.text(body, "answer", limit=100_000, multiline=True)
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            if card.status not in (Status.AWAITING, Status.IN_PROGRESS):
                raise LaneboardError(
                    "CONFLICT",
                    f"{card.ref} is {card.status.value}: it has no open question",
                    "answer an awaiting card, or an in_progress card whose agent asked",
                )
            c = tx.insert_comment(card.id, CommentKind.ANSWER.value, body, actor)
            tx.append_event("comment.added", actor, card_id=card.id, project_id=card.project_id,
                            run_id=card.run_id, payload={"comment": c.id, "kind": "answer"})  # fmt: skip
            new = self._save(tx, card, {
                "status": Status.TODO.value, "status_since": tx.now(), "holder": None,
                "holder_kind": None, "session_id": None, "heartbeat_at": None,
                "meta": {**card.meta, "answer_comment": c.id},
            })  # fmt: skip
            tx.append_event("card.moved", actor, card_id=card.id, project_id=card.project_id,
                            run_id=card.run_id,
                            payload={"ref": card.ref, "from": card.status.value, "to": "todo",
                                     "reason": "human answered", "round": card.delivery_round})  # fmt: skip
        return new

    def reject(
        self, actor: Actor, ref: str | int, must_fix: Sequence[str], note: str | None = None
    ) -> Card:
        """Reject a delivery waiting for human acceptance: the must-fix items join the
        acceptance list as ``R<round>.<n>``, a ``change`` comment lists them, and the card
        goes back to ``todo`` for its next round."""
        require(actor, Caller.PERSON, "reject deliveries")
        items = [inputs.text(x, "must-fix item", limit=verdict.ITEM_MAX) for x in must_fix]
        if not items or len(items) > MUST_FIX_MAX:
            raise bad_input(
                f"a rejection needs 1 to {MUST_FIX_MAX} must-fix items, got {len(items)}",
                "name what must change: --must-fix TEXT (repeat it for each item)",
            )
        if note is not None:
            note = inputs.text(note, "note", limit=20_000, empty=True, multiline=True)
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            if card.status is not Status.IN_REVIEW or card.acceptance_mode.value != "human":
                raise LaneboardError(
                    "CONFLICT",
                    f"{card.ref} is not waiting for human acceptance "
                    f"({card.status.value}, acceptance {card.acceptance_mode.value})",
                    "reject an in_review card whose acceptance mode is human",
                )
            rnd = card.delivery_round
            crit = verdict.must_fix_criteria(card.acceptance, items, rnd, card.ref)
            added = crit[len(card.acceptance) :]
            body = f"rejected by {actor.name} (round {rnd}). Must fix:\n" + "\n".join(
                f"{c.id}: {c.text}" for c in added
            )
            if note:
                body += f"\n\n{note}"
            c = tx.insert_comment(card.id, CommentKind.CHANGE.value, body, actor)
            tx.append_event("comment.added", actor, card_id=card.id, project_id=card.project_id,
                            run_id=card.run_id, payload={"comment": c.id, "kind": "change"})  # fmt: skip
            meta = {**card.meta, "human_reject": {"round": rnd, "by": actor.name,
                                                  "items": [x.id for x in added]}}  # fmt: skip
            new = self.move_in(tx, actor, card, Status.TODO, reason="rejected", new_round=True,
                               fields={"acceptance": [x.to_dict() for x in crit], "meta": meta})  # fmt: skip
        return new
