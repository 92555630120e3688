"""A worker's delivery: the round's report and the move to ``in_review``, written together.

``lb card deliver`` is one operation, so it is one write: the report and the move commit
together with their two events, or nothing is written (a refused delivery leaves no
report behind; a verification's checks are recorded by the gate itself). Without a
delivery gate, on PostgreSQL, the delivery is checked on the copy of the card this
board last wrote (``board.recent``) or on a read outside any transaction, and written on
that card's version in one statement (``cas_sql.deliver_with_events``). With a gate, the
gate runs first, on a read outside any transaction, as a gated move's does; on PostgreSQL
the delivery is then written in that statement on the version the gate verified.
Otherwise, and whenever the card moved on meanwhile, it is checked and written under the
card's lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from laneboard.board import inputs
from laneboard.board.history import HistoryMixin, report_inputs
from laneboard.board.moves import MovesMixin
from laneboard.domain.model import Actor, Card, Evidence, Report
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, not_found
from laneboard.store import rows
from laneboard.store.cas_sql import deliver_with_events

# what a delivery writes: the report (body, commit, evidence items) and where it goes
Delivered = tuple[Report, Card]
Payload = tuple[str, str | None, list[dict[str, Any]]]


class DeliveriesMixin(MovesMixin, HistoryMixin):
    def deliver(
        self,
        actor: Actor,
        ref: str | int,
        body: str,
        *,
        commit: str | None = None,
        evidence: Iterable[Evidence | dict[str, Any]] = (),
    ) -> Delivered:
        """The current round's report and the move to ``in_review``, as one write."""
        body, commit, items = report_inputs(body, commit, evidence, None)
        report = (body, commit, items)
        if self.delivery_gate is None and self.store.dialect == "postgresql":
            done = self._deliver_on_copy(actor, ref, report)
            if done is not None:
                return done
        checked: Card | None = None
        verified: list[Evidence] = []
        if self.delivery_gate is not None:
            checked = self._delivery_read(actor, ref)
            if checked.status is Status.IN_PROGRESS:
                verified = list(self.delivery_gate(checked))
                if self.store.dialect == "postgresql":
                    done = self._deliver_checked(actor, checked, report, verified)
                    if done is not None:
                        return done
        return self._deliver_locked(actor, ref, report, checked, verified)

    def _deliver_checked(
        self, actor: Actor, card: Card, report: Payload, verified: list[Evidence]
    ) -> Delivered | None:
        """The one-statement delivery on the version of the card its gate verified, with
        the verified evidence. None: the card changed since, or a check refused on that
        read (the verification took a while: the locked path decides on the card now)."""
        body, commit, items = report
        try:
            fields = self._delivery_fields(actor, card, self.store.clock.now_ms())
        except LaneboardError:
            return None
        every = [*items, *(e.to_dict() for e in verified)]
        payloads = _payloads(card, items, len(verified))
        return self._deliver_on(actor, card, fields, (body, commit, every), payloads)

    def _deliver_on(
        self,
        actor: Actor,
        card: Card,
        fields: dict[str, Any],
        report: Payload,
        payloads: tuple[dict[str, Any], dict[str, Any]],
    ) -> Delivered | None:
        """The delivery written on ``card``'s version in one statement; None: it moved on."""
        got = deliver_with_events(self.store, card, fields, report, actor, payloads)
        if got is None:
            return None
        row, rep = got
        return rep, self.recent.put(rows.card(row, rows.dep_ids(row["deps"])))

    def _deliver_on_copy(self, actor: Actor, ref: str | int, report: Payload) -> Delivered | None:
        """The one-statement delivery on the board's copy of the card, else on a fresh read
        (a refusal on that read is the answer: it is the card at that instant). None: a
        check refused on the copy, or the card moved on (the locked path decides)."""
        now = self.store.clock.now_ms()
        card = self.recent.get(inputs.card_ref(ref))
        if card is None:
            with self.store.autocommit() as tx:
                card = self._card(tx, ref)
            fields = self._delivery_fields(actor, card, now)
        else:
            try:
                fields = self._delivery_fields(actor, card, now)
            except LaneboardError:
                return None  # a copy is never the reason for a refusal
        done = self._deliver_on(actor, card, fields, report, _payloads(card, report[2], 0))
        if done is None:
            self.recent.drop(card.id)
        return done

    def _delivery_read(self, actor: Actor, ref: str | int) -> Card:
        """The card a gate verifies, read outside any transaction, once the delivery is
        allowed on it (else the refusal: a refused delivery runs no checks)."""
        with self.store.autocommit() as tx:
            got = tx.card_reported(inputs.card_ref(ref))
        if got is None:
            raise not_found("card", ref, "list cards with: lb card list")
        card = got[0]
        self._delivery_fields(actor, card, self.store.clock.now_ms())
        return card

    def _delivery_fields(self, actor: Actor, card: Card, now: int) -> dict[str, Any]:
        """The move's fields, once ``actor`` may report on ``card``'s round and move it
        to ``in_review`` (the report being written with the move)."""
        self._report_round(actor, card, None, None)
        self._move_checks(actor, card, Status.IN_REVIEW)
        return self._move_changes(now, actor, card, Status.IN_REVIEW, True)

    def _deliver_locked(
        self,
        actor: Actor,
        ref: str | int,
        report: Payload,
        checked: Card | None,
        verified: list[Evidence],
    ) -> Delivered:
        body, commit, items = report
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            if checked is not None and (checked.status, checked.delivery_round) != (
                card.status,
                card.delivery_round,
            ):
                raise LaneboardError(
                    "VERSION_CONFLICT",
                    f"{card.ref} changed while it was being verified",
                    "read it again and deliver again",
                )
            fields = self._delivery_fields(actor, card, tx.now())
            every = [*items, *(e.to_dict() for e in verified)]
            rnd = card.delivery_round
            rep = tx.upsert_report(card.id, rnd, body, commit, every, None, actor)
            added, moved = _payloads(card, items, len(verified))
            where = {"card_id": card.id, "project_id": card.project_id, "run_id": card.run_id}
            tx.append_event("report.added", actor, payload=added, **where)
            new = self._save(tx, card, fields)
            tx.append_event("card.moved", actor, payload=moved, **where)
        return rep, self.recent.put(new)


def _payloads(
    card: Card, items: list[dict[str, Any]], verified: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payloads of a delivery's ``report.added`` and ``card.moved`` events."""
    rnd = card.delivery_round
    added = {"round": rnd, "evidence": len(items), "verdict": None}
    moved: dict[str, Any] = {
        "ref": card.ref,
        "from": card.status.value,
        "to": Status.IN_REVIEW.value,
        "reason": None,
        "round": rnd,
    }
    if verified:
        moved["verified"] = verified
    return added, moved
