"""A card's history: comments, delivery reports and the event log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from laneboard.board import inputs
from laneboard.board.base import BoardBase
from laneboard.domain.model import Actor, Comment, CommentKind, Event, Evidence, Report, parse_enum
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, bad_input


class HistoryMixin(BoardBase):
    def comment(self, actor: Actor, ref: str | int, body: str, kind: str = "note") -> Comment:
        k = parse_enum(CommentKind, kind, "comment kind")
        body = inputs.text(body, "comment", limit=100_000)
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            self._may_write(actor, card)
            c = tx.insert_comment(card.id, k.value, body, actor)
            tx.append_event(
                "comment.added",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"comment": c.id, "kind": k.value},
            )
            if card.status is Status.AWAITING and actor.is_human:
                self._save(
                    tx,
                    card,
                    {
                        "status": Status.TODO.value,
                        "status_since": tx.now(),
                        "holder": None,
                        "holder_kind": None,
                        "session_id": None,
                        "heartbeat_at": None,
                        "meta": {**card.meta, "answer_comment": c.id},
                    },
                )
                tx.append_event(
                    "card.moved",
                    actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    run_id=card.run_id,
                    payload={
                        "ref": card.ref,
                        "from": "awaiting",
                        "to": "todo",
                        "reason": "human answered",
                        "round": card.delivery_round,
                    },
                )
            return c

    def comments(self, ref: str | int, *, after: int = 0) -> list[Comment]:
        with self.store.read() as tx:
            return tx.comments(self._card(tx, ref).id, after=after)

    def report(
        self,
        actor: Actor,
        ref: str | int,
        body: str,
        *,
        commit: str | None = None,
        evidence: Iterable[Evidence | dict[str, Any]] = (),
        verdict: str | None = None,
        round_: int | None = None,
    ) -> Report:
        body = inputs.text(body, "report body", limit=200_000)
        ev = [e if isinstance(e, Evidence) else Evidence.from_dict(e) for e in evidence]
        if verdict is not None and verdict not in ("APPROVE", "REJECT"):
            raise bad_input(f"verdict {verdict!r} is not valid", "use APPROVE or REJECT")
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            self._may_write(actor, card)
            self._fence(actor, card)
            rnd = round_ if round_ is not None else card.delivery_round
            if rnd != card.delivery_round:
                raise bad_input(
                    f"round {rnd} is not {card.ref}'s round ({card.delivery_round})",
                    "report on the current round",
                )
            if card.terminal:
                raise LaneboardError(
                    "ILLEGAL_TRANSITION",
                    f"{card.ref} is {card.status.value}",
                    "terminal cards take no reports",
                )
            rep = tx.upsert_report(
                card.id, rnd, body, commit, [e.to_dict() for e in ev], verdict, actor
            )
            tx.append_event(
                "report.added",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"round": rnd, "evidence": len(ev), "verdict": verdict},
            )
            return rep

    def reports(self, ref: str | int) -> list[Report]:
        with self.store.read() as tx:
            return tx.reports(self._card(tx, ref).id)

    def events(
        self,
        after: int = 0,
        *,
        card: str | int | None = None,
        project: str | int | None = None,
        run_id: int | None = None,
        limit: int = 100,
    ) -> list[Event]:
        with self.store.read() as tx:
            cid = self._card(tx, card).id if card is not None else None
            pid = self._project(tx, project).id if project is not None else None
            return tx.events(after, card_id=cid, project_id=pid, run_id=run_id, limit=limit)

    def last_events(self, n: int = 20, *, card: str | int | None = None) -> list[Event]:
        with self.store.read() as tx:
            cid = self._card(tx, card).id if card is not None else None
            return tx.last_events(n, card_id=cid)
