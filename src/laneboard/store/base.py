"""The store interface: transactions over one database, shared by both backends.

A ``Store`` hands out transactions: ``write()`` takes the write lock at once
(SQLite ``BEGIN IMMEDIATE``), ``read()`` is a consistent snapshot. Repository
queries live on ``Tx`` (see ``tx.py``) and are written once in portable SQL;
backends differ only in connection handling, placeholders and locking.
"""

from __future__ import annotations

import abc
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, ClassVar

from laneboard.domain.clock import Clock, SystemClock
from laneboard.errors import LaneboardError
from laneboard.store.migrations import all_migrations, for_dialect
from laneboard.store.schema import MIGRATIONS_TABLE

if TYPE_CHECKING:
    from laneboard.domain.cursor import EventCursor
    from laneboard.store.tx import Tx

Row = dict[str, Any]


POOL_WAIT_S = 60.0  # a thread waits this long for a connection of a full budget


class IntegrityError(Exception):
    """A unique or foreign-key constraint refused a write (the transaction rolled back)."""


def unstorable(detail: str) -> LaneboardError:
    """A value the database cannot hold (NUL in PostgreSQL text, an integer beyond 64
    bits). The board refuses such input before the store; this is the last net."""
    return LaneboardError(
        "BAD_INPUT",
        f"the database cannot store a value of this request ({detail[:200]})",
        "remove NUL and control characters from text and keep numbers within 64 bits",
    )


def named_types(types: str) -> frozenset[str] | None:
    """The event types a one-statement write names (comma-separated; '': not known), as
    the typed commit hooks hear them: a quiet listener is not woken by a write of only
    types it ignores, in process as on the channel."""
    return frozenset(types.split(",")) if types else None


def event_of(got: Sequence[Row]) -> EventCursor | None:
    """The event a ``write_statement`` wrote, from its rows' ``event_xid`` and ``event_id``."""
    if not got or "event_id" not in got[0]:
        return None
    from laneboard.domain.cursor import EventCursor

    return EventCursor(int(got[0]["event_xid"]), int(got[0]["event_id"]))


class Conn(abc.ABC):
    """One open database connection inside a transaction.

    Before a write commits, the store sets ``events`` (event rows still to write, as
    ``q_events.EVENT_COLUMNS``; the commit writes them) and ``notify`` (the write
    appended events: announce it once committed). A backend that writes ``events`` at
    commit sets ``committed_last`` to the position of the last one.
    """

    events: Sequence[tuple[Any, ...]] = ()
    notify: bool = False
    flushed: bool = False  # some events were written before the commit (not in ``events``)
    committed_last: EventCursor | None = None

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    @abc.abstractmethod
    def rowcount(self) -> int: ...


NOTHING_WRITTEN = "laneboard_nothing_written"


def mark_nothing_written(exc: BaseException) -> None:
    """Say of ``exc`` that the database was out of reach before anything of the call was
    sent to it (no connection, or the transaction's ``BEGIN`` failed): the call may be made
    again, as a whole, without writing anything twice."""
    with suppress(Exception):
        setattr(exc, NOTHING_WRITTEN, True)


def nothing_written(exc: BaseException) -> bool:
    """Whether ``mark_nothing_written`` was said of ``exc``."""
    return bool(getattr(exc, NOTHING_WRITTEN, False))


class Store(abc.ABC):
    """One board database. Safe to share between threads (a connection per thread)."""

    dialect: str = ""
    types: ClassVar[dict[str, str]] = {}

    def __init__(self, url: str, clock: Clock | None = None) -> None:
        self.url = url
        self.clock: Clock = clock or SystemClock()
        self._plock = threading.Lock()
        self._room = threading.Condition(self._plock)  # a connection given back or dropped
        self._free: list[Any] = []
        self._all: list[Any] = []
        self._holders: dict[int, int] = {}  # id() of a connection in use -> its thread
        self._opening = 0  # connections being opened now (counted in the budget)
        self._pid = os.getpid()
        # at most this many connections open at once (None: no bound); a thread that needs
        # one more waits up to ``pool_wait_s`` for one to be given back
        self.max_connections: int | None = None
        self.pool_wait_s = POOL_WAIT_S
        self.pool_waiting = 0  # threads waiting for a connection now
        self._commit_hooks: list[Callable[[EventCursor], None]] = []
        # hooks that also hear the write's event types (None: not known)
        self._typed_hooks: list[Callable[[EventCursor, frozenset[str] | None], None]] = []

    # -- backend hooks -------------------------------------------------------------
    @abc.abstractmethod
    def _connect(self) -> Any:
        """Open a new raw connection."""

    def _close_raw(self, raw: Any) -> None:
        raw.close()

    def _acquire(self) -> Any:
        """A connection for one transaction (pooled; one thread uses it at a time). With
        a budget (``max_connections``) a thread that holds none waits for one to be given
        back once the budget is open; one that holds one already (a read inside a write)
        gets another at once, so nesting never waits on itself."""
        me = threading.get_ident()
        with self._room:
            if self._pid != os.getpid():  # forked: never share a parent's connections
                self._free, self._all, self._pid = [], [], os.getpid()
                self._holders, self._opening, self.pool_waiting = {}, 0, 0
            self._wait_for_room(me)
            if self._free:
                raw = self._free.pop()
                self._holders[id(raw)] = me
                return raw
            self._opening += 1
        try:
            raw = self._connect()
        except BaseException as exc:
            with self._room:
                self._opening -= 1
                self._room.notify()
            mark_nothing_written(exc)
            raise
        with self._room:
            self._opening -= 1
            self._all.append(raw)
            self._holders[id(raw)] = me
        return raw

    def _wait_for_room(self, me: int) -> None:
        """Return once a pooled connection is free or another may be opened (the caller
        holds ``_room``); ``STORE_UNAVAILABLE`` when none was for ``pool_wait_s``."""
        cap = self.max_connections
        if cap is None or self._free or me in self._holders.values():
            return
        deadline = time.monotonic() + self.pool_wait_s
        while not self._free and len(self._all) + self._opening >= cap:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LaneboardError(
                    "STORE_UNAVAILABLE",
                    f"all {cap} database connections of this process stayed in use for "
                    f"{self.pool_wait_s:g}s",
                    "set LANEBOARD_DB_CONNECTIONS higher (the database server must allow "
                    "that many for each process on every machine), or find what holds them",
                    nothing_written=True,
                )
            self.pool_waiting += 1
            try:
                self._room.wait(left)
            finally:
                self.pool_waiting -= 1

    def _drop_idle(self) -> None:
        """Close every pooled connection not in use now."""
        with self._room:
            idle, self._free = self._free, []
            for raw in idle:
                self._all.remove(raw)
            self._room.notify_all()
        for raw in idle:
            with suppress(Exception):
                self._close_raw(raw)

    def _release(self, raw: Any, *, broken: bool = False) -> None:
        with self._room:
            self._holders.pop(id(raw), None)
            over = self.max_connections is not None and len(self._all) > self.max_connections
            if broken or over or raw not in self._all:  # over: a nested one, not kept
                if raw in self._all:
                    self._all.remove(raw)
                drop = True
            else:
                self._free.append(raw)
                drop = False
            self._room.notify()
        if drop:
            with suppress(Exception):
                self._close_raw(raw)

    @abc.abstractmethod
    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Conn]: ...

    @abc.abstractmethod
    def introspect(self) -> dict[str, Any]:
        """Tables, columns (family, nullable), primary keys and indexes as built."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Drop every table (tests only)."""

    def pg_lock_key(self, name: str) -> int:
        import zlib

        return zlib.crc32(name.encode())

    # -- public --------------------------------------------------------------------
    def expand(self, sql: str) -> str:
        return sql.format(**self.types)

    def _migration_lock(self, conn: Conn) -> None:
        """Serialize concurrent migrators (PostgreSQL; SQLite's write lock already does)."""
        return None

    @contextmanager
    def write(self) -> Iterator[Tx]:
        from laneboard.store.tx import Tx

        with self._transaction(True) as conn:
            tx = Tx(self, conn)
            yield tx
            conn.events = tx.take_pending_events()
            conn.flushed = tx._last_event is not None
            conn.notify = bool(conn.events) or conn.flushed
        types = None if conn.flushed else frozenset(str(v[1]) for v in conn.events)
        self._announce(conn.committed_last or tx._last_event, types)

    def _announce(self, last: EventCursor | None, types: frozenset[str] | None = None) -> None:
        """Run the commit hooks for a write whose last event is at ``last`` (None: no event);
        ``types``: its events' types, for the typed hooks (None: not known)."""
        if last is not None:
            for hook in list(self._commit_hooks):
                hook(last)
            for typed in list(self._typed_hooks):
                typed(last, types)

    def write_statement(
        self, sql: str, params: Sequence[Any] = (), *, types: str = "", announce: bool = True
    ) -> list[Row]:
        """One write statement as its own transaction; returns its rows.

        A statement that writes an event returns it as the ``event_xid`` and ``event_id``
        columns of its rows: the commit announces it as ``write()`` does (``types``: the
        written events' types, comma-separated, for the announcement; '' when unknown).
        ``announce=False``: a write of the runtime's own records, with no event, that
        wakes nobody even when it returns rows.
        """
        with self._transaction(True) as conn:
            got = conn.execute(sql, params)
            conn.notify = bool(got) and announce
        self._announce(event_of(got), named_types(types))
        return got

    def add_commit_hook(self, hook: Callable[[EventCursor], None]) -> None:
        """Call ``hook`` (in the writing thread) after each write that appended events."""
        with self._plock:
            self._commit_hooks.append(hook)

    def remove_commit_hook(self, hook: Callable[[EventCursor], None]) -> None:
        with self._plock:
            if hook in self._commit_hooks:
                self._commit_hooks.remove(hook)

    def add_typed_commit_hook(
        self, hook: Callable[[EventCursor, frozenset[str] | None], None]
    ) -> None:
        """``add_commit_hook``, for a hook that is also told the write's event types
        (None when some were written before the commit, as every write on SQLite does)."""
        with self._plock:
            self._typed_hooks.append(hook)

    def remove_typed_commit_hook(
        self, hook: Callable[[EventCursor, frozenset[str] | None], None]
    ) -> None:
        with self._plock:
            if hook in self._typed_hooks:
                self._typed_hooks.remove(hook)

    @contextmanager
    def read(self) -> Iterator[Tx]:
        from laneboard.store.tx import Tx

        with self._transaction(False) as conn:
            tx = Tx(self, conn)
            yield tx
            if tx.take_pending_events():
                raise RuntimeError("events are appended in write transactions only")

    @abc.abstractmethod
    @contextmanager
    def _autocommit(self) -> Iterator[Conn]: ...

    @contextmanager
    def autocommit(self) -> Iterator[Tx]:
        """Reads whose statements each run on their own snapshot (no BEGIN/COMMIT).

        Cheaper than ``read()`` where every query stands alone (a cursor read, a
        lookup); never for writes or for reads that must agree with each other.
        """
        from laneboard.store.tx import Tx

        with self._autocommit() as conn:
            tx = Tx(self, conn)
            yield tx
            if tx.take_pending_events():
                raise RuntimeError("events are appended in write transactions only")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """One read statement on its own snapshot, outside any explicit transaction."""
        with self._autocommit() as conn:
            return conn.execute(sql, params)

    def connection_limit(self) -> int | None:
        """How many connections the database server lets this board's role hold at once
        (None: no server, as for a file)."""
        return None

    def unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the database is out of reach (down, restarting, the
        connection lost): a resident process waits and tries again instead of ending."""
        from laneboard.errors import LaneboardError

        return isinstance(exc, LaneboardError) and exc.code == "STORE_UNAVAILABLE"

    def close(self) -> None:
        """Close every connection this store opened."""
        with self._room:
            conns, self._all, self._free = self._all, [], []
            self._holders = {}
            self._room.notify_all()
        for raw in conns:
            with suppress(Exception):
                self._close_raw(raw)

    def migrate(self) -> int:
        """Apply pending migrations; returns the number applied."""
        with self._transaction(True) as conn:
            self._migration_lock(conn)
            conn.execute(self.expand(MIGRATIONS_TABLE))
            done = {
                int(r["version"]) for r in conn.execute("SELECT version FROM schema_migrations")
            }
            applied = 0
            for m in all_migrations():
                if m.version in done:
                    continue
                for stmt in for_dialect(m, self.dialect):
                    conn.execute(self.expand(stmt))
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (m.version, m.name, self.clock.now_ms()),
                )
                applied += 1
            return applied

    @abc.abstractmethod
    def exists(self) -> bool:
        """Whether a board was made here (its migrations table exists); creates nothing."""

    def schema_version(self) -> int:
        with self._transaction(False) as conn:
            rows = conn.execute("SELECT max(version) AS v FROM schema_migrations")
        return int(rows[0]["v"] or 0)

    def applied_versions(self) -> set[int]:
        """The versions of the migrations this board has applied."""
        with self._transaction(False) as conn:
            rows = conn.execute("SELECT version FROM schema_migrations")
        return {int(r["version"]) for r in rows}

    def require_known_schema(self) -> None:
        """Refuse (``BOARD_NEWER``) a board a newer laneboard migrated: a migration is
        applied that this code does not know. A resident process (``lb start``,
        ``lb serve``) checks it before it runs: its passes and rows may mean something
        else on that board."""
        from laneboard.errors import LaneboardError

        known = {m.version for m in all_migrations()}
        unknown = sorted(self.applied_versions() - known)
        if unknown:
            raise LaneboardError(
                "BOARD_NEWER",
                f"a newer laneboard migrated this board (migration {unknown[-1]}; this one "
                f"knows up to {max(known)})",
                "upgrade laneboard on this machine as on the one that migrated it: "
                "pip install -U laneboard",
            )

    def ensure_schema(self) -> None:
        """Apply the migrations this board lacks: one numbered below the newest applied
        (added later in a gap of the numbering) counts as well as a newer one."""
        try:
            applied = self.applied_versions()
        except Exception:
            applied = set()
        if any(m.version not in applied for m in all_migrations()):
            self.migrate()
