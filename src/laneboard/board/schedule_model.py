"""A schedule as stored, and how healthy it is: the record, its health and its view."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from laneboard.board import schedule_jobs as jobs
from laneboard.domain import cron
from laneboard.domain.clock import iso
from laneboard.errors import LaneboardError
from laneboard.store.base import Row

DISPATCHED, FAILED = "dispatched", "dispatch-failed"
NEVER_RUN, OK, OVERDUE = "never-run", "ok", "overdue"
FAILING, BROKEN = "failing", "broken"  # the last dispatch failed; the row cannot be read


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
    broken: str | None = None  # why the stored row cannot be used (None: it can)

    @staticmethod
    def from_row(r: Row) -> Schedule:
        """The schedule of a row; a row that cannot be read is a ``broken`` schedule that
        every reader reports and the pass skips, never an error for the others."""
        try:
            s = Schedule._parse(r)
            cron.parse(s.expression)
            jobs.zone_of(s.timezone)
            return s
        except (LaneboardError, ValueError, TypeError, KeyError) as exc:
            why = exc.message if isinstance(exc, LaneboardError) else f"{type(exc).__name__}: {exc}"
            return Schedule(
                id=int(r["id"]), name=str(r["name"]), expression=str(r["expression"]),
                timezone=str(r["timezone"]), job={}, enabled=False, armed_at=0,
                next_due_at=None, last_outcome=r["last_outcome"], last_minute=None,
                last_detail=r["last_detail"], last_card_id=None, last_outcome_at=None,
                fired_minute=None, fired_card_id=None, fired_at=None, missed_minute=None,
                created_by=str(r["created_by"]), created_at=int(r["created_at"] or 0),
                broken=why[:300],
            )  # fmt: skip

    @staticmethod
    def _parse(r: Row) -> Schedule:
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


# -- health -----------------------------------------------------------------------------------
def health(s: Schedule, now: int) -> tuple[str, int | None]:
    """(``never-run`` | ``ok`` | ``overdue`` | ``failing`` | ``broken``, the occurrence that
    was missed if overdue). A schedule whose last dispatch failed is never ``ok``."""
    if s.broken:
        return BROKEN, None
    done = s.covered()
    if s.enabled:
        last = cron.last_elapsed(s.expr, s.zone, now, s.armed_at)
        if last is not None and (done is None or done < last):
            return OVERDUE, last
    if s.last_outcome == FAILED:
        return FAILING, None
    return (NEVER_RUN if done is None and s.last_outcome is None else OK), None


def upcoming(s: Schedule, now: int) -> int | None:
    """The next minute this schedule will fire in (this one if due and not yet fired)."""
    if not s.enabled or s.broken:
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
    if s.broken:
        return broken_view(s)
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


def broken_view(s: Schedule) -> dict[str, Any]:
    """What is known of a schedule whose stored row cannot be used."""
    return {
        "name": s.name,
        "expression": s.expression,
        "explanation": None,
        "timezone": s.timezone,
        "enabled": False,
        "next_due": None,
        "next_due_local": None,
        "last_outcome": s.last_outcome,
        "last_minute": None,
        "last_detail": s.last_detail,
        "last_card": None,
        "health": BROKEN,
        "broken": s.broken,
        "overdue_since": None,
        "project": None,
        "title": None,
        "job": {},
    }
