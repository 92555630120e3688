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
from laneboard.domain import cron
from laneboard.domain.clock import MINUTE_MS, Clock, iso
from laneboard.domain.model import Actor, Card, system
from laneboard.errors import LaneboardError, not_found
from laneboard.store import Store
from laneboard.store.base import Row
from laneboard.store.rows import dumps
from laneboard.store.tx import Tx

LOCK_NAME = "schedule-tick"
LOCK_TTL_MS = 2 * MINUTE_MS  # the stale window: a lease older than this is taken over
SCHEDULER = system("scheduler")
DISPATCHED, FAILED = "dispatched", "dispatch-failed"
NEVER_RUN, OK, OVERDUE = "never-run", "ok", "overdue"


def minute_label(minute_ms: int) -> str:
    """A fire minute as text, in UTC: ``2026-01-01T09:00Z``."""
    return datetime.fromtimestamp(minute_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%MZ")


def fire_key(name: str, minute_ms: int) -> str:
    return f"schedule|{name}|{minute_label(minute_ms)}"


@dataclass(frozen=True)
class Schedule:
    id: int
    name: str
    expression: str
    timezone: str
    job: dict[str, Any]
    enabled: bool
    armed_at: int
    next_due_at: int | None
    last_outcome: str | None
    last_minute: int | None
    last_detail: str | None
    last_card_id: int | None
    last_outcome_at: int | None
    fired_minute: int | None
    fired_card_id: int | None
    fired_at: int | None
    missed_minute: int | None
    created_by: str
    created_at: int

    @staticmethod
    def from_row(r: Row) -> Schedule:
        import json

        return Schedule(
            id=int(r["id"]),
            name=r["name"],
            expression=r["expression"],
            timezone=r["timezone"],
            job=dict(json.loads(r["job"])),
            enabled=bool(r["enabled"]),
            armed_at=int(r["armed_at"]),
            next_due_at=r["next_due_at"],
            last_outcome=r["last_outcome"],
            last_minute=r["last_minute"],
            last_detail=r["last_detail"],
            last_card_id=r["last_card_id"],
            last_outcome_at=r["last_outcome_at"],
            fired_minute=r["fired_minute"],
            fired_card_id=r["fired_card_id"],
            fired_at=r["fired_at"],
            missed_minute=r["missed_minute"],
            created_by=r["created_by"],
            created_at=int(r["created_at"]),
        )

    @property
    def expr(self) -> cron.CronExpr:
        return cron.parse(self.expression)

    @property
    def zone(self) -> tzinfo:
        return jobs.zone_of(self.timezone)

    def covered(self) -> int | None:
        """The latest minute with an outcome (or a fire mark with a card behind it)."""
        got = [m for m in (self.last_minute,) if m is not None]
        if self.fired_minute is not None and self.fired_card_id is not None:
            got.append(self.fired_minute)
        return max(got) if got else None


# -- repository queries (functions taking a Tx) ---------------------------------------------
def _all(tx: Tx) -> list[Schedule]:
    return [Schedule.from_row(r) for r in tx.all("SELECT * FROM schedules ORDER BY name")]


def _one(tx: Tx, name: str) -> Schedule | None:
    r = tx.one("SELECT * FROM schedules WHERE name = ?", (name,))
    return Schedule.from_row(r) if r else None


def _need(tx: Tx, name: str) -> Schedule:
    s = _one(tx, name)
    if s is None:
        raise not_found("schedule", name, "list schedules with: lb schedule list")
    return s


def _update(tx: Tx, sid: int, **fields: Any) -> int:
    sets = ", ".join(f"{k} = ?" for k in fields)
    return tx.run(
        f"UPDATE schedules SET {sets}, updated_at = ? WHERE id = ?",
        [*fields.values(), tx.now(), sid],
    )


# -- health -----------------------------------------------------------------------------------
def health(s: Schedule, now: int) -> tuple[str, int | None]:
    """(``never-run`` | ``ok`` | ``overdue``, the occurrence that was missed if overdue)."""
    done = s.covered()
    if s.enabled:
        last = cron.last_elapsed(s.expr, s.zone, now, s.armed_at)
        if last is not None and (done is None or done < last):
            return OVERDUE, last
    return (NEVER_RUN if done is None and s.last_outcome is None else OK), None


def upcoming(s: Schedule, now: int) -> int | None:
    """The next minute this schedule will fire in (this one if due and not yet fired)."""
    if not s.enabled:
        return None
    expr, zone = s.expr, s.zone
    nxt = cron.next_due_from(expr, zone, now)
    done = s.covered()
    if nxt is not None and done is not None and nxt <= done:
        nxt = cron.next_due(expr, zone, done)
    return nxt


def _local_text(ms: int | None, zone: tzinfo) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=zone).strftime("%Y-%m-%d %H:%M %Z")


def view(s: Schedule, now: int, refs: dict[int, str] | None = None) -> dict[str, Any]:
    expr, zone = s.expr, s.zone
    state, missed = health(s, now)
    nxt = upcoming(s, now)
    refs = refs or {}
    return {
        "name": s.name,
        "expression": s.expression,
        "explanation": cron.explain(expr),
        "timezone": s.timezone,
        "enabled": s.enabled,
        "next_due": iso(nxt),
        "next_due_local": _local_text(nxt, zone),
        "last_outcome": s.last_outcome,
        "last_minute": iso(s.last_minute),
        "last_detail": s.last_detail,
        "last_card": refs.get(s.last_card_id) if s.last_card_id is not None else None,
        "health": state,
        "overdue_since": iso(missed),
        "project": s.job.get("project"),
        "title": s.job.get("title"),
        "job": s.job,
    }


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
        jobs.refuse_agent(actor.kind.value, "add schedules")
        name = jobs.check_name(name)
        expr = cron.parse(expression)
        zone = jobs.zone_of(jobs.check_zone(timezone))
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
            tx.run(
                "INSERT INTO schedules (name, expression, timezone, job, enabled, armed_at, "
                "next_due_at, created_by, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, expr.text, timezone, dumps(template), int(enabled), now, nxt, actor.name,
                 now, now),
            )  # fmt: skip
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
        jobs.refuse_agent(actor.kind.value, "remove schedules")
        now = self.clock.now_ms()
        with self.store.write() as tx:
            s = _need(tx, name)
            out = view(s, now)
            tx.run("DELETE FROM schedules WHERE id = ?", (s.id,))
            tx.append_event("schedule.removed", actor, payload={"name": name})
            return out

    def set_enabled(self, actor: Actor, name: str, enabled: bool) -> dict[str, Any]:
        jobs.refuse_agent(actor.kind.value, "change schedules")
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
    last = cron.last_elapsed(expr, zone, now, s.armed_at)
    done = s.covered()
    if last is None or (done is not None and done >= last):
        return
    entry = {"name": s.name, "minute": minute_label(last)}
    result.missed.append(entry)
    if s.missed_minute == last:
        return  # already recorded by an earlier pass
    with store.write() as tx:
        _update(tx, s.id, missed_minute=last, next_due_at=cron.next_due_from(expr, zone, now))
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
            marked = tx.run(
                "UPDATE schedules SET fired_minute = ?, fired_at = ?, fired_card_id = NULL, "
                "updated_at = ? WHERE id = ? AND enabled = 1 AND "
                "(fired_minute IS NULL OR fired_minute <> ?)",
                (minute, tx.now(), tx.now(), fresh.id, minute),
            )
            if marked != 1:
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
    soonest: tuple[int, str] | None = None
    for s in items:
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
        "next": {"name": soonest[1], "at": iso(soonest[0])} if soonest else None,
    }
