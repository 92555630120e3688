"""Claims (compare-and-swap), heartbeats and releases."""

from __future__ import annotations

from collections.abc import Sequence

from laneboard.board import inputs
from laneboard.board.base import BoardBase
from laneboard.domain import claims
from laneboard.domain.model import Actor, ActorKind, Card, CommentKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, not_found
from laneboard.store import Row, rows
from laneboard.store.tx import Tx, claim_probe_sql


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
        if idempotency_key is not None:
            inputs.text(idempotency_key, "idempotency key", limit=500)
        probe = self._claim_probe(actor, ref, who) if idempotency_key is None else None
        if probe is not None:
            with self.store.write() as tx:  # the lock is held for two statements
                row = self._claim_expected(tx, actor, probe, who, session_id)
                if row is None:  # the card changed since the probe: the exact path decides
                    return self.claim_in(tx, actor, ref, who, session_id)
            deps = str(probe["deps"] or "")
            return rows.card(row, tuple(int(d) for d in deps.split(",") if d))
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
        unassigned cards when asked. The pick and the claim are one statement over the
        weight-ordered candidates; when racing claimants took all of them, it reads the
        candidates again (three times at most) before answering ``CLAIM_CONFLICT``.
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
        for _ in range(3):
            got = self.candidates(
                assignees=wanted, include_unassigned=include_unassigned, project=project
            )
            if not got:
                raise LaneboardError(
                    "NOTHING_READY",
                    f"no ready card for {', '.join(wanted)}"
                    + (" or unassigned" if include_unassigned else ""),
                    "see what is waiting with: lb card candidates --include-unassigned",
                )
            with self.store.write() as tx:
                row = tx.claim_next(
                    [c.card.id for c in got],
                    who,
                    actor.kind.value,
                    session_id,
                    bypass_assignee=actor.is_human,
                )
                if row is not None:
                    self._after_claim(tx, actor, row, who)
                    return rows.card(row, tx.dependencies(int(row["id"])))
        raise LaneboardError(
            "CLAIM_CONFLICT",
            "every ready card was claimed by someone else meanwhile",
            "try again, or see: lb card candidates",
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
        got = self.store.query(claim_probe_sql(by, self.store.dialect == "postgresql"), (r,))
        if not got:
            return None
        row = got[0]
        probe = claims.ClaimProbe(
            int(row["id"]),
            str(row["ref"]),
            Status(row["status"]),
            row["assignee"],
            row["holder"],
            row["heartbeat_at"],
            int(row["status_since"]),
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

    def _after_claim(self, tx: Tx, actor: Actor, row: Row, who: str) -> None:
        """The takeover comment and the ``card.claimed`` event of a successful CAS."""
        prev_status, prev_holder = row["prev_status"], row["prev_holder"]
        takeover = prev_status == Status.IN_PROGRESS.value and prev_holder not in (None, who)
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
            payload={
                "ref": row["ref"],
                "holder": who,
                "epoch": row["claim_epoch"],
                "from": prev_status,
                "takeover": takeover,
                "previous_holder": prev_holder,
            },
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
        return rows.card(row, tx.dependencies(cid))

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
