"""Claims (compare-and-swap), heartbeats and releases."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from laneboard.board import inputs
from laneboard.board.base import BoardBase
from laneboard.domain import claims, deps, weights
from laneboard.domain.model import Actor, ActorKind, Card, CommentKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, not_found
from laneboard.store import Row, rows
from laneboard.store.claim_sql import ReadyKey, claim_with_event
from laneboard.store.rank_sql import ClaimSet, ranked_claim_with_event
from laneboard.store.rows import dep_ids, dumps
from laneboard.store.tx import Tx, claim_probe

CLAIM_NEXT_ROUNDS = 1000  # each lost round means another claimant took a candidate
CANDIDATE_READ = 200  # ready cards read per round, as ``candidates`` reads them
CLAIM_NEXT_PICK = 32  # the heaviest of them one claim statement tries, in order


def _takeover(row: Row, who: str) -> bool:
    """A claim of ``row`` (its ``prev_*`` values, or a probe's own) takes over another's."""
    status = row.get("prev_status", row.get("status"))
    holder = row.get("prev_holder", row.get("holder"))
    return status == Status.IN_PROGRESS.value and holder not in (None, who)


def _claimed_payload(before: Row, who: str, epoch: int, *, takeover: bool) -> dict[str, object]:
    """A ``card.claimed`` payload; ``before`` has the card's ref, status and holder before."""
    return {
        "ref": before["ref"],
        "holder": who,
        "epoch": epoch,
        "from": before["status"],
        "takeover": takeover,
        "previous_holder": before["holder"],
    }


_EPOCH, _REF = -7_211_000, "\x00"  # stand-ins, in the template of a ``card.claimed`` payload


@functools.lru_cache(maxsize=256)
def _claimed_template(who: str) -> tuple[str, str, str]:
    """A ``claim --next`` payload's text around its epoch and its ref (JSON string).

    The statement that claims the card fills them in: ``head + epoch + middle + ref +
    tail`` is byte for byte ``dumps(_claimed_payload(...))`` (keys sorted: the epoch
    comes before the ref).
    """
    text = dumps(
        _claimed_payload(
            {"ref": _REF, "status": "todo", "holder": None}, who, _EPOCH, takeover=False
        )
    )
    head, rest = text.split(str(_EPOCH), 1)
    middle, tail = rest.split(dumps(_REF), 1)
    return head, middle, tail


class ClaimsMixin(BoardBase):
    @staticmethod
    def _claimant(actor: Actor, holder: str | None) -> str:
        """The name a claim is made under: ``holder`` (people only) or the actor's own."""
        if holder is not None:
            inputs.text(holder, "holder", limit=200)
        if actor.kind is ActorKind.AGENT and holder not in (None, actor.name):
            raise LaneboardError(
                "FORBIDDEN", "an agent claims only under its own name", "drop --holder"
            )
        return holder or actor.name

    def claim(
        self,
        actor: Actor,
        ref: str | int,
        *,
        holder: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Card:
        """Take a card (compare-and-swap). Losers get ``CLAIM_CONFLICT``."""
        who = self._claimant(actor, holder)
        if session_id is not None:
            inputs.text(session_id, "session id", limit=200)
        if idempotency_key is not None:
            inputs.text(idempotency_key, "idempotency key", limit=500)
        probe = self._claim_probe(actor, ref, who) if idempotency_key is None else None
        if probe is not None and not _takeover(probe, who):
            row = self._claim_once(actor, probe, who, session_id)
            if row is not None:
                return rows.card(row, dep_ids(probe["deps"]))
            probe = None  # the card changed since the probe: the exact path decides
        if probe is not None:
            with self.store.write() as tx:  # the lock is held for two statements
                row = self._claim_expected(tx, actor, probe, who, session_id)
                if row is None:  # the card changed since the probe: the exact path decides
                    return self.claim_in(tx, actor, ref, who, session_id)
            return rows.card(row, dep_ids(probe["deps"]))
        with self.store.write() as tx:
            if idempotency_key is not None:
                seen = tx.idempotent_response(idempotency_key)
                if seen is not None:
                    return self._card(tx, int(seen["card_id"]))
            new = self.claim_in(tx, actor, ref, who, session_id)
            if idempotency_key is not None:
                tx.remember(idempotency_key, "claim", new.id, {"card_id": new.id})
            return new

    def claim_next(
        self,
        actor: Actor,
        *,
        assignees: Sequence[str] = (),
        include_unassigned: bool = False,
        project: str | int | None = None,
        holder: str | None = None,
        session_id: str | None = None,
    ) -> Card:
        """Claim the heaviest ready card of a claim set (``lb card claim --next``).

        The set is the given assignees (default: the claimant's own name), plus
        unassigned cards when asked; an agent is offered only cards it may claim. The
        pick and the claim are one statement over the weight-ordered candidates. The
        answer is the truth: a card, or ``NOTHING_READY`` when a fresh read finds none
        ready. When racing claimants took every candidate, it reads them again; when the
        candidates left are row-locked by other writes (PostgreSQL), it waits for the
        first of them.
        """
        who = self._claimant(actor, holder)
        if actor.kind is ActorKind.AGENT and actor.card_id is not None:
            raise LaneboardError(
                "FORBIDDEN",
                "this agent credential is scoped to one card and cannot pick another",
                "claim the credential's own card: lb card claim CARD",
            )
        wanted = list(assignees) or [who]
        for name in wanted:
            inputs.text(name, "assignee", limit=200)
        pid = None
        if project is not None:
            with self.store.autocommit() as tx:
                pid = self._project(tx, project).id
        got = self._claim_ranked(actor, who, wanted, include_unassigned, pid, session_id)
        if got is not None:
            return got
        for _ in range(CLAIM_NEXT_ROUNDS):
            with self.store.autocommit() as tx:
                ids = self._next_ids(tx, actor, who, wanted, include_unassigned, pid)
            if not ids:
                raise LaneboardError(
                    "NOTHING_READY",
                    f"no ready card for {', '.join(wanted)}"
                    + (" or unassigned" if include_unassigned else ""),
                    "see what is waiting with: lb card candidates --include-unassigned",
                )
            with self.store.write() as tx:
                row = self._claim_first(tx, ids, who, actor, session_id)
                if row is not None:
                    self._after_claim(tx, actor, row, who)
                    return rows.card(row, dep_ids(row["deps"]))
        raise LaneboardError(  # every round lost every candidate to others: never expected
            "CLAIM_CONFLICT",
            "every ready card was claimed by someone else meanwhile",
            "try again, or see: lb card candidates",
        )

    def _claim_set(
        self,
        actor: Actor,
        who: str,
        wanted: list[str],
        include_unassigned: bool,
        project_id: int | None,
    ) -> ClaimSet | None:
        """Whose ready cards the caller may claim; None: nobody's.

        An agent's claim set leaves out cards assigned to anyone else.
        """
        mine = wanted if actor.is_human else [w for w in wanted if w == who]
        unassigned = include_unassigned or not wanted
        if not mine and not unassigned:
            return None
        return ClaimSet(
            mine,
            unassigned,
            project_id,
            CANDIDATE_READ,
            CLAIM_NEXT_PICK,
            self.sla.review_aging_min,
        )

    def _claim_ranked(
        self,
        actor: Actor,
        who: str,
        wanted: list[str],
        include_unassigned: bool,
        project_id: int | None,
        session_id: str | None,
    ) -> Card | None:
        """The common case of ``claim_next``: one statement ranks the ready cards from
        the ``claim_rank`` index and claims the first free one, and writes the event:
        one statement in autocommit on both backends (on SQLite the write lock is held
        for that statement alone; on PostgreSQL a second one ranks when the index walk
        claimed nothing, ``ranked_claim_with_event``).

        None when it claimed nothing: a waited-on card (fan-out is weighed in Python), a
        card stamped after this clock, every candidate taken or locked, or nothing ready;
        ``claim_next``'s rounds then find out which.
        """
        claim_set = self._claim_set(actor, who, wanted, include_unassigned, project_id)
        if claim_set is None:
            return None
        kind = actor.kind.value
        row = ranked_claim_with_event(
            self.store,
            claim_set,
            who,
            kind,
            session_id,
            actor.is_human,
            (self.store.clock.now_ms(), actor.name, kind),
            _claimed_template(who),
        )
        return rows.card(row, dep_ids(row["deps"])) if row is not None else None

    def _next_ids(
        self,
        tx: Tx,
        actor: Actor,
        who: str,
        wanted: list[str],
        include_unassigned: bool,
        project_id: int | None,
    ) -> list[int]:
        """The heaviest ready cards the caller may claim, in candidate order (as ``candidates``)."""
        claim_set = self._claim_set(actor, who, wanted, include_unassigned, project_id)
        if claim_set is None:
            return []
        mine, unassigned = claim_set.assignees, claim_set.unassigned
        first = tx.ready_first(
            CLAIM_NEXT_PICK,
            assignees=mine,
            unassigned=unassigned,
            project_id=project_id,
            limit=CANDIDATE_READ,
            review_aging_min=self.sla.review_aging_min,
        )
        if first is not None:
            return [k.id for k in first]
        keys = tx.ready_keys(
            assignees=mine, unassigned=unassigned, project_id=project_id, limit=CANDIDATE_READ
        )
        fan = deps.downstream_counts(tx.open_dependents(), [k.id for k in keys])
        now = tx.now()
        sla = {k.id: c for k in keys if (c := ready_sla_clock(k, now, self.sla)) is not None}
        return [k.id for k in weights.first(keys, now, fan, CLAIM_NEXT_PICK, sla)]

    def _claim_first(
        self, tx: Tx, ids: list[int], who: str, actor: Actor, session_id: str | None
    ) -> Row | None:
        """Claim the first free candidate; else wait for the first one a write holds locked.

        The transaction holds no lock when it waits (the skipping pick locked nothing),
        and waits for one row only, so it cannot take part in a deadlock.
        """
        kind, bypass = actor.kind.value, actor.is_human
        row = tx.claim_next(ids, who, kind, session_id, bypass_assignee=bypass)
        if row is not None or not tx.pg:
            return row  # SQLite's pick runs under the write lock: None means none is left
        held = tx.first_claimable(ids, who, bypass_assignee=bypass)
        if held is None:
            return None
        return tx.claim_next(
            [held], who, kind, session_id, bypass_assignee=bypass, skip_locked=False
        )

    def _claim_probe(self, actor: Actor, ref: str | int, who: str) -> Row | None:
        """Refuse a claim that cannot win without taking the write lock.

        One read statement on its own snapshot: refusing on it is the same as losing
        the race at that instant. A claim that looks winnable goes on to the CAS with
        the row read here (None: the card does not exist; the write path says so).
        Only the claim fields are read and decoded: losing is the common case in a race.
        """
        r = inputs.card_ref(ref)
        by = "id" if isinstance(r, int) else "ref"
        row = claim_probe(self.store, by, r)
        if row is None:
            return None
        probe = claims.ClaimProbe(
            int(row["id"]),
            str(row["ref"]),
            Status(row["status"]),
            row["assignee"],
            row["holder"],
            row["heartbeat_at"],
            int(row["status_since"]),
            int(row["claim_epoch"]),
        )
        self._may_write(actor, probe)
        self._refuse_claim(probe, actor, who, bool(row["deps_done"]), self.store.clock.now_ms())
        return row

    def _claim_expected(
        self, tx: Tx, actor: Actor, probe: Row, who: str, session_id: str | None
    ) -> Row | None:
        """The CAS against the probed version, then the event. None if the card moved on."""
        row = tx.claim(
            int(probe["id"]),
            who,
            actor.kind.value,
            session_id,
            self.windows,
            bypass_assignee=actor.is_human,
            expect=probe,
        )
        if row is not None:
            self._after_claim(tx, actor, row, who)
        return row

    def _claim_once(self, actor: Actor, probe: Row, who: str, session_id: str | None) -> Row | None:
        """The CAS against the probed version and its event as one statement (PostgreSQL).

        The event is known before the statement: the version the CAS requires fixes the
        replaced values and the new epoch. None if the card moved on.
        """
        payload = _claimed_payload(probe, who, int(probe["claim_epoch"]) + 1, takeover=False)
        event = (self.store.clock.now_ms(), "card.claimed", actor.name, actor.kind.value)
        return claim_with_event(
            self.store,
            probe,
            who,
            actor.kind.value,
            session_id,
            self.windows,
            actor.is_human,
            (*event, dumps(payload)),
        )

    def _after_claim(self, tx: Tx, actor: Actor, row: Row, who: str) -> None:
        """The takeover comment and the ``card.claimed`` event of a successful CAS."""
        prev_status, prev_holder = row["prev_status"], row["prev_holder"]
        takeover = _takeover(row, who)
        if takeover:
            tx.insert_comment(
                row["id"],
                CommentKind.CHANGE.value,
                f"{who} took over {row['ref']} from {prev_holder} (heartbeat stale)",
                actor,
            )
        tx.append_event(
            "card.claimed",
            actor,
            card_id=row["id"],
            project_id=row["project_id"],
            run_id=row["run_id"],
            payload=_claimed_payload(
                {**row, "status": prev_status, "holder": prev_holder},
                who,
                row["claim_epoch"],
                takeover=takeover,
            ),
        )

    def _refuse_claim(
        self, card: Card | claims.ClaimProbe, actor: Actor, who: str, deps_done: bool, now: int
    ) -> None:
        verdict = claims.claim_verdict(
            card, who, deps_done, now, self.windows, may_bypass_assignee=actor.is_human
        )
        if not verdict.ok:
            raise LaneboardError(
                "CLAIM_CONFLICT",
                f"{card.ref} cannot be claimed: {verdict.reason}",
                "pick another card from: lb card candidates",
            )

    def claim_in(
        self, tx: Tx, actor: Actor, ref: str | int, who: str, session_id: str | None
    ) -> Card:
        """The claim inside an open write transaction (used by the supervisor)."""
        r = inputs.card_ref(ref)
        cid = r if isinstance(r, int) else tx.card_id_by_ref(r)
        if cid is None:
            raise not_found("card", ref, "list cards with: lb card list")
        if actor.kind is ActorKind.AGENT and actor.card_id not in (None, cid):
            self._may_write(actor, self._card(tx, cid))
        row = tx.claim(
            cid,
            who,
            actor.kind.value,
            session_id,
            self.windows,
            bypass_assignee=actor.is_human,
        )
        if row is None:
            card = self._card(tx, cid)
            self._refuse_claim(card, actor, who, tx.deps_done(cid), tx.now())
            raise LaneboardError(  # the CAS and the rules disagree: never expected
                "CLAIM_CONFLICT",
                f"{card.ref} cannot be claimed right now",
                "pick another card from: lb card candidates",
            )
        self._after_claim(tx, actor, row, who)
        return rows.card(row, dep_ids(row["deps"]))

    def heartbeat(self, actor: Actor, ref: str | int) -> Card:
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            self._may_write(actor, card)
            self._fence(actor, card)
            if card.status is not Status.IN_PROGRESS:
                raise LaneboardError(
                    "STALE_CLAIM",
                    f"{card.ref} is {card.status.value}",
                    "only an in_progress card takes heartbeats",
                )
            if actor.kind is not ActorKind.HUMAN and card.holder not in (None, actor.name):
                raise LaneboardError(
                    "STALE_CLAIM", f"{card.ref} is held by {card.holder}", "claim the card first"
                )
            new = self._save(tx, card, {"heartbeat_at": tx.now()})
            tx.append_event(
                "card.heartbeat",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"epoch": card.claim_epoch},
            )
            return new

    def release(self, actor: Actor, ref: str | int, *, note: str | None = None) -> Card:
        return self.move(actor, ref, "todo", note=note)


def ready_sla_clock(key: ReadyKey, now: int, limits: weights.SlaLimits) -> weights.SlaClock | None:
    """The SLA row of a ready ``todo`` card (``weights.sla_clock``)."""
    return weights.sla_clock(
        status="todo",
        review=key.review,
        epic=False,
        created_at=key.created_at,
        heartbeat_at=None,
        status_since=key.status_since,
        now_ms=now,
        limits=limits,
    )
