"""The event log: appends, history reads, and cursor reads that never skip an event.

Writers never wait on each other for the log. On PostgreSQL each event records its
transaction id (``xid``, a column default); transactions commit in any order, so a
reader takes only events below the oldest transaction still running (the *watermark*,
``pg_snapshot_xmin`` of its own snapshot) and orders them by ``(xid, id)``. Everything
below the watermark is settled: no transaction that could still add an event there is
alive, so a reader resuming after its cursor never skips an event committed before one
it has seen. On SQLite the single writer commits in id order and ``xid`` is 0.

History reads (``events``, ``last_events``) are plain snapshot reads of what has
committed, in id order; followers use ``events_after`` and its cursor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from laneboard.domain.cursor import START, EventCursor, LogMarks
from laneboard.domain.model import Actor, Event
from laneboard.errors import LaneboardError
from laneboard.store import rows
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps

WATERMARK = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
# the transactions open in the statement's snapshot (``LogMarks.open``)
OPEN_XIDS = "ARRAY(SELECT pg_snapshot_xip(pg_current_snapshot())::text::bigint)"
EVENT_COLUMNS = "at, type, card_id, project_id, run_id, actor, actor_kind, payload"
INSERT_EVENT = (
    f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id, xid"
)


def _xids(value: Any) -> tuple[int, ...]:
    """The open transactions' ids of an ``OPEN_XIDS`` column, in order."""
    return tuple(sorted(int(x) for x in value or ()))


def _filters(
    card_id: int | None,
    project_id: int | None,
    run_id: int | None,
    types: Iterable[str],
    card_ids: Sequence[int] | None = None,
) -> tuple[str, list[Any]]:
    """Extra conditions; ``card_ids`` (when given) keeps the events about those cards."""
    where: list[str] = []
    params: list[Any] = []
    for col, val in (("card_id", card_id), ("project_id", project_id), ("run_id", run_id)):
        if val is not None:
            where.append(f" AND {col} = ?")
            params.append(val)
    tl = list(types)
    if tl:
        where.append(" AND type IN (" + ",".join("?" * len(tl)) + ")")
        params.extend(tl)
    if card_ids is not None:
        ids = list(card_ids) or [-1]  # none: no event matches
        where.append(" AND card_id IN (" + ",".join("?" * len(ids)) + ")")
        params.extend(ids)
    return "".join(where), params


class EventQueries(Queries):
    """Event queries of ``Tx``.

    On PostgreSQL an appended event is written with the transaction's next statement, or
    with its ``COMMIT`` in the same round trip when nothing follows (the common case):
    the transaction still holds its events, and reads in it still see them.
    """

    events_pending: list[tuple[Any, ...]]
    _last_event: EventCursor | None

    def append_event(
        self,
        type_: str,
        actor: Actor,
        *,
        card_id: int | None = None,
        project_id: int | None = None,
        run_id: int | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        values = (
            self.now(),
            type_,
            card_id,
            project_id,
            run_id,
            actor.name,
            actor.kind.value,
            dumps(payload or {}),
        )
        if self.pg:
            self.events_pending.append(values)
        else:
            self._insert_event(values)

    @property
    def last_event(self) -> EventCursor | None:
        """The position of this transaction's last event so far (writes pending ones)."""
        self.flush_events()
        return self._last_event

    def flush_events(self) -> None:
        pending, self.events_pending = self.events_pending, []
        for values in pending:
            self._insert_event(values)

    def take_pending_events(self) -> list[tuple[Any, ...]]:
        """The events not yet written, for the commit to write (they leave this ``Tx``)."""
        pending, self.events_pending = self.events_pending, []
        return pending

    def _insert_event(self, values: tuple[Any, ...]) -> None:
        row = self.one(INSERT_EVENT, values)
        assert row is not None
        self._last_event = EventCursor(int(row["xid"]), int(row["id"]))

    # -- history: what has committed, in id order ------------------------------------------
    def events(
        self,
        after: int = 0,
        *,
        card_id: int | None = None,
        project_id: int | None = None,
        run_id: int | None = None,
        types: Iterable[str] = (),
        card_ids: Sequence[int] | None = None,
        limit: int = 100,
    ) -> list[Event]:
        """Committed events with an id above ``after`` (a history read, not a resume);
        ``card_ids`` (when given) keeps those about these cards."""
        extra, params = _filters(card_id, project_id, run_id, types, card_ids)
        sql = f"SELECT * FROM events WHERE id > ?{extra} ORDER BY id LIMIT ?"
        return [rows.event(r) for r in self.all(sql, [after, *params, limit])]

    def last_events(
        self, n: int, *, card_id: int | None = None, card_ids: Sequence[int] | None = None
    ) -> list[Event]:
        """The ``n`` newest events (oldest first), of one card or of ``card_ids``."""
        extra, params = _filters(card_id, None, None, (), card_ids)
        got = self.all(
            f"SELECT * FROM events WHERE 1 = 1{extra} ORDER BY id DESC LIMIT ?", [*params, n]
        )
        return [rows.event(r) for r in reversed(got)]

    def max_event_id(self) -> int:
        """The highest committed event id (a count-like mark; not a resume cursor)."""
        return int(self.scalar("SELECT coalesce(max(id), 0) FROM events") or 0)

    # -- followers: cursor reads ------------------------------------------------------------
    def resolve_cursor(self, cursor: EventCursor | int) -> EventCursor:
        """A cursor for a bare event id: that event's position (0 is the start)."""
        if not self.pg:  # id order is log order (an xid copied from elsewhere is moot)
            return EventCursor(0, cursor.id if isinstance(cursor, EventCursor) else cursor)
        if isinstance(cursor, EventCursor):
            return cursor
        if cursor == 0:
            return START
        xid = self.scalar("SELECT xid FROM events WHERE id = ?", (cursor,))
        if xid is None:
            raise LaneboardError(
                "BAD_INPUT",
                f"event cursor {cursor} names no event on this board",
                "pass 0, or a cursor from a previous read (the cursor field of "
                "lb events tail --json, or the SSE id)",
            )
        return EventCursor(int(xid), cursor)

    def events_after(
        self,
        cursor: EventCursor | int,
        *,
        card_id: int | None = None,
        project_id: int | None = None,
        run_id: int | None = None,
        types: Iterable[str] = (),
        card_ids: Sequence[int] | None = None,
        limit: int = 100,
    ) -> tuple[list[Event], EventCursor]:
        """Settled events after ``cursor`` in log order, and the cursor to resume from.

        The next cursor passes over events the filters left out, up to the watermark,
        so a filtered follower does not read them again.
        """
        at = self.resolve_cursor(cursor)
        extra, params = _filters(card_id, project_id, run_id, types, card_ids)
        if self.pg:
            sql = (
                f"SELECT w.mark, e.* FROM (SELECT {WATERMARK} AS mark) w LEFT JOIN LATERAL "
                "(SELECT * FROM events WHERE (xid, id) > (?, ?) AND xid < w.mark"
                f"{extra} ORDER BY xid, id LIMIT ?) e ON true"
            )
            got = self.all(sql, [at.xid, at.id, *params, limit])
        else:
            sql = (
                "SELECT m.mark, e.* FROM (SELECT coalesce(max(id), 0) AS mark FROM events) m "
                f"LEFT JOIN (SELECT * FROM events WHERE id > ?{extra} ORDER BY id LIMIT ?) e "
                "ON 1 = 1"
            )
            got = self.all(sql, [at.id, *params, limit])
        found = [rows.event(r) for r in got if r["id"] is not None]
        end = self._settled(got[0]["mark"])
        if not found:
            self.refuse_ahead(at, end)
        if len(found) >= limit:
            return found, EventCursor(found[-1].xid, found[-1].id)
        return found, max(at, end)

    def refuse_ahead(self, at: EventCursor, end: EventCursor | None = None) -> None:
        """Refuse a cursor past the end of this log (``end``: read now when not given):
        no read of this board returned it, and following it would skip every event until
        the log caught up. On PostgreSQL only the transaction id tells (the end is the
        oldest transaction still running, which never moves back); an id is taken as it is
        within a transaction's events. A cursor of an event of this board that is not
        settled yet (a history read returns committed events behind an older open
        transaction) is refused too, for what it is: following from it could miss what
        that older transaction adds before it."""
        end = self.event_head() if end is None else end
        if not ((at.xid > end.xid) if self.pg else (at.id > end.id)):
            return
        named = "SELECT 1 AS x FROM events WHERE xid = ? AND id = ?"
        if self.pg and self.one(named, (at.xid, at.id)) is not None:
            raise LaneboardError(  # a history read returned it: committed, not settled
                "BAD_INPUT",
                f"event cursor {at} is not settled yet: a transaction older than its event "
                f"is still open on the server (the log's settled end is {end}), and a "
                "follower starting there could miss what that transaction adds",
                "follow from a cursor a follower returned (lb events tail --json prints "
                "one; an SSE stream's ids are), or try again once that transaction ends",
            )
        raise LaneboardError(
            "BAD_INPUT",
            f"event cursor {at} is ahead of this board's log (its end is {end}): it "
            "comes from another board or a restored database",
            "start again from 0, or from the end: the cursor lb events tail --json prints "
            "(an SSE client: reconnect without Last-Event-ID)",
        )

    def events_tail(
        self,
        n: int,
        *,
        card_id: int | None = None,
        project_id: int | None = None,
        run_id: int | None = None,
        card_ids: Sequence[int] | None = None,
    ) -> tuple[list[Event], EventCursor]:
        """The last ``n`` settled events in log order, and the cursor after them."""
        extra, params = _filters(card_id, project_id, run_id, (), card_ids)
        if self.pg:
            sql = (
                f"SELECT w.mark, e.* FROM (SELECT {WATERMARK} AS mark) w LEFT JOIN LATERAL "
                f"(SELECT * FROM events WHERE xid < w.mark{extra} "
                "ORDER BY xid DESC, id DESC LIMIT ?) e ON true"
            )
        else:
            sql = (
                "SELECT m.mark, e.* FROM (SELECT coalesce(max(id), 0) AS mark FROM events) m "
                f"LEFT JOIN (SELECT * FROM events WHERE 1 = 1{extra} ORDER BY id DESC LIMIT ?) e "
                "ON 1 = 1"
            )
        got = self.all(sql, [*params, n])
        found = [rows.event(r) for r in reversed(got) if r["id"] is not None]
        return found, self._settled(got[0]["mark"])

    def event_head(self) -> EventCursor:
        """The cursor at the end of the settled log: a follower starting here sees only new."""
        if self.pg:
            return self._settled(self.scalar(f"SELECT {WATERMARK}"))
        return self._settled(self.max_event_id())

    def has_events_after(self, cursor: EventCursor | int) -> bool:
        """Whether a settled event lies after ``cursor`` (one index probe)."""
        at = self.resolve_cursor(cursor)
        if self.pg:
            sql = (
                "SELECT 1 AS x FROM events WHERE (xid, id) > (?, ?) "
                f"AND xid < {WATERMARK} ORDER BY xid, id LIMIT 1"
            )
            return self.one(sql, (at.xid, at.id)) is not None
        return self.one("SELECT 1 AS x FROM events WHERE id > ? LIMIT 1", (at.id,)) is not None

    def log_marks(self) -> LogMarks:
        """The last event committed and, on PostgreSQL, the transactions still open:
        what ``log_changed`` and ``log_news`` compare."""
        if not self.pg:
            return LogMarks(EventCursor(0, int(self.max_event_id() or 0)))
        row = self.one(
            f"SELECT {OPEN_XIDS} AS open, e.xid, e.id FROM (SELECT 1) o LEFT JOIN LATERAL "
            "(SELECT xid, id FROM events ORDER BY xid DESC, id DESC LIMIT 1) e ON true"
        )
        assert row is not None
        last = EventCursor(int(row["xid"] or 0), int(row["id"] or 0))
        return LogMarks(last, _xids(row["open"]))

    def log_changed(self, marks: LogMarks) -> bool:
        """Whether anything was logged since ``log_marks()`` returned ``marks``: an event
        after the last one seen, or one of a transaction that was still open then (it
        sorts before what was seen since). For "did anything happen", not for reading in
        order: it does not wait for older transactions to finish."""
        if not self.pg:
            return self.has_events_after(marks.last)
        row = self.one(
            "SELECT EXISTS (SELECT 1 FROM events WHERE (xid, id) > (?, ?)) "
            "OR EXISTS (SELECT 1 FROM events WHERE xid = ANY(?::bigint[])) AS changed",
            (marks.last.xid, marks.last.id, list(marks.open)),
        )
        assert row is not None
        return bool(row["changed"])

    def log_news(self, marks: LogMarks, limit: int = 200) -> tuple[LogMarks, set[str] | None]:
        """What ``log_changed`` looks at, in one statement: the marks now and the types
        of the events logged since ``marks`` (None: more than ``limit`` of them, read
        ``log_marks`` again). No event is named twice, none is missed: the new marks
        are those of the statement's own snapshot."""
        last = marks.last
        if not self.pg:
            got = self.all(
                "SELECT id, type FROM events WHERE id > ? ORDER BY id LIMIT ?", (last.id, limit)
            )
            if len(got) >= limit:
                return self.log_marks(), None
            top = EventCursor(0, int(got[-1]["id"])) if got else last
            return LogMarks(top), {str(r["type"]) for r in got}
        got = self.all(
            f"SELECT {OPEN_XIDS} AS open, e.xid, e.id, e.type FROM (SELECT 1) o LEFT JOIN "
            "LATERAL (SELECT xid, id, type FROM events WHERE (xid, id) > (?, ?) "
            "OR xid = ANY(?::bigint[]) ORDER BY xid, id LIMIT ?) e ON true",
            (last.xid, last.id, list(marks.open), limit),
        )
        if len(got) >= limit:
            return self.log_marks(), None
        seen = [EventCursor(int(r["xid"]), int(r["id"])) for r in got if r["id"] is not None]
        types = {str(r["type"]) for r in got if r["id"] is not None}
        return LogMarks(max([last, *seen]), _xids(got[0]["open"])), types

    def event_backlog(self, cursor: EventCursor) -> tuple[bool, bool]:
        """(a settled event lies after ``cursor``, a committed one not yet settled does)."""
        if not self.pg:
            return self.has_events_after(cursor), False
        row = self.one(
            "SELECT EXISTS (SELECT 1 FROM events WHERE (xid, id) > (?, ?) "
            f"AND xid < {WATERMARK}) AS settled, "
            "EXISTS (SELECT 1 FROM events WHERE (xid, id) > (?, ?)) AS pending",
            (cursor.xid, cursor.id, cursor.xid, cursor.id),
        )
        assert row is not None
        return bool(row["settled"]), bool(row["pending"])

    def _settled(self, mark: Any) -> EventCursor:
        """The cursor that has consumed every settled event, from the statement's mark."""
        return EventCursor(int(mark), 0) if self.pg else EventCursor(0, int(mark or 0))
