"""A card's history: comments, delivery reports and the event log."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from laneboard.board import authority, inputs
from laneboard.board.base import BoardBase
from laneboard.domain.cursor import EventCursor, parse_cursor
from laneboard.domain.model import (
    Actor,
    Card,
    Comment,
    CommentKind,
    Event,
    Evidence,
    Report,
    parse_enum,
)
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, bad_input, not_found
from laneboard.store.cas_sql import report_with_event
from laneboard.store.tx import Tx


class HistoryMixin(BoardBase):
    def comment(self, actor: Actor, ref: str | int, body: str, kind: str = "note") -> Comment:
        k = parse_enum(CommentKind, kind, "comment kind")
        body = inputs.text(body, "comment", limit=100_000, multiline=True)
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
        inputs.cursor(after)
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
        body, commit, items = report_inputs(body, commit, evidence, verdict)
        if self.store.dialect == "postgresql":
            rep = self._report_probed(actor, ref, (body, commit, items, verdict), round_)
            if rep is not None:
                return rep
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            rnd = self._report_round(actor, card, verdict, round_)
            rep = tx.upsert_report(card.id, rnd, body, commit, items, verdict, actor)
            tx.append_event(
                "report.added",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"round": rnd, "evidence": len(items), "verdict": verdict},
            )
            return rep

    def _report_probed(
        self,
        actor: Actor,
        ref: str | int,
        report: tuple[str, str | None, list[dict[str, Any]], str | None],
        round_: int | None,
    ) -> Report | None:
        """A report checked on the copy of the card this board last wrote
        (``board.recent``), else on a read outside any transaction, and written on that
        card's version (one statement, with its event). None: the card moved on
        meanwhile (the locked path then decides). A refusal on the copy is asked again on
        a fresh read."""
        copy = self.recent.get(inputs.card_ref(ref))
        if copy is not None:
            rep = self._report_on(actor, copy, report, round_, refuse=False)
            if rep is not None:
                return rep
        with self.store.autocommit() as tx:
            card = self.recent.put(self._card(tx, ref))
        return self._report_on(actor, card, report, round_, refuse=True)

    def _report_on(
        self,
        actor: Actor,
        card: Card,
        report: tuple[str, str | None, list[dict[str, Any]], str | None],
        round_: int | None,
        *,
        refuse: bool,
    ) -> Report | None:
        """``report`` checked on ``card`` and written on its version; None: the card
        moved on (or, unless ``refuse``, a check refused on it)."""
        verdict = report[3]
        try:
            rnd = self._report_round(actor, card, verdict, round_)
        except LaneboardError:
            if refuse:
                raise
            return None
        payload = {"round": rnd, "evidence": len(report[2]), "verdict": verdict}
        rep = report_with_event(self.store, card, rnd, report, actor, payload)
        if rep is None:
            self.recent.drop(card.id)
        return rep

    def _report_round(
        self, actor: Actor, card: Card, verdict: str | None, round_: int | None
    ) -> int:
        """The round a report on ``card`` is for, once the caller may write it there."""
        self._may_write(actor, card)
        self._fence(actor, card)
        authority.check_verdict(actor, card, verdict)
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
        return rnd

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
        card_ids: Sequence[int] | None = None,
        limit: int = 100,
    ) -> list[Event]:
        """Events after ``after``; ``card_ids`` (when given) keeps those about these cards."""
        inputs.cursor(after)
        if run_id is not None:
            inputs.row_id(run_id, "run")
        if not 1 <= limit <= 1_000_000_000:
            raise bad_input(f"limit {limit} is out of range", "use a positive limit")
        with self.store.read() as tx:
            cid = self._card(tx, card).id if card is not None else None
            pid = self._project(tx, project).id if project is not None else None
            return tx.events(
                after, card_id=cid, project_id=pid, run_id=run_id, card_ids=card_ids, limit=limit
            )

    def last_events(
        self, n: int = 20, *, card: str | int | None = None, card_ids: Sequence[int] | None = None
    ) -> list[Event]:
        if not 0 <= n <= 1_000_000_000:
            raise bad_input(f"{n} events is out of range", "ask for 0 or more events")
        with self.store.read() as tx:
            cid = self._card(tx, card).id if card is not None else None
            return tx.last_events(n, card_id=cid, card_ids=card_ids)

    # -- following the log: cursors that never skip an event ---------------------------------
    def events_after(
        self,
        cursor: str | int | EventCursor = 0,
        *,
        card: str | int | None = None,
        project: str | int | None = None,
        run_id: int | None = None,
        types: Iterable[str] = (),
        card_ids: Sequence[int] | None = None,
        limit: int = 100,
    ) -> tuple[list[Event], str]:
        """Events after ``cursor`` in log order, and the cursor to resume from.

        ``cursor`` is 0, an event id, or a cursor this call (or an event's ``cursor``)
        returned. A follower that always resumes from the returned cursor sees every
        event exactly once (see ``store.q_events``). ``card_ids`` (when given) keeps the
        events about those cards (a scoped reader's).
        """
        at = parse_cursor(cursor)
        if not 1 <= limit <= 10_000:
            raise bad_input(f"limit {limit} is out of range", "use 1 to 10000")
        with self.store.autocommit() as tx:
            cid = self._card_id(tx, card)
            pid = self._project(tx, project).id if project is not None else None
            got, nxt = tx.events_after(
                at,
                card_id=cid,
                project_id=pid,
                run_id=run_id,
                types=types,
                card_ids=card_ids,
                limit=limit,
            )
        return got, str(nxt)

    def events_tail(
        self,
        n: int = 20,
        *,
        card: str | int | None = None,
        project: str | int | None = None,
        run_id: int | None = None,
        card_ids: Sequence[int] | None = None,
    ) -> tuple[list[Event], str]:
        """The last ``n`` events in log order and the cursor that follows them."""
        if not 0 <= n <= 100_000:
            raise bad_input(f"-n {n} is out of range", "use 0 to 100000")
        with self.store.autocommit() as tx:
            cid = self._card_id(tx, card)
            pid = self._project(tx, project).id if project is not None else None
            got, nxt = tx.events_tail(
                n, card_id=cid, project_id=pid, run_id=run_id, card_ids=card_ids
            )
        return got, str(nxt)

    def event_head(self) -> str:
        """The cursor at the end of the log: following from it yields only new events."""
        with self.store.autocommit() as tx:
            return str(tx.event_head())

    def has_events_after(self, cursor: str | int | EventCursor) -> bool:
        """Whether anything was logged after ``cursor`` (one index probe)."""
        at = parse_cursor(cursor)
        with self.store.autocommit() as tx:
            return tx.has_events_after(at)

    def _card_id(self, tx: Tx, ref: str | int | None) -> int | None:
        if ref is None:
            return None
        r = inputs.card_ref(ref)
        cid = tx.card_id_by_ref(r) if isinstance(r, str) else tx.card_id_exists(r)
        if cid is None:
            raise not_found("card", ref, "list cards with: lb card list")
        return cid


def report_inputs(
    body: str,
    commit: str | None,
    evidence: Iterable[Evidence | dict[str, Any]],
    verdict: str | None,
) -> tuple[str, str | None, list[dict[str, Any]]]:
    """A report's body, commit and evidence items, once each is valid (else the refusal)."""
    body = inputs.text(body, "report body", limit=200_000, multiline=True)
    if commit is not None:
        inputs.text(commit, "commit", limit=200)
    ev = [e if isinstance(e, Evidence) else _evidence(e) for e in evidence]
    if verdict is not None and verdict not in ("APPROVE", "REJECT"):
        raise bad_input(f"verdict {verdict!r} is not valid", "use APPROVE or REJECT")
    return body, commit, [e.to_dict() for e in ev]


def _evidence(item: dict[str, Any]) -> Evidence:
    """One evidence item from a caller: its text fields are one line each (the summary may
    span lines), its numbers whole."""
    if not isinstance(item, dict):
        raise bad_input("an evidence item must be an object", "pass {command, exit_code, ...}")
    for name in ("command", "digest", "log_path"):
        if item.get(name) is not None:
            inputs.text(str(item[name]), f"evidence {name}", limit=10_000, empty=True)
    if item.get("summary") is not None:
        inputs.text(
            str(item["summary"]), "evidence summary", limit=20_000, empty=True, multiline=True
        )
    code = item.get("exit_code", 0)
    if isinstance(code, bool) or not isinstance(code, int) or abs(code) > 2**31:
        raise bad_input("evidence exit_code must be a whole number", "pass the command's exit code")
    try:
        return Evidence.from_dict(item)
    except (KeyError, TypeError, ValueError) as exc:
        raise bad_input(
            f"an evidence item is malformed ({exc})", "see: lb card report --help"
        ) from None
