"""Moves between statuses, their gates, holds and in-transaction moves."""

from __future__ import annotations

from typing import Any

from laneboard.board import inputs
from laneboard.board.authority import Caller, require
from laneboard.board.base import BoardBase
from laneboard.domain import acceptance as authority
from laneboard.domain.model import AWAITING_REASONS, Actor, ActorKind, Card, CommentKind, Evidence
from laneboard.domain.status import TERMINAL, TRANSITIONS, Status, check_transition, parse_status
from laneboard.errors import LaneboardError, bad_input, not_found
from laneboard.store import rows
from laneboard.store.cas_sql import save_with_event
from laneboard.store.tx import Tx

TRANSITIONS_TO_BLOCKED = frozenset(s for s, dst in TRANSITIONS.items() if Status.BLOCKED in dst)
HOLD_REASONS = (
    "configuration",
    "resource",
    "decision",
    "boundary_violation",
    "outside_allowed_paths",
    "rework",
    "rollup",
)
RELEASE_READ = 10_000  # blocked cards read by one release
SKIPPED = frozenset({"CONFLICT", "ILLEGAL_TRANSITION", "NOT_FOUND"})


def _needs_report(card: Card, dst: Status) -> bool:
    """A delivery (in_progress -> in_review) needs a report for the card's round."""
    return dst is Status.IN_REVIEW and card.status is Status.IN_PROGRESS


def held_for(card: Card, reason: str) -> bool:
    """``card`` is blocked by a hold of ``reason`` (its current block is that hold)."""
    return (
        card.status is Status.BLOCKED
        and bool(card.meta.get("hold_cycle"))
        and card.meta.get("hold_reason") == reason
        and int(card.meta.get("hold_at") or 0) >= card.status_since
    )


def _with_merge(fields: dict[str, Any], card: Card, merge: str | None) -> dict[str, Any]:
    """A landed move's merge commit joins the ``meta`` it writes; returns what its event
    adds to the payload."""
    if merge is None:
        return {}
    fields["meta"] = {**fields.get("meta", card.meta), "merge_commit": merge}
    return {"merge_commit": merge}


class MovesMixin(BoardBase):
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
    ) -> Card:
        dst = parse_status(inputs.text(to, "status", limit=40))
        if idempotency_key is not None:
            inputs.text(idempotency_key, "idempotency key", limit=500)
        if reason is not None:
            inputs.text(reason, "reason", limit=500)
        if note is not None:
            inputs.text(note, "note", limit=100_000, empty=True, multiline=True)
        if dst is Status.IN_PROGRESS:
            # todo -> in_progress is a claim; in_review -> in_progress is rework
            with self.store.read() as tx:
                current = self._card(tx, ref)
            if current.status is Status.TODO:
                return self.claim(actor, ref, idempotency_key=idempotency_key)
        if dst is Status.AWAITING:
            if reason not in AWAITING_REASONS:
                raise bad_input(
                    f"awaiting needs a reason {'/'.join(AWAITING_REASONS)}",
                    "pass --reason E1..E5 and --question TEXT",
                )
            question = inputs.text(question or "", "question", limit=20_000, multiline=True)
        gated = self._run_gates(actor, ref, dst, idempotency_key)
        plain = dst is not Status.AWAITING and not note and not (dst is Status.BLOCKED and reason)
        if plain and gated is None and idempotency_key is None:
            moved = self._move_recent(actor, ref, dst, reason)
            if moved is None:
                moved = self._move_probed(actor, ref, dst, reason)
            if moved is not None:
                return self.recent.put(moved)
        if plain and gated is not None and idempotency_key is None and dst is Status.DONE:
            moved = self._move_landed(actor, reason, gated)
            if moved is not None:
                return self.recent.put(moved)
        with self.store.write() as tx:
            if idempotency_key is not None:
                seen = tx.idempotent_response(idempotency_key)
                if seen is not None:
                    return self._card(tx, int(seen["card_id"]))
            card = self._card(tx, ref, lock=True)
            self._move_checks(actor, card, dst)
            fields = self._move_fields(tx, actor, card, dst)
            extra = self._gated_fields(tx, card, fields, gated)
            if dst is Status.AWAITING:
                assert question is not None
                c = tx.insert_comment(card.id, CommentKind.QUESTION.value, question, actor)
                fields["meta"] = {**card.meta, "awaiting": {"reason": reason, "comment": c.id}}
            elif dst is Status.BLOCKED and (reason or note):
                fields["meta"] = {**card.meta, "blocked": {"reason": reason or "", "note": note}}
            new = self._save(tx, card, fields)
            if note and dst is not Status.BLOCKED:
                tx.insert_comment(card.id, CommentKind.NOTE.value, note, actor)
            tx.append_event(
                "card.moved",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={
                    "ref": card.ref,
                    "from": card.status.value,
                    "to": dst.value,
                    "reason": reason,
                    "round": new.delivery_round,
                    **extra,
                },
            )
            if idempotency_key is not None:
                tx.remember(
                    idempotency_key, "move", card.id, {"card_id": card.id, "status": dst.value}
                )
        return self.recent.put(new)

    def _move_recent(
        self, actor: Actor, ref: str | int, dst: Status, reason: str | None
    ) -> Card | None:
        """A plain move checked on the copy of the card this board's last write on it
        returned (``board.recent``), written on that copy's version with its event:
        no read at all when the card is still that copy. None: no copy, a check refuses
        on it, or the card moved on (a fresh read then decides, and refuses if need be).
        A delivery's report is a condition of the write itself (a report does not bump
        the card's version)."""
        card = self.recent.get(inputs.card_ref(ref))
        if card is None:
            return None
        try:
            self._move_checks(actor, card, dst)
            fields = self._move_changes(self.store.clock.now_ms(), actor, card, dst, True)
        except LaneboardError:
            return None
        moved = self._move_write(actor, card, dst, reason, fields, _needs_report(card, dst))
        if moved is None:
            self.recent.drop(card.id)
        return moved

    def _move_probed(
        self, actor: Actor, ref: str | int, dst: Status, reason: str | None
    ) -> Card | None:
        """A plain move (no note, question, gate or idempotency key) checked on a read of
        the card outside any transaction, then written on the version read, with its
        event (``cas_sql.save_with_event``): refusing on that read is refusing at that instant,
        and the version the write requires proves the card is still the one checked.
        None: the card moved on meanwhile (the locked path then decides)."""
        card, fields = self._checked_on_read(actor, ref, dst)
        return self._move_write(actor, card, dst, reason, fields, False)

    def _move_landed(
        self, actor: Actor, reason: str | None, gated: tuple[Card, list[Evidence], str | None]
    ) -> Card | None:
        """An acceptance its landing gate has landed, written on the version of the card
        the gate saw, with its merge commit and its event, in one statement. None: there
        is verified evidence to add to the report, a check refuses on that read (the
        landing took a while), or the card changed since (the locked path decides)."""
        card, evidence, merge = gated
        if evidence:
            return None
        try:
            self._move_checks(actor, card, Status.DONE)
            fields = self._move_changes(self.store.clock.now_ms(), actor, card, Status.DONE, True)
        except LaneboardError:
            return None
        extra = _with_merge(fields, card, merge)
        return self._move_write(actor, card, Status.DONE, reason, fields, False, extra)

    def _checked_on_read(
        self, actor: Actor, ref: str | int, dst: Status
    ) -> tuple[Card, dict[str, Any]]:
        """The card, read with whether its round has a report in one statement outside any
        transaction, and the fields a move to ``dst`` writes on it, once the move is
        allowed (else the refusal)."""
        with self.store.autocommit() as tx:
            got = tx.card_reported(inputs.card_ref(ref))
            if got is None:
                raise not_found("card", ref, "list cards with: lb card list")
            card, reported = got
            self._move_checks(actor, card, dst)
            return card, self._move_fields(tx, actor, card, dst, reported=reported)

    def _move_checks(self, actor: Actor, card: Card, dst: Status) -> None:
        """Who may move ``card`` and whether the transition exists (before its fields)."""
        self._close_rule_first(actor, card, dst)
        self._may_write(actor, card)
        self._fence(actor, card)
        check_transition(card.status, dst)

    def _move_write(
        self,
        actor: Actor,
        card: Card,
        dst: Status,
        reason: str | None,
        fields: dict[str, Any],
        reported: bool,
        extra: dict[str, Any] | None = None,
    ) -> Card | None:
        """A checked move's ``fields`` written on ``card``'s version, with its event (and
        ``extra`` in its payload); None: the card moved on (``reported``: or its round has
        no report)."""
        payload = {
            "ref": card.ref,
            "from": card.status.value,
            "to": dst.value,
            "reason": reason,
            "round": card.delivery_round,
            **(extra or {}),
        }
        row = save_with_event(
            self.store,
            card.id,
            card.version,
            fields,
            ("card.moved", actor, payload),
            reported=reported,
        )
        return rows.card(row, rows.dep_ids(row["deps"])) if row is not None else None

    @staticmethod
    def _close_rule_first(actor: Actor, card: Card, dst: Status) -> None:
        """An agent closing a card outside its credential's scope hears the acceptance
        rule first when that rule refuses it too (``ACCEPTANCE_FORBIDDEN``, e.g. a reviewer
        closing a ``human`` card); otherwise the scope refusal follows as usual."""
        if (
            dst is Status.DONE
            and card.status in (Status.IN_REVIEW, Status.IN_PROGRESS)
            and actor.kind is ActorKind.AGENT
            and actor.card_id not in (None, card.id)
        ):
            authority.check_close(card, actor)

    def _run_gates(
        self, actor: Actor, ref: str | int, dst: Status, key: str | None
    ) -> tuple[Card, list[Evidence], str | None] | None:
        """Verify a delivery / land an acceptance before the move's write transaction.

        The move is first checked as the write would check it (so a refused move runs
        nothing); a gate's refusal refuses the move and nothing else changes. Without an
        idempotency key that check reads the card and whether its round has a report in
        one statement, as a plain move's does (``_move_probed``)."""
        if dst not in (Status.IN_REVIEW, Status.DONE):
            return None
        if self.delivery_gate is None and self.landing_gate is None:
            return None
        if key is None:
            card, _ = self._checked_on_read(actor, ref, dst)
        else:
            with self.store.read() as tx:
                if tx.idempotent_response(key) is not None:
                    return None
                card = self._card(tx, ref)
                self._move_checks(actor, card, dst)
                self._move_fields(tx, actor, card, dst)
        evidence: list[Evidence] = []
        merge: str | None = None
        if card.status is Status.IN_PROGRESS and self.delivery_gate is not None:
            evidence = list(self.delivery_gate(card))
        if dst is Status.DONE and self.landing_gate is not None:
            merge = self.landing_gate(card)
        return card, evidence, merge

    @staticmethod
    def _gated_fields(
        tx: Tx,
        card: Card,
        fields: dict[str, Any],
        gated: tuple[Card, list[Evidence], str | None] | None,
    ) -> dict[str, Any]:
        """Inside the move: the verified evidence joins the round's report and the merge
        commit joins ``meta``. Returns what the move event adds to its payload."""
        if gated is None:
            return {}
        checked, evidence, merge = gated
        if (checked.status, checked.delivery_round) != (card.status, card.delivery_round):
            raise LaneboardError(
                "VERSION_CONFLICT",
                f"{card.ref} changed while it was being verified",
                "read it again and retry the move",
            )
        extra: dict[str, Any] = {}
        rep = tx.report(card.id, card.delivery_round) if evidence else None
        if rep is not None:
            items = [e.to_dict() for e in (*rep.evidence, *evidence)]
            tx.set_report_evidence(rep.id, items)
            extra["verified"] = len(evidence)
        return {**extra, **_with_merge(fields, card, merge)}

    def _move_fields(
        self, tx: Tx, actor: Actor, card: Card, dst: Status, *, reported: bool | None = None
    ) -> dict[str, Any]:
        """The fields a move writes; ``reported``: whether the card's round has a report,
        when already read (else it is read here, if the move needs it)."""
        if reported is None and _needs_report(card, dst):
            reported = tx.report(card.id, card.delivery_round) is not None
        return self._move_changes(tx.now(), actor, card, dst, reported is not False)

    @staticmethod
    def _move_changes(
        now: int, actor: Actor, card: Card, dst: Status, reported: bool
    ) -> dict[str, Any]:
        """The fields a move writes at ``now``, once the caller may make it;
        ``reported``: whether the card's round has a report (a delivery needs one)."""
        fields: dict[str, Any] = {"status": dst.value, "status_since": now}
        if _needs_report(card, dst) and not reported:
            raise LaneboardError(
                "REPORT_REQUIRED",
                f"{card.ref} has no delivery report for round {card.delivery_round}",
                f"write one first: lb card report {card.ref} --body TEXT",
            )
        if dst is Status.DONE:
            authority.check_close(card, actor)
        if dst in TERMINAL and card.idempotency_key is not None:
            fields["idempotency_key"] = None
            fields["meta"] = {**card.meta, "released_key": card.idempotency_key}
        if dst in (Status.TODO, Status.BACKLOG):
            fields.update(holder=None, holder_kind=None, session_id=None, heartbeat_at=None)
        elif dst is not Status.IN_PROGRESS:
            fields["heartbeat_at"] = None
        else:  # rework: the holder may re-claim at once
            fields["heartbeat_at"] = None
        return fields

    def hold(
        self,
        tx: Tx,
        actor: Actor,
        card: Card,
        cycle: str,
        bound: int,
        message: str,
        *,
        reason: str = "resource",
        question: str | None = None,
    ) -> Card:
        """Park a card for a human at a loop bound: blocked, a question, ``meta.hold_*``
        (``question``: the comment's text instead of the loop bound's)."""
        if card.status not in TRANSITIONS_TO_BLOCKED:
            return card
        question = question or (
            f"laneboard stopped {cycle} on {card.ref} at its bound ({bound}): {message} "
            f"A human decides what happens next: fix the cause and move the card to todo "
            f"(lb card move {card.ref} todo), or cancel it."
        )
        c = tx.insert_comment(card.id, CommentKind.QUESTION.value, question, actor)
        now = tx.now()  # one reading: the block and the hold are the same instant
        meta = {
            **card.meta,
            "hold_cycle": cycle,
            "hold_bound": bound,
            "hold_reason": reason,
            "hold_round": card.delivery_round,
            "hold_at": now,
            "hold_comment": c.id,
        }
        fields: dict[str, Any] = {
            "status": Status.BLOCKED.value,
            "status_since": now,
            "heartbeat_at": None,
            "meta": meta,
        }
        new = self._save(tx, card, fields)
        tx.append_event(
            "card.held",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={"ref": card.ref, "from": card.status.value, "cycle": cycle, "bound": bound},
        )
        return new

    def move_in(
        self,
        tx: Tx,
        actor: Actor,
        card: Card,
        to: Status,
        *,
        reason: str | None = None,
        new_round: bool = False,
        fields: dict[str, Any] | None = None,
    ) -> Card:
        """A move inside an open write transaction (used by the workflow pass).

        The same rules as ``move`` (transition table, delivery report); ``new_round``
        starts the next delivery round (a rework); ``fields`` may set ``meta`` or
        ``acceptance`` in the same write. ``done`` is not accepted here: acceptance goes
        through ``move`` so that landing runs inside it.
        """
        if to is Status.DONE:
            raise bad_input("move_in does not close cards", "close a card with Board.move")
        check_transition(card.status, to)
        changes = self._move_fields(tx, actor, card, to)
        extra = dict(fields or {})
        if "meta" in extra and "meta" in changes:
            extra["meta"] = {**changes["meta"], **extra["meta"]}
        changes.update(extra)
        if new_round:
            changes["delivery_round"] = card.delivery_round + 1
        new = self._save(tx, card, changes)
        tx.append_event(
            "card.moved",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={
                "ref": card.ref,
                "from": card.status.value,
                "to": to.value,
                "reason": reason,
                "round": new.delivery_round,
            },
        )
        return new

    def annotate_in(self, tx: Tx, actor: Actor, card: Card, meta: dict[str, Any]) -> Card:
        """Merge ``meta`` into a card's meta inside an open write transaction."""
        new = self._save(tx, card, {"meta": {**card.meta, **meta}})
        tx.append_event(
            "card.edited",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={"fields": ["meta"], "keys": sorted(meta)},
        )
        return new

    def release_holds(
        self, actor: Actor, reason: str, *, project: str | int | None = None
    ) -> list[dict[str, Any]]:
        """Move every card held for ``reason`` back to ``todo`` — once its cause is fixed.
        Each card is its own transaction with its event; a card that moved meanwhile is
        reported as skipped, not an error."""
        require(actor, Caller.PERSON, "release holds")
        if not isinstance(reason, str) or reason not in HOLD_REASONS:
            raise bad_input(
                f"{str(reason)[:40]!r} is not a hold reason",
                f"use one of {', '.join(HOLD_REASONS)}",
            )
        with self.store.read() as tx:
            pid = self._project(tx, project).id if project is not None else None
            blocked = tx.list_cards(project_id=pid, statuses=("blocked",), limit=RELEASE_READ)
        out: list[dict[str, Any]] = []
        for card in (c for c in blocked if held_for(c, reason)):
            fix = card.meta.get("hold_fix") or None
            item: dict[str, Any] = {"ref": card.ref, "cycle": card.meta["hold_cycle"], "fix": fix}
            note = f"hold released ({reason})" + (f"; fixed: {fix}" if fix else "")
            try:
                moved = self.move(actor, card.ref, "todo", note=note)
            except LaneboardError as exc:
                if exc.code not in SKIPPED:
                    raise
                out.append({**item, "released": False, "skipped": exc.message})
                continue
            out.append({**item, "released": moved.status is Status.TODO, "skipped": None})
        return out
