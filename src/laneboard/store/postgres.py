"""PostgreSQL backend (psycopg 3): the shared board for several machines.

psycopg is imported only when this backend is opened, keeping the CLI fast on SQLite.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from laneboard.domain.clock import Clock
from laneboard.secrets import scrub_params
from laneboard.store.announce import Announcer
from laneboard.store.base import (
    Conn,
    IntegrityError,
    Row,
    Store,
    mark_nothing_written,
    unstorable,
)
from laneboard.store.quiet import QUIET_TYPES

CHANNEL_PREFIX = "laneboard:"
# a statement whose result columns follow the table (``SELECT *``, ``RETURNING t.*``) is
# never prepared: a column added by a migration elsewhere would break the cached plan
_STAR = re.compile(r"(?:\bSELECT|\bRETURNING|,)\s+(?:\w+\.)?\*")


QUIET_SUFFIX = ":quiet"
# A pooled connection's prepared statements are dropped (to be planned again) after it
# has been taken for this many transactions, then after twice as many each time, up to
# the last (``_replan``).
DB_CONNECTIONS = 8  # a process's connections at most (LANEBOARD_DB_CONNECTIONS), listener aside
DB_CONNECTIONS_MAX = 10_000
REPLAN_FIRST = 1_000
REPLAN_MAX = 64_000


def channel_for(schema: str, *, quiet: bool = False) -> str:
    """The NOTIFY channel of the board in ``schema`` (channels are per database); with
    ``quiet``, the one its writes of only ``QUIET_TYPES`` are announced on."""
    suffix = QUIET_SUFFIX if quiet else ""
    name = CHANNEL_PREFIX + schema + suffix
    if len(name.encode()) > 63:  # an identifier's limit; a long name is hashed
        import hashlib

        name = CHANNEL_PREFIX + hashlib.sha1(schema.encode()).hexdigest()[:20] + suffix
    return name


def quiet_payload(types: str) -> bool:
    """Whether an announcement of ``types`` goes to the quiet channel: it names only
    ``QUIET_TYPES`` ('' names none: an unknown write is announced to everyone)."""
    return bool(types) and set(types.split(",")) <= QUIET_TYPES


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def quote_ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


@functools.lru_cache(maxsize=4096)
def _convert(sql: str) -> tuple[bytes, bool | None]:
    """The server's form of a statement (``$1``, ``$2``, ...: it is sent as it is, through
    ``_run``; encoded once, its text being ASCII), and whether it may be prepared (None:
    automatically)."""
    parts = sql.split("?")
    text = parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))
    return text.encode(), (False if _STAR.search(sql) else None)


# column names by statement, for the statements whose columns are named (``_STAR``)
_NAMES: dict[bytes, tuple[str, ...]] = {}


# the attribute of a pooled connection that holds its one raw cursor, made once and used
# for every statement on it (a connection serves one thread at a time): a cursor made per
# statement costs about a third of the client's CPU for a short statement. Kept on the
# connection itself, the two are freed together when the pool drops the connection.
CURSOR_ATTR = "_laneboard_cursor"


def _cursor(raw: Any) -> Any:
    """``raw``'s own raw cursor, rows as tuples (``_rows``)."""
    cur = getattr(raw, CURSOR_ATTR, None)
    if cur is None:
        from psycopg import RawCursor
        from psycopg.rows import tuple_row

        cur = RawCursor(raw, row_factory=tuple_row)
        setattr(raw, CURSOR_ATTR, cur)
    return cur


def _run(raw: Any, text: bytes, params: Sequence[Any], prepare: bool | None) -> Any:
    """Execute a statement in the server's own placeholders (``_convert``) on the
    connection's raw cursor: psycopg then parses no query text (it does for ``%s``, on
    every call for a statement over 4 kB), and the statement is prepared as usual. The
    caller reads the rows at once (``_rows``): the next statement reuses the cursor."""
    cur = _cursor(raw)
    cur.execute(text, params, prepare=prepare)
    return cur


def _simple(raw: Any, text: str) -> Any:
    """A statement without parameters (``BEGIN``, ``COMMIT``, several joined by ``;``),
    never prepared, on the connection's raw cursor; rows come as tuples."""
    return _run(raw, text.encode(), (), False)


def _rows(cur: Any, text: bytes, prepare: bool | None) -> list[Row]:
    """A ``_run`` statement's rows as dicts, with its column names read once per statement
    whose columns are named (a ``*`` may gain a column when a migration runs elsewhere)."""
    res = cur.pgresult  # not ``cur.description``, which builds a record per column
    if res is None or res.nfields == 0:
        return []
    names = _NAMES.get(text) if prepare is None else None
    if names is None:
        names = tuple(res.fname(i).decode() for i in range(res.nfields))
        if prepare is None:
            _NAMES[text] = names
    return [dict(zip(names, values, strict=True)) for values in cur.fetchall()]


NOTIFY_TYPES_MAX = 1000  # a longer list of event types is announced as '' (unknown)


def _types_of(conn: Conn) -> str:
    """The NOTIFY payload of a write: its events' types, comma-separated, when every event
    is still in ``conn.events``; '' when some are not, or the list is long (a listener
    then reads the log). A listener may skip what names only types it ignores."""
    if conn.flushed or not conn.events:
        return ""
    text = ",".join(sorted({str(values[1]) for values in conn.events}))
    return text if len(text) <= NOTIFY_TYPES_MAX else ""


def _alive(raw: Any) -> bool:
    """Whether the server still holds this idle pooled connection, without a round trip.

    A server that ends a session (a restart, a managed database's failover,
    ``pg_terminate_backend``) sends its goodbye and closes the socket; the client learns
    of it only when it reads. An idle connection has nothing to read, so a socket that
    is readable is read (without waiting): the goodbye, then the end of the stream, mark
    the connection bad.
    """
    import select

    import psycopg
    from psycopg.pq import ConnStatus

    if raw.closed or raw.broken:
        return False
    pg = raw.pgconn
    try:
        ready = select.poll()  # not select(): a busy process's descriptors pass 1024
        ready.register(pg.socket, select.POLLIN)
        for _ in range(2):  # the server's goodbye, then its end of file
            if not ready.poll(0):
                break
            pg.consume_input()
    except (psycopg.OperationalError, OSError):
        return False
    return bool(pg.status == ConnStatus.OK)


def _lost(raw: Any) -> bool:
    """Whether a statement's failure lost the connection itself (not a refused statement)."""
    return bool(raw.closed or raw.broken)


def db_connections() -> int:
    """How many connections one process opens to the board at most (the wake-up
    listener's aside): ``LANEBOARD_DB_CONNECTIONS``, or ``DB_CONNECTIONS``."""
    import os

    from laneboard.errors import LaneboardError

    raw = os.environ.get("LANEBOARD_DB_CONNECTIONS", "").strip()
    if not raw:
        return DB_CONNECTIONS
    n = int(raw) if raw.isdigit() else 0
    if not 1 <= n <= DB_CONNECTIONS_MAX:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"LANEBOARD_DB_CONNECTIONS={raw[:40]!r} is not a number of connections",
            f"use a whole number from 1 to {DB_CONNECTIONS_MAX}, e.g. "
            f"LANEBOARD_DB_CONNECTIONS={DB_CONNECTIONS}",
        )
    return n


class _PgConn(Conn):
    def __init__(self, raw: Any, renew: Callable[[Any], Any] | None = None) -> None:
        self.raw = raw
        self._rowcount = 0
        # a read whose pooled connection the server ended is run again on a new one: its
        # first statement only (nothing of it has run), never a write's
        self._renew = renew

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        import psycopg

        renew, self._renew = self._renew, None
        if renew is not None:
            try:
                return self.execute(sql, params)
            except psycopg.OperationalError:
                if not _lost(self.raw):
                    raise
                self.raw = renew(self.raw)
                return self.execute(sql, params)
        try:
            text, prepare = _convert(sql)
            cur = _run(self.raw, text, scrub_params(sql, params), prepare)
        except psycopg.errors.IntegrityError as exc:
            raise IntegrityError(str(exc)) from exc
        except psycopg.DataError as exc:  # the board checks input first; this is the net
            raise unstorable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
        self._rowcount = cur.rowcount
        return _rows(cur, text, prepare)

    def rowcount(self) -> int:
        return self._rowcount


class PostgresStore(Store):
    dialect = "postgresql"
    types: ClassVar[dict[str, str]] = {
        "pk": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        "int": "BIGINT",
        "text": "TEXT",
        "real": "DOUBLE PRECISION",
    }

    def __init__(self, url: str, clock: Clock | None = None) -> None:
        super().__init__(url, clock)
        self.max_connections = db_connections()
        self._channel: str | None = None
        self._quiet_channel = ""
        self.announcer = Announcer(self._send_notify)
        # per pooled connection: the uses left before it plans its statements again, and
        # the length of the interval it is in
        self._replan_in: weakref.WeakKeyDictionary[Any, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )

    def notify_channel(self, *, quiet: bool = False) -> str:
        """The channel this board's events are announced on (one per schema), or with
        ``quiet`` the one for writes of only ``QUIET_TYPES``."""
        if self._channel is None:
            self._name_channels(str(self.query("SELECT current_schema() AS s")[0]["s"]))
        return self._quiet_channel if quiet else str(self._channel)

    def _name_channels(self, schema: str) -> None:
        self._channel = channel_for(schema)
        self._quiet_channel = channel_for(schema, quiet=True)

    def _connect(self) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        raw = psycopg.connect(self.url, row_factory=dict_row, autocommit=True)
        self._replan_in[raw] = (REPLAN_FIRST, REPLAN_FIRST)
        return raw

    def _acquire(self) -> Any:
        raw = super()._acquire()
        if not _alive(raw):  # the server ended it while it idled here, and the others too
            self._release(raw, broken=True)
            self._drop_idle()
            raw = super()._acquire()  # a new one (a write's BEGIN checks it anyway)
        left, gap = self._replan_in[raw]
        if left <= 0:
            self._replan(raw)
            gap = min(gap * 2, REPLAN_MAX)
            left = gap
        self._replan_in[raw] = (left - 1, gap)
        return raw

    def _replan(self, raw: Any) -> None:
        """Drop ``raw``'s prepared statements: each is prepared and planned again after a
        few more runs. The server keeps a generic plan until an ``ANALYZE`` invalidates
        it, and a board starts empty, so a plan made while a table held a page (a scan,
        then right) would otherwise read the whole table for every lookup by key once it
        has grown faster than anything analyzed it. Planning again sizes each table as it
        is now. Counted in the connection's uses, at doubling intervals: tables grow with
        the writes, and each statement's ten or so plannings (psycopg's five unprepared
        runs, the server's five custom plans) stay a small part of what the connection
        did in between. psycopg forgets its own record of them on seeing
        ``DEALLOCATE ALL``.
        """
        import psycopg

        try:
            raw.execute("DEALLOCATE ALL", prepare=False)
        except psycopg.Error:
            self._release(raw, broken=True)
            raise

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Conn]:
        import psycopg

        begin = "BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
        raw = self._acquire()
        try:
            try:
                _simple(raw, begin)
            except psycopg.OperationalError:
                if not _lost(raw):
                    raise
                raw = self._renew(raw)  # nothing was sent but BEGIN: begin on a new one
                _simple(raw, begin)
        except psycopg.OperationalError as exc:
            self._release(raw, broken=True)
            mark_nothing_written(exc)
            raise
        conn = _PgConn(raw)
        try:
            yield conn
            self._commit(raw, conn)
        except psycopg.OperationalError:
            self._release(raw, broken=True)
            raise
        except BaseException:
            self._rollback(raw)
            raise
        self._release(raw)

    def write_statement(
        self, sql: str, params: Sequence[Any] = (), *, types: str = "", announce: bool = True
    ) -> list[Row]:
        """One write statement as its own transaction, and its wake-up.

        The statement runs in autocommit: on its own it is one transaction, committed
        before the call returns, with no ``BEGIN`` or ``COMMIT`` to send and its
        server-side prepared plan kept (psycopg prepares a statement it has run a few
        times). It returns rows exactly when it wrote (the contract of its callers: a
        claim, a move, a report), and only then is the board's channel notified with
        ``types``, after the commit and in its own tiny transaction (as ``_commit``
        explains): a claim that found no card wakes nobody. The wake-up is best effort
        once the write has committed (followers also poll): a failure to send
        it never turns a committed claim into an error. ``announce=False``: no wake-up
        (a write of the runtime's own records, with no event).
        """
        import psycopg

        from laneboard.store.base import event_of, named_types

        raw = self._acquire()
        try:
            got = _PgConn(raw).execute(sql, params)
        except BaseException as exc:
            self._give_back(raw, exc)
            raise
        if got and announce and self.announcer.now_or_later(types):
            try:
                _simple(raw, self._notify_sql(raw, types))
            except psycopg.Error:
                self._release(raw, broken=True)
                self._announce(event_of(got), named_types(types))
                return got
        self._release(raw)
        self._announce(event_of(got), named_types(types))
        return got

    def _send_notify(self, types: str) -> None:
        """One announcement on a pooled connection (the ``Announcer``'s queued writes)."""
        import psycopg

        raw = self._acquire()
        try:
            _simple(raw, self._notify_sql(raw, types))
        except psycopg.Error:
            self._release(raw, broken=True)
            raise
        self._release(raw)

    def connection_limit(self) -> int | None:
        """The server's ``max_connections`` (less the slots it keeps for superusers, when
        this role is not one), or the role's ``CONNECTION LIMIT`` when lower."""
        row = self.query(
            "SELECT current_setting('max_connections')::int AS most, "
            "current_setting('superuser_reserved_connections')::int AS kept, "
            "r.rolconnlimit AS own, r.rolsuper AS super FROM pg_roles r "
            "WHERE r.rolname = current_user"
        )[0]
        if row["super"]:
            return int(row["most"])
        allowed = int(row["most"]) - int(row["kept"])
        return min(allowed, int(row["own"])) if int(row["own"]) >= 0 else allowed

    def unavailable(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) or (
            super().unavailable(exc)
        )

    def close(self) -> None:
        self.announcer.close()  # what is still queued is announced before the connections go
        super().close()

    def _notify_sql(self, raw: Any, types: str) -> str:
        """The wake-up of a write whose events have ``types`` ('' when not known), on the
        quiet channel when they are all ``QUIET_TYPES``."""
        channel = self._channel_of(raw, quiet=quiet_payload(types))
        return f"SELECT pg_notify({quote_literal(channel)}, {quote_literal(types)})"

    def _rollback(self, raw: Any) -> None:
        try:
            if not (raw.closed or raw.broken):
                _simple(raw, "ROLLBACK")
        except Exception:
            self._release(raw, broken=True)
            return
        self._release(raw, broken=raw.closed or raw.broken)

    def _commit(self, raw: Any, conn: Conn) -> None:
        """``COMMIT`` in one round trip with the events still to write and the wake-up.

        The events go first, then ``COMMIT``, then the notification in its own tiny
        transaction: a NOTIFY inside the writing transaction would hold PostgreSQL's
        notification lock through the WAL flush and serialize every writer again.
        """
        parts = [self._events_sql(raw, conn.events)] if conn.events else []
        parts.append("COMMIT")
        types = _types_of(conn) if conn.notify else ""
        if conn.notify and self.announcer.now_or_later(types):
            parts.append(self._notify_sql(raw, types))
        cur = _simple(raw, "; ".join(parts))
        if conn.events:  # the first result holds the written events' positions
            from laneboard.domain.cursor import EventCursor

            written = [EventCursor(int(xid), int(eid)) for eid, xid in cur.fetchall()]
            conn.committed_last = max(written)

    @staticmethod
    def _events_sql(raw: Any, events: Sequence[tuple[Any, ...]]) -> str:
        from psycopg.adapt import Transformer

        from laneboard.store.q_events import EVENT_COLUMNS
        from laneboard.store.q_events import INSERT_EVENT as INSERT

        literal, encoding = Transformer(raw).as_literal, raw.info.encoding
        rows = ", ".join(
            "(" + ", ".join(literal(v).decode(encoding) for v in scrub_params(INSERT, values)) + ")"
            for values in events
        )
        return f"INSERT INTO events ({EVENT_COLUMNS}) VALUES {rows} RETURNING id, xid"

    def _channel_of(self, raw: Any, *, quiet: bool = False) -> str:
        if self._channel is None:
            self._name_channels(raw.execute("SELECT current_schema() AS s").fetchone()["s"])
        return self._quiet_channel if quiet else str(self._channel)

    @contextmanager
    def _autocommit(self) -> Iterator[Conn]:

        conn = _PgConn(self._acquire(), self._renew)  # each statement its own snapshot
        try:
            yield conn
        except BaseException as exc:
            self._give_back(conn.raw, exc)
            raise
        self._release(conn.raw)

    def _renew(self, raw: Any) -> Any:
        """A new connection for one the server ended (a restart, a failover, an
        administrator's ``pg_terminate_backend``): the idle ones went with it, most
        likely, so they are dropped too, and the next is connected afresh."""
        self._release(raw, broken=True)
        self._drop_idle()
        return self._acquire()

    def _give_back(self, raw: Any, exc: BaseException) -> None:
        """A connection back to the pool after a statement failed on it; dropped when the
        connection itself failed or is no longer usable."""
        import psycopg

        broken = isinstance(exc, psycopg.OperationalError) or raw.closed or raw.broken
        self._release(raw, broken=broken)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """``Store.query`` without a context manager: reads like a claim's probe are many."""

        conn = _PgConn(self._acquire(), self._renew)
        try:
            got = conn.execute(sql, params)
        except BaseException as exc:
            self._give_back(conn.raw, exc)
            raise
        self._release(conn.raw)
        return got

    def _migration_lock(self, conn: Conn) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(?)", (7_211_000,))

    def exists(self) -> bool:
        got = self.query("SELECT to_regclass('schema_migrations') IS NOT NULL AS found")
        return bool(got[0]["found"])

    def introspect(self) -> dict[str, Any]:
        raw = self._acquire()
        try:
            return self._introspect(raw)
        finally:
            self._release(raw)

    def _introspect(self, raw: Any) -> dict[str, Any]:
        fam = {"bigint": "int", "integer": "int", "text": "text", "double precision": "real"}
        tables: dict[str, Any] = {}
        for r in raw.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        ):
            name = r["table_name"]
            cols = {
                c["column_name"]: (fam[c["data_type"]], c["is_nullable"] == "YES")
                for c in raw.execute(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s",
                    (name,),
                )
            }
            pk = tuple(
                c["attname"]
                for c in raw.execute(
                    "SELECT a.attname FROM pg_index i "
                    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                    "WHERE i.indrelid = %s::regclass AND i.indisprimary "
                    "ORDER BY array_position(i.indkey, a.attnum)",
                    (name,),
                )
            )
            indexes = {}
            for ix in raw.execute(
                "SELECT c.relname AS iname, i.indisunique AS uniq, "
                "i.indpred IS NOT NULL AS part, "
                "array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(n, o) "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n "
                "ORDER BY k.o) AS cols "
                "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
                (name,),
            ):
                indexes[ix["iname"]] = (tuple(ix["cols"]), bool(ix["uniq"]), bool(ix["part"]))
            tables[name] = {"columns": cols, "primary_key": pk, "indexes": indexes}
        return tables

    def reset(self) -> None:
        raw = self._acquire()
        try:
            rows = raw.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
            for r in rows:
                raw.execute(f'DROP TABLE IF EXISTS "{r["tablename"]}" CASCADE')
        finally:
            self._release(raw)
