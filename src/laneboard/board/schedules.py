"""Schedules: cards created by cron.

A schedule holds a card template and a five-field cron expression. A pass (run once a
minute by the supervisor, or by ``lb scheduler run``) takes the store's schedule tick
lease, reconciles fire marks left by an interrupted pass, then for each enabled
schedule due in the current minute marks it fired and creates its card in ONE
transaction (idempotency key ``schedule|<name>|<minute>``), and finally records the
single most recent outcome: ``dispatched`` or ``dispatch-failed`` with the reason.
There is no catch-up: a minute no pass saw is reported as missed and the schedule
waits for its next matching minute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from laneboard.board import schedule_jobs as jobs
from laneboard.board import schedule_model as model
from laneboard.board.authority import Caller, require
from laneboard.domain import cron
from laneboard.domain.clock import MINUTE_MS, Clock, iso
from laneboard.domain.model import Actor, Card, system
from laneboard.errors import LaneboardError, not_found
from laneboard.store import Store
from laneboard.store.tx import Tx

# the record and its health live in schedule_model; these names stay readable here
BROKEN, DISPATCHED, FAILED, FAILING = model.BROKEN, model.DISPATCHED, model.FAILED, model.FAILING
NEVER_RUN, OK, OVERDUE = model.NEVER_RUN, model.OK, model.OVERDUE
Schedule = model.Schedule
broken_view, health, upcoming, view = model.broken_view, model.health, model.upcoming, model.view
LOCK_NAME = "schedule-tick"
LOCK_TTL_MS = 2 * MINUTE_MS  # the stale window: a lease older than this is taken over
SCHEDULER = system("scheduler")
MISSED_MAX = 1440  # missed occurrences one pass records for a schedule (a day of minutes)


def minute_label(minute_ms: int) -> str:
    """A fire minute as text, in UTC: ``2026-01-01T09:00Z``."""
    return datetime.fromtimestamp(minute_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%MZ")


def fire_key(name: str, minute_ms: int) -> str:
    return f"schedule|{name}|{minute_label(minute_ms)}"


# -- repository queries (functions taking a Tx) ---------------------------------------------
def _all(tx: Tx) -> list[Schedule]:
    return [Schedule.from_row(r) for r in tx.schedule_rows()]


def _one(tx: Tx, name: str) -> Schedule | None:
    r = tx.schedule_row(name)
    return Schedule.from_row(r) if r else None


def _need(tx: Tx, name: str) -> Schedule:
    s = _one(tx, name)
    if s is None:
        raise not_found("schedule", name, "list schedules with: lb schedule list")
    return s


def _update(tx: Tx, sid: int, **fields: Any) -> int:
    return tx.update_schedule(sid, fields)


def _refs(tx: Tx, items: list[Schedule]) -> dict[int, str]:
    ids = sorted({s.last_card_id for s in items if s.last_card_id is not None})
    return {c.id: c.ref for c in tx.list_cards(ids=ids)} if ids else {}


# -- the service --------------------------------------------------------------------------------
class Schedules:
    def __init__(self, store: Store, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock or store.clock

    def add(
        self,
        actor: Actor,
        name: str,
        expression: str,
        job: dict[str, Any],
        *,
        timezone: str = jobs.LOCAL,
        enabled: bool = True,
    ) -> dict[str, Any]:
        require(actor, Caller.PERSON, "add schedules")
        name = jobs.check_name(name)
        expr = cron.parse(expression)
        timezone = jobs.resolve_zone(timezone)  # stored as an IANA name, never "local"
        zone = jobs.zone_of(timezone)
        now = self.clock.now_ms()
        with self.store.write() as tx:
            template = jobs.validate_job(tx, job)
            if _one(tx, name) is not None:
                raise LaneboardError(
                    "CONFLICT",
                    f"schedule {name} already exists",
                    f"pick another name, or remove it first: lb schedule remove {name}",
                )
            nxt = cron.next_due_from(expr, zone, now) if enabled else None
            tx.insert_schedule(name, expr.text, timezone, template, enabled, nxt, actor.name, now)
            tx.append_event(
                "schedule.added",
                actor,
                payload={"name": name, "expression": expr.text, "timezone": timezone},
            )
            return view(_need(tx, name), now)

    def list(self) -> list[dict[str, Any]]:
        now = self.clock.now_ms()
        with self.store.read() as tx:
            items = _all(tx)
            refs = _refs(tx, items)
        return [view(s, now, refs) for s in items]

    def get(self, name: str) -> dict[str, Any]:
        now = self.clock.now_ms()
        with self.store.read() as tx:
            s = _need(tx, name)
            return view(s, now, _refs(tx, [s]))

    def remove(self, actor: Actor, name: str) -> dict[str, Any]:
        require(actor, Caller.PERSON, "remove schedules")
        now = self.clock.now_ms()
        with self.store.write() as tx:
            s = _need(tx, name)
            out = view(s, now)
            tx.delete_schedule(s.id)
            tx.append_event("schedule.removed", actor, payload={"name": name})
            return out

    def set_enabled(self, actor: Actor, name: str, enabled: bool) -> dict[str, Any]:
        require(actor, Caller.PERSON, "change schedules")
        now = self.clock.now_ms()
        with self.store.write() as tx:
            s = _need(tx, name)
            if s.enabled != enabled:
                # re-armed: occurrences while it was disabled are not owed
                nxt = cron.next_due_from(s.expr, s.zone, now) if enabled else None
                fields: dict[str, Any] = {"enabled": int(enabled), "next_due_at": nxt}
                if enabled:
                    fields["armed_at"] = now
                _update(tx, s.id, **fields)
                tx.append_event(
                    "schedule.enabled" if enabled else "schedule.disabled",
                    actor,
                    payload={"name": name},
                )
            return view(_need(tx, name), now, _refs(tx, [s]))


# -- the pass ---------------------------------------------------------------------------------
@dataclass
class PassResult:
    state: str  # "ran" or "locked"
    at: int
    minute: int
    holder: str
    lock_holder: str | None = None
    checked: int = 0
    fired: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    reconciled: list[dict[str, Any]] = field(default_factory=list)
    missed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def locked(self) -> bool:
        return self.state == "locked"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "at": iso(self.at),
            "minute": minute_label(self.minute),
            "holder": self.holder,
            "lock_holder": self.lock_holder,
            "checked": self.checked,
            "fired": self.fired,
            "failed": self.failed,
            "reconciled": self.reconciled,
            "missed": self.missed,
        }


def acquire_tick_lock(store: Store, holder: str, ttl_ms: int = LOCK_TTL_MS) -> str | None:
    """Take the schedule tick lease. None on success, else the current holder's name."""
    with store.write() as tx:
        if tx.acquire_lock(LOCK_NAME, holder, ttl_ms):
            return None
        row = tx.lock_row(LOCK_NAME)
        return str(row["holder"]) if row else "another pass"


def release_tick_lock(store: Store, holder: str) -> None:
    with store.write() as tx:
        tx.release_lock(LOCK_NAME, holder)


def run_schedule_pass(
    store: Store, clock: Clock, holder: str, *, ttl_ms: int = LOCK_TTL_MS
) -> PassResult:
    """One pass: lease, reconcile, fire what is due this minute, record outcomes.

    ``holder`` must be unique to this pass's process (e.g. the supervisor instance id).
    When another holder has the lease, nothing is created and the result is ``locked``.
    """
    now = clock.now_ms()
    other = acquire_tick_lock(store, holder, ttl_ms)
    if other is not None:
        return PassResult("locked", now, cron.floor_minute(now), holder, lock_holder=other)
    try:
        return run_locked_pass(store, clock, holder)
    finally:
        release_tick_lock(store, holder)


def run_locked_pass(store: Store, clock: Clock, holder: str) -> PassResult:
    """The pass body; the caller holds the tick lease."""
    now = clock.now_ms()
    minute = cron.floor_minute(now)
    result = PassResult("ran", now, minute, holder)
    reconcile(store, result)
    with store.read() as tx:
        items = [s for s in _all(tx) if s.enabled]
    result.checked = len(items)
    from laneboard.board.service import Board

    board = Board(store)
    for s in items:
        try:
            expr, zone = s.expr, s.zone
        except LaneboardError as err:  # a zone this machine does not know
            _record(store, s, minute, FAILED, err.message, None, result)
            continue
        _note_missed(store, s, expr, zone, now, result)
        if not cron.is_due(expr, zone, minute) or s.last_minute == minute:
            continue
        _fire(store, board, s, expr, zone, minute, result)
    return result


def _note_missed(
    store: Store, s: Schedule, expr: cron.CronExpr, zone: tzinfo, now: int, result: PassResult
) -> None:
    """Record every occurrence no pass saw since the last one covered or recorded (up to
    ``MISSED_MAX`` per pass, the newest kept): one ``schedule.missed`` event each."""
    last = cron.last_elapsed(expr, zone, now, s.armed_at)
    done = s.covered()
    if last is None or (done is not None and done >= last):
        return
    if s.missed_minute is not None and s.missed_minute >= last:
        result.missed.append({"name": s.name, "minute": minute_label(last)})
        return  # already recorded by an earlier pass
    seen = [m for m in (done, s.missed_minute) if m is not None]
    after = max(seen) if seen else s.armed_at - 1
    minutes: list[int] = []
    for m in cron.occurrences(expr, zone, after):
        if m > last:
            break
        minutes.append(m)
        if len(minutes) > MISSED_MAX:
            minutes.pop(0)
    entries = [{"name": s.name, "minute": minute_label(m)} for m in minutes or [last]]
    result.missed.extend(entries)
    with store.write() as tx:
        _update(tx, s.id, missed_minute=last, next_due_at=cron.next_due_from(expr, zone, now))
        for entry in entries:
            tx.append_event("schedule.missed", SCHEDULER, payload=entry)


def _fire(
    store: Store,
    board: Any,
    s: Schedule,
    expr: cron.CronExpr,
    zone: tzinfo,
    minute: int,
    result: PassResult,
) -> None:
    key = fire_key(s.name, minute)
    card: Card | None = None
    anomaly: str | None = None
    try:
        with store.write() as tx:
            fresh = _one(tx, s.name)
            if fresh is None or not fresh.enabled or fresh.last_minute == minute:
                return
            if not tx.mark_schedule_fired(fresh.id, minute):
                return
            prior = tx.card_by_key(key)
            if prior is not None:
                anomaly = f"card {prior.ref} already carried this fire's key"
            job = fresh.job
            card = board.create_card(
                SCHEDULER,
                job["project"],
                job["title"],
                description=job.get("description", ""),
                assignee=job.get("assignee"),
                priority=job.get("priority", 2),
                labels=job.get("labels", []),
                acceptance=job.get("acceptance", []),
                acceptance_mode=job.get("acceptance_mode", "auto"),
                checks=job.get("checks", []),
                allowed_paths=job.get("allowed_paths", []),
                meta={"schedule": s.name, "occurrence": minute_label(minute)},
                idempotency_key=key,
                tx=tx,
            )
            assert card is not None
            _update(tx, fresh.id, fired_card_id=card.id)
            tx.append_event(
                "schedule.fired",
                SCHEDULER,
                card_id=card.id,
                project_id=card.project_id,
                payload={"name": s.name, "minute": minute_label(minute), "ref": card.ref},
            )
    except LaneboardError as err:
        _record(store, s, minute, FAILED, err.message, None, result)
        return
    except Exception as err:  # a store failure: the mark and card rolled back together
        _record(store, s, minute, FAILED, f"{type(err).__name__}: {err}", None, result)
        return
    assert card is not None
    _record(store, s, minute, DISPATCHED, anomaly, card, result)


def _record(
    store: Store,
    s: Schedule,
    minute: int,
    outcome: str,
    detail: str | None,
    card: Card | None,
    result: PassResult,
) -> None:
    """Store the single most recent outcome and clear the fire mark."""
    try:
        nxt = cron.next_due(s.expr, s.zone, minute)
    except LaneboardError:
        nxt = None
    with store.write() as tx:
        _update(
            tx,
            s.id,
            last_outcome=outcome,
            last_minute=minute,
            last_detail=detail,
            last_card_id=card.id if card else None,
            last_outcome_at=tx.now(),
            fired_minute=None,
            fired_card_id=None,
            fired_at=None,
            next_due_at=nxt,
        )
        entry: dict[str, Any] = {"name": s.name, "minute": minute_label(minute)}
        if outcome == DISPATCHED:
            assert card is not None
            entry.update(ref=card.ref, card_id=card.id)
            if detail:
                entry["anomaly"] = detail
            result.fired.append(entry)
            tx.append_event("schedule.dispatched", SCHEDULER, card_id=card.id, payload=entry)
        else:
            entry["reason"] = detail
            result.failed.append(entry)
            tx.append_event("schedule.dispatch_failed", SCHEDULER, payload=entry)


def reconcile(store: Store, result: PassResult) -> None:
    """Settle fire marks an earlier pass left without an outcome.

    A mark with no card behind it is withdrawn; a mark with a card is adopted as that
    fire's outcome, stating anything unexpected about it.
    """
    with store.write() as tx:
        marked = [s for s in _all(tx) if s.fired_minute is not None]
        for s in marked:
            assert s.fired_minute is not None
            minute = s.fired_minute
            entry: dict[str, Any] = {"name": s.name, "minute": minute_label(minute)}
            card = tx.card(s.fired_card_id) if s.fired_card_id is not None else None
            notes: list[str] = []
            if card is None:
                card = tx.card_by_key(fire_key(s.name, minute))
                if card is not None:
                    notes.append("the mark did not name its card; found it by key")
            if card is None:
                _update(tx, s.id, fired_minute=None, fired_card_id=None, fired_at=None)
                entry["action"] = "withdrawn"
                tx.append_event("schedule.mark_withdrawn", SCHEDULER, payload=entry)
                result.reconciled.append(entry)
                continue
            if card.status.value == "canceled":
                notes.append(f"{card.ref} is canceled")
            newer = s.last_minute is not None and s.last_minute > minute
            if newer:
                notes.append("a later outcome was already recorded; kept it")
                _update(tx, s.id, fired_minute=None, fired_card_id=None, fired_at=None)
            else:
                _update(
                    tx,
                    s.id,
                    last_outcome=DISPATCHED,
                    last_minute=minute,
                    last_detail="adopted by reconciliation"
                    + (": " + "; ".join(notes) if notes else ""),
                    last_card_id=card.id,
                    last_outcome_at=tx.now(),
                    fired_minute=None,
                    fired_card_id=None,
                    fired_at=None,
                )
            entry.update(action="adopted", ref=card.ref, anomaly="; ".join(notes) or None)
            tx.append_event("schedule.mark_adopted", SCHEDULER, card_id=card.id, payload=entry)
            result.reconciled.append(entry)


# -- for lb status / lb doctor ----------------------------------------------------------------
def schedules_summary(store: Store, clock: Clock) -> dict[str, Any]:
    """Counts, overdue schedules, failures and the next fire, for status and doctor."""
    now = clock.now_ms()
    with store.read() as tx:
        items = _all(tx)
    overdue: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    never: list[str] = []
    broken: list[dict[str, Any]] = []
    soonest: tuple[int, str] | None = None
    for s in items:
        if s.broken:
            broken.append({"name": s.name, "reason": s.broken})
            continue
        try:
            state, missed = health(s, now)
            nxt = upcoming(s, now)
        except LaneboardError as err:
            failed.append({"name": s.name, "reason": err.message})
            continue
        if state == OVERDUE:
            overdue.append({"name": s.name, "expression": s.expression, "missed": iso(missed)})
        elif state == NEVER_RUN:
            never.append(s.name)
        if s.last_outcome == FAILED:
            failed.append({"name": s.name, "reason": s.last_detail})
        if nxt is not None and (soonest is None or nxt < soonest[0]):
            soonest = (nxt, s.name)
    return {
        "total": len(items),
        "enabled": sum(1 for s in items if s.enabled),
        "overdue": overdue,
        "failed": failed,
        "never_run": never,
        "broken": broken,
        "next": {"name": soonest[1], "at": iso(soonest[0])} if soonest else None,
    }
