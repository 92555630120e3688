"""What the pool does when a turn ends: finish, continue, retry or hold the row.

Every bound here ends in a named action (SPEC §3): an undelivered card is continued for
``HANDOFF_ATTEMPTS`` turns, a failing agent is retried ``RECOVERY_BOUND`` times and then
holds the card, a session that cannot start is a dispatch failure that hands the claim
back and holds at ``DISPATCH_FAILURE_BOUND``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from laneboard.agents.base import Session, TurnResult
from laneboard.domain.model import Card
from laneboard.domain.status import Status
from laneboard.supervisor import records
from laneboard.supervisor.director import open_question
from laneboard.supervisor.records import QueueRow

if TYPE_CHECKING:
    from laneboard.supervisor.pool import Pool

RECOVERY_BOUND = 3
HANDOFF_ATTEMPTS = 3  # turns one handoff row gets to deliver its card
DISPATCH_FAILURE_BOUND = 3


def after_turn(
    pool: Pool,
    row: QueueRow,
    card: Card,
    kind: str,
    key: str,
    rec_id: int | None,
    session: Session,
    result: TurnResult,
    outcome: str,
) -> None:
    rt = pool.rt
    with pool.lock:
        live = pool.live.get((kind, key))
        if live is not None:
            live.busy, live.last_used = False, time.monotonic()
        reopened = row.id in pool._reopened
        pool._reopened.discard(row.id)
    fresh = rt.board.get(card.id)
    delivered = fresh.status is not Status.IN_PROGRESS or fresh.claim_epoch != row.epoch
    if outcome == "interrupted" and not delivered:
        with rt.store.write() as tx:
            records.set_row(
                tx,
                row.id,
                state="interrupted",
                owner=None,
                pid=None,
                attempts=max(row.attempts - 1, 0),
                payload={**row.payload, "resume_reason": "the supervisor restarted"},
            )
            if rec_id is not None:
                records.set_session_state(tx, rec_id, "idle")
        return
    fresh = rt.board.get(card.id)
    if (
        outcome == "ok"
        and fresh.status is Status.IN_PROGRESS
        and fresh.claim_epoch == row.epoch
        and continue_undelivered(pool, row, fresh, rec_id, session)
    ):
        return
    if outcome == "ok" or fresh.status is not Status.IN_PROGRESS or fresh.claim_epoch != row.epoch:
        note = "delivered" if fresh.status is not Status.IN_PROGRESS else "turn ended"
        finish_row(pool, row, "done", note=f"{note}: card is {fresh.status.value}")
        with rt.store.write() as tx:
            if rec_id is not None:
                records.set_session_state(tx, rec_id, "idle", session.pid)
        if outcome != "ok":
            pool._forget(kind, key)
        return
    # the turn failed while the card is still ours: crash or timeout
    if outcome == "timed_out" or not session.alive():
        pool._forget(kind, key)
    recoveries = row.recoveries + 1
    if recoveries >= RECOVERY_BOUND:
        with rt.store.write() as tx:
            current = tx.card(card.id)
            if current is not None:
                rt.board.hold(
                    tx,
                    rt.actor,
                    current,
                    "crash recovery",
                    RECOVERY_BOUND,
                    f"the agent failed {recoveries} times; last error: {_redacted(result.error)}",
                )
            records.set_row(
                tx,
                row.id,
                state="failed",
                recoveries=recoveries,
                pid=None,
                last_error=_redacted(result.error),
            )
            if rec_id is not None:
                records.set_session_state(tx, rec_id, "closed")
        rt.log.warn("pool", "card held after repeated agent failures", card=card.ref)
        return
    with rt.store.write() as tx:
        records.set_row(
            tx,
            row.id,
            state="pending",
            owner=None,
            pid=None,
            recoveries=recoveries,
            last_error=_redacted(result.error),
            payload={
                **row.payload,
                "resume_reason": f"the previous turn {outcome}",
                "resume_detail": _redacted(result.error) or "",
            },
        )
        if rec_id is not None:
            # a reopened session that failed at once may be gone: replay next time
            records.set_session_state(tx, rec_id, "needs_replay" if reopened else "idle")


def continue_undelivered(
    pool: Pool, row: QueueRow, card: Card, rec_id: int | None, session: Session
) -> bool:
    """A turn ended well but left the card in progress, undelivered and not waiting on
    a question: the same session is asked to continue, up to ``HANDOFF_ATTEMPTS`` turns
    for the row; then the row fails and the card is left to stale-claim recovery."""
    rt = pool.rt
    with rt.store.read() as tx:
        asked = open_question(tx, card)  # the director lane's own test of a waiting worker
    if asked is not None:
        return False  # it waits on its question: the answer re-dispatches it
    with rt.store.write() as tx:
        if rec_id is not None:
            records.set_session_state(tx, rec_id, "idle", session.pid)
        if row.attempts >= HANDOFF_ATTEMPTS:
            records.set_row(
                tx,
                row.id,
                state="failed",
                pid=None,
                last_error=f"{row.attempts} turns ended without delivering {card.ref}",
                payload={**row.payload, "note": "handoff attempts exhausted"},
            )
        else:
            records.set_row(
                tx,
                row.id,
                state="pending",
                owner=None,
                pid=None,
                payload={
                    **row.payload,
                    "resume_reason": "your last turn ended but the card is still "
                    "in progress and was not delivered",
                    "resume_detail": "Finish the work and deliver it (lb card report, "
                    "then lb card move in_review), or ask with lb card ask if a "
                    "decision blocks you.",
                },
            )
    if row.attempts >= HANDOFF_ATTEMPTS:
        rt.log.warn(
            "pool",
            f"{row.attempts} turns ended without a delivery; left to stale-claim recovery",
            card=card.ref,
        )
    else:
        rt.log.info("pool", "turn ended undelivered; asking the session to continue",
                    card=card.ref)  # fmt: skip
    return True


def finish_row(pool: Pool, row: QueueRow, state: str, *, note: str) -> None:
    with pool.rt.store.write() as tx:
        records.set_row(tx, row.id, state=state, pid=None, payload={**row.payload, "note": note})


def dispatch_failed(pool: Pool, row: QueueRow, card: Card, error: str) -> None:
    """A dispatch failure after the claim: hand the claim back now; hold at the 3rd."""
    rt = pool.rt
    error = _redacted(error) or "unknown error"
    rt.log.warn("pool", f"dispatch failed: {error}", card=card.ref)
    with rt.store.write() as tx:
        current = tx.card(card.id)
        records.set_row(tx, row.id, state="failed", pid=None, last_error=error)
        if current is None:
            return
        failures = int(current.meta.get("dispatch_failures", 0)) + 1
        meta = {**current.meta, "dispatch_failures": failures, "dispatch_error": error[:500]}
        if failures >= DISPATCH_FAILURE_BOUND:
            tx.update_card(card.id, current.version, {"meta": meta})
            held = tx.card(card.id)
            assert held is not None
            rt.board.hold(
                tx,
                rt.actor,
                held,
                "dispatch",
                DISPATCH_FAILURE_BOUND,
                f"the agent could not be started {failures} times: {error}",
            )
            return
        if current.status is Status.IN_PROGRESS and current.claim_epoch == row.epoch:
            tx.update_card(
                card.id,
                current.version,
                {
                    "status": "todo",
                    "status_since": tx.now(),
                    "holder": None,
                    "holder_kind": None,
                    "session_id": None,
                    "heartbeat_at": None,
                    "meta": meta,
                },
            )
            tx.append_event(
                "card.released",
                rt.actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={
                    "ref": card.ref,
                    "reason": "dispatch failed",
                    "failures": failures,
                    "error": error,
                },
            )


def _redacted(text: str | None) -> str | None:
    if text is None:
        return None
    from laneboard.supervisor.logs import redact

    return redact(text)[:2000]
