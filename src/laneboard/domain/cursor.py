"""The event cursor: where a reader of the event log stands.

Events are read in ``(xid, id)`` order: ``xid`` is the writing transaction's id on
PostgreSQL and 0 on SQLite (whose single writer already commits in id order). A cursor
is the position of the last event a reader has consumed; its text form is ``"<id>"``
when ``xid`` is 0 and ``"<xid>.<id>"`` otherwise, so it round-trips unchanged through
``Last-Event-ID``, ``--after`` and JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from laneboard.errors import LaneboardError

MAX_PART = 2**63 - 1


@dataclass(frozen=True, order=True)
class EventCursor:
    xid: int
    id: int

    def __str__(self) -> str:
        return str(self.id) if self.xid == 0 else f"{self.xid}.{self.id}"


START = EventCursor(0, 0)


def _part(text: str, whole: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > MAX_PART:
        raise LaneboardError(
            "BAD_INPUT",
            f"event cursor {whole!r} is not valid",
            "pass 0, an event id, or a cursor from a previous read (e.g. 1234 or 5678.1234)",
        )
    return int(text)


def parse_cursor(value: str | int | EventCursor) -> EventCursor | int:
    """A cursor from its text form. A bare number is an event id: the store resolves it."""
    if isinstance(value, EventCursor):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return _part(str(value), str(value))
    text = str(value).strip()
    if "." in text:
        xid, _, eid = text.partition(".")
        return EventCursor(_part(xid, text), _part(eid, text))
    return _part(text, text)


@dataclass(frozen=True)
class LogMarks:
    """What a reader that only asks "what happened since" remembers of the log: the last
    event it could see, and the transactions still open then (PostgreSQL's snapshot;
    none on SQLite). Everything logged since is an event after ``last`` or one written
    by an ``open`` transaction: a transaction that began later writes after ``last``,
    and one that had committed was seen. An event seen once is never news again, even
    when an older transaction kept it unsettled."""

    last: EventCursor
    open: tuple[int, ...] = ()
