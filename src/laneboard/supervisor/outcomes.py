"""What the pool does when a turn ends: finish, continue, retry or hold the row.

Every bound here ends in a hold with its cycle's name (``holds.place_hold``): an
undelivered card is continued for ``HANDOFF_ATTEMPTS`` turns and then held
(``no_delivery``), a hanging agent is retried once (``hang``), a failing agent
``RECOVERY_BOUND`` times (``agent_failure``), a session that cannot start is a dispatch failure that hands the claim
back and holds at ``DISPATCH_FAILURE_BOUND``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from laneboard.agents.base import ConfigurationError, Session, TurnResult
from laneboard.domain.model import Card
from laneboard.domain.status import TERMINAL, Status
from laneboard.errors import LaneboardError
from laneboard.store.tx import Tx
from laneboard.supervisor import records
from laneboard.supervisor.director import open_question
from laneboard.supervisor.holds import place_hold
from laneboard.supervisor.records import QueueRow

if TYPE_CHECKING:
    from laneboard.supervisor.pool import Pool
    from laneboard.supervisor.runtime import Runtime
    from laneboard.supervisor.transcript_sink import TranscriptSink

RECOVERY_BOUND = 3  # agent failures (and supervisor crashes) of one row before its hold
HANG_BOUND = 2  # a hang is retried once: the hold comes within 2 x the turn timeout
EXHAUSTED = "handoff attempts exhausted"
NO_DELIVERY_CYCLES = 1  # exhausted handoff rows of one card (across epochs) before its hold
HANDOFF_ATTEMPTS = 3  # turns one handoff row gets to deliver its card
DISPATCH_FAILURE_BOUND = 3
DISPATCH_BACKOFF_MS = 10_000  # before the 2nd try; doubled before each later one
# turns of one row whose agent found the board out of reach (its calls refused with
# STORE_UNAVAILABLE) and that are not counted against the card; past it they count again,
# so that a board that fails the agent's calls for good still ends in a hold
BOARD_AWAY_BOUND = 10
BOARD_AWAY_REASON = "the board was out of reach during your last turn: it answers again"
BOARD_AWAY_DETAIL = (
    "Some of your lb calls were refused while the database was away; none of them changed "
    "anything. Read the card again (lb card get) and carry on from where you were."
)


def dispatch_backoff_ms(card: Card, now: int) -> int:
    """How long the poll still waits before claiming a card whose dispatch failed (0: go)."""
    n, at = card.meta.get("dispatch_failures"), card.meta.get("dispatch_failed_at")
    if not isinstance(n, int) or n <= 0 or not isinstance(at, int):
        return 0
    wait: int = at + DISPATCH_BACKOFF_MS * (1 << (n - 1)) - now
    return max(0, wait)


def record_end(
    tx: Tx, rt: Runtime, row: QueueRow, card: Card, rec_id: int | None, session: Session,
    turn_id: int, result: TurnResult, outcome: str, forced: bool, sink: TranscriptSink,
) -> tuple[Card | None, bool]:  # fmt: skip
    """The turn's outcome, the rest of its transcript (``sink``) and its ``turn.finished``
    event, in the caller's transaction: (the card as read there, whether the turn's row
    and session were closed with it — the common end, when the card left the turn:
    delivered, held, moved)."""
    records.finish_turn(
        tx,
        turn_id,
        outcome,
        final_text=result.final_text,
        error=result.error,
        exit_code=result.exit_code,
        usage=result.usage.to_dict(),
    )
    fresh = tx.card(card.id)
    closed = not forced and close_left(tx, row, fresh, rec_id, session)
    sink.close_in(tx, result, outcome)  # with its turn.output event, after every write
    tx.append_event(  # last: the events go with the commit
        "turn.finished",
        rt.actor,
        card_id=card.id,
        project_id=card.project_id,
        run_id=card.run_id,
        payload={
            "queue": row.id,
            "outcome": outcome,
            "error": _redacted(result.error),
            "usage": result.usage.to_dict(),
        },
    )
    return fresh, closed


def close_left(
    tx: Tx, row: QueueRow, fresh: Card | None, rec_id: int | None, session: Session
) -> bool:
    """In the transaction that records a turn's end, ``fresh`` the card read there: when
    the card left the turn — delivered, held, moved or claimed again — the row is done and
    the session idle. True when it did (``after_turn`` is then told ``closed``)."""
    if fresh is None or (fresh.status is Status.IN_PROGRESS and fresh.claim_epoch == row.epoch):
        return False
    note = "delivered" if fresh.status is not Status.IN_PROGRESS else "turn ended"
    records.set_row(
        tx,
        row.id,
        state="done",
        pid=None,
        payload={**row.payload, "note": f"{note}: card is {fresh.status.value}"},
    )
    if rec_id is not None:
        records.set_session_state(tx, rec_id, "idle", session.pid)
    return True


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
    fresh: Card | None = None,
    *,
    closed: bool = False,
) -> None:
    """Record what the turn led to; only then is the session idle (closable by ping).
    ``fresh``: the card as read when the turn's end was recorded; ``closed``: that
    transaction already closed the row (``close_left``)."""
    try:
        _after_turn(pool, row, card, kind, key, rec_id, session, result, outcome, fresh, closed)
    finally:
        with pool.lock:
            live = pool.live.get((kind, key))
            if live is not None and live.session is session:
                live.busy, live.last_used = False, time.monotonic()


def _after_turn(
    pool: Pool,
    row: QueueRow,
    card: Card,
    kind: str,
    key: str,
    rec_id: int | None,
    session: Session,
    result: TurnResult,
    outcome: str,
    fresh: Card | None,
    closed: bool,
) -> None:
    rt = pool.rt
    refused = pool.board_refused(row.id)
    with pool.lock:
        reopened = row.id in pool.reopened
        pool.reopened.discard(row.id)
    if closed:  # the card left the turn: its row and session were closed with the turn
        if outcome != "ok":
            pool.forget(kind, key)
        return
    if fresh is None:
        fresh = rt.card(card.id)
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
    if outcome == "stopped" and not delivered:
        stopped(pool, row, card, rec_id, session)
        return
    if (
        outcome == "ok"
        and fresh.status is Status.IN_PROGRESS
        and fresh.claim_epoch == row.epoch
        and continue_undelivered(pool, row, fresh, rec_id, session, refused)
    ):
        return
    if outcome == "ok" or fresh.status is not Status.IN_PROGRESS or fresh.claim_epoch != row.epoch:
        note = "delivered" if fresh.status is not Status.IN_PROGRESS else "turn ended"
        finish_row(pool, row, "done", note=f"{note}: card is {fresh.status.value}")
        with rt.store.write() as tx:
            if rec_id is not None:
                records.set_session_state(tx, rec_id, "idle", session.pid)
        if outcome != "ok":
            pool.forget(kind, key)
        return
    # the turn failed while the card is still ours: a hang (cut at the timeout) or a crash
    if outcome == "timed_out" or not session.alive():
        pool.forget(kind, key)
    if outcome == "failed" and board_away(pool, row, refused, rec_id, reopened):
        return
    recoveries = row.recoveries + 1
    hang = outcome == "timed_out"
    bound = HANG_BOUND if hang else RECOVERY_BOUND
    if recoveries >= bound:
        cycle = "hang" if hang else "agent_failure"
        what = "timed out" if hang else "failed"
        with rt.store.write() as tx:
            current = tx.card(card.id)
            if current is not None:
                place_hold(
                    rt,
                    tx,
                    current,
                    cycle,
                    bound,
                    f"the agent {what} {recoveries} times; last error: {_redacted(result.error)}",
                )
            records.set_row(
                tx,
                row.id,
                state="failed",
                recoveries=recoveries,
                pid=None,
                last_error=_redacted(result.error) or f"the turn {outcome}",
            )
            if rec_id is not None:
                records.set_session_state(tx, rec_id, "closed")
        rt.log.warn("pool", f"card held: the agent {what} {recoveries} times", card=card.ref)
        return
    with rt.store.write() as tx:
        told = {"resume_reason": f"the previous turn {outcome}",
                "resume_detail": _redacted(result.error) or ""}  # fmt: skip
        requeue(tx, row, rec_id, reopened, told, recoveries=recoveries,
                last_error=_redacted(result.error))  # fmt: skip


def requeue(
    tx: Tx, row: QueueRow, rec_id: int | None, reopened: bool, told: Mapping[str, object],
    **fields: object,
) -> None:  # fmt: skip
    """Give a row whose turn ended back to the queue (``pending``), with what its session
    is ``told`` when it is asked again and the row's other ``fields``."""
    records.set_row(tx, row.id, state="pending", owner=None, pid=None,
                    payload={**row.payload, **told}, **fields)  # fmt: skip
    if rec_id is not None:
        # a reopened session that failed at once may be gone: replay next time
        records.set_session_state(tx, rec_id, "needs_replay" if reopened else "idle")


def stopped(pool: Pool, row: QueueRow, card: Card, rec_id: int | None, session: Session) -> None:
    """A person stopped the turn: the card is held for them; releasing the hold (moving it
    to todo) dispatches it again, to the same session."""
    rt = pool.rt
    with pool.lock:
        running = pool.running.get(row.id)
        who = running.stopped_by if running and running.stopped_by else "a person"
    question = (
        f"{who} stopped the running turn on {card.ref}. Release the hold to let the agent "
        f"continue in the same session (lb card move {card.ref} todo), or cancel the card."
    )
    with rt.store.write() as tx:
        current = tx.card(card.id)
        if current is not None and current.claim_epoch == row.epoch:
            # the person who stopped it holds it: no alert to send them
            place_hold(rt, tx, current, "stop", 1, f"stopped by {who}", reason="decision",
                       announce=False, question=question)  # fmt: skip
        records.set_row(tx, row.id, state="done", pid=None,
                        payload={**row.payload, "note": f"stopped by {who}"})  # fmt: skip
        if rec_id is not None:
            records.set_session_state(tx, rec_id, "idle", session.pid if session.alive() else None)
    rt.log.info("pool", "turn stopped; card held", card=card.ref, by=who)


def turn_outcome(ok: bool, timed_out: bool, forced: bool, stopped: bool, *, stopping: bool) -> str:
    """How a turn ended: ``stopped`` by a person, ``interrupted`` (its run force-stopped, or
    the supervisor shutting down), ``timed_out``, ``ok`` or ``failed``. At a shutdown a
    turn that did not end well is ``interrupted`` whatever its agent said: the shutdown
    interrupted it (an agent stopped before it read its prompt reports a broken pipe), so
    it counts no failure against its card and is resumed at the next start."""
    if stopped and not forced:
        return "stopped"
    if forced or (stopping and not ok and not timed_out):
        return "interrupted"
    if timed_out:
        return "timed_out"
    return "ok" if ok else "failed"


def continue_undelivered(
    pool: Pool, row: QueueRow, card: Card, rec_id: int | None, session: Session,
    refused: int = 0,
) -> bool:  # fmt: skip
    """A turn ended well but left the card in progress, undelivered and not waiting on
    a question: the same session is asked to continue, up to ``HANDOFF_ATTEMPTS`` turns
    for the row; then the row fails, and at the ``NO_DELIVERY_CYCLES``-th such row (counted
    across claim epochs) the card is held (``no_delivery``) instead of waiting for
    stale-claim recovery to start it over. A turn in which ``refused`` of the agent's calls
    found the board out of reach is not counted (``board_away``)."""
    rt = pool.rt
    with rt.store.read() as tx:
        asked = open_question(tx, card)  # the director lane's own test of a waiting worker
    if asked is not None:
        return False  # it waits on its question: the answer re-dispatches it
    if board_away(pool, row, refused, rec_id, False):
        return True
    with rt.store.write() as tx:
        told = continuation(tx.card(card.id) or card, row)
        # the workflow sent the card back while the turn ran (a reopened review): the turn
        # delivered, so it is not one that ended without a delivery (the workflow's own
        # bounds end such loops)
        sent_back = "loop_resume_at" in told
        exhausted = row.attempts >= HANDOFF_ATTEMPTS and not sent_back
        if rec_id is not None:
            records.set_session_state(tx, rec_id, "idle", session.pid)
        if exhausted:
            error = f"{row.attempts} turns ended without delivering {card.ref}"
            records.set_row(
                tx,
                row.id,
                state="failed",
                pid=None,
                last_error=error,
                payload={**row.payload, "note": EXHAUSTED},
            )
            cycles = exhausted_cycles(tx, card)
            current = tx.card(card.id)
            if cycles >= NO_DELIVERY_CYCLES and current is not None:
                place_hold(
                    rt,
                    tx,
                    current,
                    "no_delivery",
                    NO_DELIVERY_CYCLES,
                    f"{cycles} handoff(s) of {HANDOFF_ATTEMPTS} turns each ended without a "
                    f"delivery (last: {error}).",
                )
        else:
            records.set_row(
                tx,
                row.id,
                state="pending",
                owner=None,
                pid=None,
                payload={**row.payload, **told},
                **({"attempts": max(row.attempts - 1, 0)} if sent_back else {}),
            )
    if exhausted:
        rt.log.warn("pool", f"{row.attempts} turns ended without a delivery; card held",
                    card=card.ref)  # fmt: skip
    elif sent_back:
        rt.log.info("pool", "the card was sent back while its turn ended; the session hears why",
                    card=card.ref)  # fmt: skip
    else:
        rt.log.info("pool", "turn ended undelivered; asking the session to continue",
                    card=card.ref)  # fmt: skip
    return True


def board_away(pool: Pool, row: QueueRow, refused: int, rec_id: int | None, reopened: bool) -> bool:
    """A turn that failed or ended undelivered after ``refused`` of its agent's calls were
    refused because the database was out of reach: the board failed the agent, not the
    other way round. The row is given back, neither the turn nor a recovery counted, and
    the session is told why it is asked again. False (nothing done) when no call was
    refused, or when ``BOARD_AWAY_BOUND`` such turns of the row went uncounted already."""
    away = int(row.payload.get("board_away_turns") or 0)
    if refused <= 0 or away >= BOARD_AWAY_BOUND:
        return False
    told = {"board_away_turns": away + 1, "resume_reason": BOARD_AWAY_REASON,
            "resume_detail": BOARD_AWAY_DETAIL}  # fmt: skip
    with pool.rt.store.write() as tx:
        requeue(tx, row, rec_id, reopened, told, attempts=max(row.attempts - 1, 0))
    pool.rt.log.warn(
        "pool",
        "the board was out of reach during the turn: not counted against the card; "
        "the agent is asked again",
        queue=row.id,
        refused=refused,
    )
    return True


def continuation(card: Card, row: QueueRow) -> dict[str, object]:
    """What the session is told when it is asked to continue: the workflow's reason when it
    sent the card back while this turn still ran (a reopened review, a rework), said once;
    otherwise that the turn ended undelivered."""
    info = card.meta.get("loop_resume")
    if (
        isinstance(info, dict)
        and info.get("round") == card.delivery_round
        and int(info.get("at") or 0) > row.created_at
        and info.get("at") != row.payload.get("loop_resume_at")
    ):
        return {
            "resume_reason": str(info.get("reason") or "the card was sent back to you"),
            "resume_detail": str(info.get("detail") or ""),
            "loop_resume_at": info.get("at"),
        }
    return {
        "resume_reason": "your last turn ended but the card is still in progress and was "
        "not delivered",
        "resume_detail": "Finish the work and deliver it (lb card report, then lb card move "
        "in_review), or ask with lb card ask if a decision blocks you.",
    }


def exhausted_cycles(tx: Tx, card: Card) -> int:
    """Handoff rows of ``card`` that used up their turns without a delivery, over every
    claim epoch since its last hold (a hold is an epoch: a person's release starts over)."""
    since = int(card.meta.get("hold_at") or 0)
    rows = records.queue_rows(tx, states=("failed",), card_id=card.id)
    return sum(
        1
        for r in rows
        if r.payload.get("note") == EXHAUSTED
        and r.round == card.delivery_round
        and r.created_at > since
    )


def moved_on(card: Card | None, row: QueueRow) -> str | None:
    """How the card left this row's turn, or None while the turn is still its own:
    ``delivered`` (its round reached review or done), ``terminal``, ``gone``,
    ``reclaimed`` or ``moved to <status>``."""
    if card is None:
        return "gone"
    if card.status is Status.IN_PROGRESS and card.claim_epoch == row.epoch:
        return None
    if card.delivery_round == row.round and card.status in (Status.IN_REVIEW, Status.DONE):
        return "delivered"
    if card.status in TERMINAL:
        return "terminal"
    if card.claim_epoch != row.epoch:
        return "reclaimed"
    return f"moved to {card.status.value}"


def finish_row(pool: Pool, row: QueueRow, state: str, *, note: str) -> None:
    with pool.rt.store.write() as tx:
        records.set_row(tx, row.id, state=state, pid=None, payload={**row.payload, "note": note})


CONFIG_CODES = frozenset({"CONFIG_INVALID", "SANDBOX_UNAVAILABLE"})


def config_fix(exc: BaseException) -> str:
    """What to repair when ``exc`` comes from the configuration (a missing binary, a
    refused bypass, no sandbox); empty for any other failure."""
    if isinstance(exc, ConfigurationError):
        return exc.fix
    if isinstance(exc, LaneboardError) and exc.code in CONFIG_CODES:
        return exc.fix
    return ""


def dispatch_failed(pool: Pool, row: QueueRow, card: Card, error: str, fix: str = "") -> None:
    """A dispatch failure after the claim: hand the claim back now; hold at the 3rd. A
    failure caused by the configuration (``fix`` names the repair) holds as a
    ``configuration`` hold carrying that fix."""
    rt = pool.rt
    error = _redacted(error) or "unknown error"
    rt.log.warn("pool", f"dispatch failed: {error}", card=card.ref)
    with rt.store.write() as tx:
        current = tx.card(card.id)
        records.set_row(tx, row.id, state="failed", pid=None, last_error=error)
        if current is None:
            return
        failures = int(current.meta.get("dispatch_failures", 0)) + 1
        meta = {
            **current.meta,
            "dispatch_failures": failures,
            "dispatch_error": error[:500],
            "dispatch_failed_at": tx.now(),  # the poll waits dispatch_backoff_ms from here
        }
        if failures >= DISPATCH_FAILURE_BOUND:
            tx.update_card(card.id, current.version, {"meta": meta})
            held = tx.card(card.id)
            assert held is not None
            place_hold(
                rt,
                tx,
                held,
                "dispatch",
                DISPATCH_FAILURE_BOUND,
                f"the agent could not be started {failures} times: {error}",
                reason="configuration" if fix else "resource",
                fix=fix,
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


def after_force_stop(
    pool: Pool, row: QueueRow, card: Card, kind: str, key: str, rec_id: int | None
) -> None:
    """A turn cut by its run's force-stop: the row ends (never requeued), the session is
    closed, and a claim the turn still held is released (the card goes back to todo)."""
    rt = pool.rt
    pool.forget(kind, key)
    with rt.store.write() as tx:
        records.set_row(
            tx,
            row.id,
            state="failed",
            pid=None,
            last_error="interrupted: the run was force-stopped",
        )
        if rec_id is not None:
            records.set_session_state(tx, rec_id, "closed")
        fresh = tx.card(card.id)
        if (
            fresh is not None
            and fresh.status is Status.IN_PROGRESS
            and (fresh.claim_epoch == row.epoch)
        ):
            rt.board.move_in(tx, rt.actor, fresh, Status.TODO, reason="run force-stopped")
    rt.log.info("pool", "turn interrupted by its run's force-stop", card=card.ref)
