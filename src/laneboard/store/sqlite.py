"""SQLite backend: WAL, ``BEGIN IMMEDIATE`` for writes, a busy timeout."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, ClassVar

from laneboard.domain.clock import Clock
from laneboard.errors import LaneboardError
from laneboard.secrets import scrub_params
from laneboard.store.base import (
    Conn,
    IntegrityError,
    Row,
    Store,
    event_of,
    mark_nothing_written,
    unstorable,
)

CLAIMED = frozenset({"card.claimed"})  # what a claim statement's trigger writes

BUSY_TIMEOUT_MS = 30_000  # LANEBOARD_BUSY_TIMEOUT (seconds) overrides it


def busy_timeout_ms() -> int:
    """How long a write waits for another process's lock before ``LOCK_HELD``."""
    raw = os.environ.get("LANEBOARD_BUSY_TIMEOUT", "").strip()
    if not raw:
        return BUSY_TIMEOUT_MS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"LANEBOARD_BUSY_TIMEOUT={raw[:40]!r} is not a number of seconds",
            "use 0 to 3600, e.g. LANEBOARD_BUSY_TIMEOUT=30",
        )
    return int(seconds * 1000)


def locked(path: str, timeout_ms: int, exc: sqlite3.OperationalError) -> LaneboardError | None:
    """``LOCK_HELD`` for SQLite's "database is locked"/"busy"; None for other errors."""
    text = str(exc).lower()
    if "locked" not in text and "busy" not in text:
        return None
    return LaneboardError(
        "LOCK_HELD",
        f"the board {path} is locked by another process "
        f"(waited {timeout_ms / 1000:g} s for its write to end)",
        f"retry once it finishes; see who holds it with: fuser {path} "
        "(often an open sqlite3 shell or a stopped lb)",
    )


class _SqliteConn(Conn):
    def __init__(self, raw: sqlite3.Connection, path: str, timeout_ms: int) -> None:
        self.raw = raw
        self.path = path
        self.timeout_ms = timeout_ms
        self._rowcount = 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        try:
            cur = self.raw.execute(sql, scrub_params(sql, params))
        except sqlite3.IntegrityError as exc:
            raise IntegrityError(str(exc)) from exc
        except (OverflowError, UnicodeEncodeError) as exc:  # the board checks input first
            raise unstorable(str(exc)) from exc
        except sqlite3.OperationalError as exc:
            held = locked(self.path, self.timeout_ms, exc)
            if held is None:
                raise
            raise held from exc
        rows = cur.fetchall()
        self._rowcount = cur.rowcount
        if not rows:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in rows]

    def rowcount(self) -> int:
        return self._rowcount


class _Raw(sqlite3.Connection):
    """A connection that can write a claim's event from inside the claim's statement.

    ``armed`` holds the event of the next claim (``ArmedClaim``) while one runs; the
    temporary trigger ``CLAIM_EVENT_TRIGGER`` reads it through ``lb_armed(i)`` and reports
    the event's id through ``lb_fired(id)``.
    """

    armed: tuple[Any, ...] | None = None
    fired: int | None = None

    def armed_value(self, index: int) -> Any:
        return None if self.armed is None else self.armed[index]

    def fire(self, event_id: int) -> int:
        self.fired = int(event_id)
        return 0


# The claim's event, written by the claim's own statement (one autocommit statement:
# SQLite's write lock is held for it alone). Fires only while the connection is armed.
# The payload is lb_armed(3) whole, or lb_armed(3) || epoch || lb_armed(4) || ref (JSON)
# || lb_armed(5) when the claimed card is not known before (``claim --next``).
CLAIM_EVENT_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS lb_claim_event AFTER UPDATE OF claim_epoch ON "
    "main.cards WHEN lb_armed(0) IS NOT NULL BEGIN "
    "INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, payload) "
    "VALUES (lb_armed(0), 'card.claimed', NEW.id, NEW.project_id, NEW.run_id, lb_armed(1), "
    "lb_armed(2), CASE WHEN lb_armed(4) IS NULL THEN lb_armed(3) ELSE lb_armed(3) || "
    "NEW.claim_epoch || lb_armed(4) || json_quote(NEW.ref) || lb_armed(5) END); "
    "SELECT lb_fired(last_insert_rowid()); END"
)


class SQLiteStore(Store):
    dialect = "sqlite"
    types: ClassVar[dict[str, str]] = {
        "pk": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "int": "INTEGER",
        "text": "TEXT",
        "real": "REAL",
    }

    def __init__(self, path: str, clock: Clock | None = None) -> None:
        super().__init__(f"sqlite:///{path}", clock)
        self.path = path
        self.timeout_ms = busy_timeout_ms()

    def exists(self) -> bool:
        if not os.path.isfile(self.path):
            return False
        got = self.query(
            "SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' "
            "AND name = 'schema_migrations'"
        )
        return bool(got[0]["n"])

    def _connect(self) -> sqlite3.Connection:
        try:
            return self._open()
        except sqlite3.OperationalError as exc:
            held = locked(self.path, self.timeout_ms, exc)
            if held is None:
                raise
            raise held from exc

    def _open(self) -> sqlite3.Connection:
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        conn = sqlite3.connect(
            self.path,
            timeout=self.timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
            factory=_Raw,
        )
        conn.create_function("lb_armed", 1, conn.armed_value)
        conn.create_function("lb_fired", 1, conn.fire)
        conn.execute(f"PRAGMA busy_timeout = {self.timeout_ms}")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def claim_statement(self, sql: str, params: Sequence[Any], armed: tuple[Any, ...]) -> list[Row]:
        """One claim statement in autocommit, its ``card.claimed`` event written by the
        statement itself (``CLAIM_EVENT_TRIGGER``): the write lock is held for this one
        statement, as for a bare ``UPDATE``. ``armed`` is the event's ``at, actor,
        actor_kind`` and its payload (``lb_armed`` 3-5). Returns the claimed row with its
        ``event_id`` and ``event_xid``, or nothing; announces the event as a write does.
        """
        raw = self._acquire()
        conn = self._wrap(raw)
        try:
            raw.execute(CLAIM_EVENT_TRIGGER)  # a no-op once made (a table rebuild drops it)
            raw.armed, raw.fired = armed, None
            try:
                got = conn.execute(sql, params)
            finally:
                raw.armed = None
        except BaseException:
            self._release(raw, broken=raw.in_transaction)
            raise
        self._release(raw)
        if got:
            if raw.fired is None:  # never expected: the trigger is made before each claim
                raise RuntimeError("the claim's event was not written")
            got[0]["event_id"], got[0]["event_xid"] = raw.fired, 0
            self._announce(event_of(got), CLAIMED)
        return got

    def _wrap(self, raw: sqlite3.Connection) -> _SqliteConn:
        return _SqliteConn(raw, self.path, self.timeout_ms)

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Conn]:
        raw = self._acquire()
        try:
            self._wrap(raw).execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except BaseException as exc:
            self._release(raw, broken=True)
            mark_nothing_written(exc)
            raise
        try:
            yield self._wrap(raw)
        except BaseException:
            try:
                raw.execute("ROLLBACK")
            except sqlite3.Error:
                self._release(raw, broken=True)
                raise
            self._release(raw)
            raise
        try:
            self._wrap(raw).execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                raw.execute("ROLLBACK")
            self._release(raw)
            raise
        self._release(raw)

    @contextmanager
    def _autocommit(self) -> Iterator[Conn]:
        raw = self._acquire()  # no BEGIN: each statement is its own snapshot
        try:
            yield self._wrap(raw)
        except BaseException:
            self._release(raw, broken=raw.in_transaction)
            raise
        self._release(raw)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """``Store.query`` without a context manager: reads like a claim's probe are many."""
        raw = self._acquire()
        try:
            got = self._wrap(raw).execute(sql, params)
        except BaseException:
            self._release(raw, broken=raw.in_transaction)
            raise
        self._release(raw)
        return got

    def introspect(self) -> dict[str, Any]:
        raw = self._acquire()
        try:
            return self._introspect(raw)
        finally:
            self._release(raw)

    def _introspect(self, raw: sqlite3.Connection) -> dict[str, Any]:
        tables: dict[str, Any] = {}
        names = [
            r[0]
            for r in raw.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for name in names:
            cols = {}
            pk: list[tuple[int, str]] = []
            for _cid, col, typ, notnull, _dflt, pkpos in raw.execute(f"PRAGMA table_info({name})"):
                family = {"INTEGER": "int", "TEXT": "text", "REAL": "real"}[typ.upper()]
                # an INTEGER PRIMARY KEY is never NULL even without an explicit NOT NULL
                cols[col] = (family, not (notnull or pkpos))
                if pkpos:
                    pk.append((pkpos, col))
            indexes = {}
            for _seq, iname, unique, origin, partial in raw.execute(f"PRAGMA index_list({name})"):
                if origin != "c":
                    continue
                icols = tuple(r[2] for r in raw.execute(f"PRAGMA index_info({iname})"))
                indexes[iname] = (icols, bool(unique), bool(partial))
            tables[name] = {
                "columns": cols,
                "primary_key": tuple(c for _, c in sorted(pk)),
                "indexes": indexes,
            }
        return tables

    def reset(self) -> None:
        self.close()
        for suffix in ("", "-wal", "-shm"):
            with suppress(FileNotFoundError):
                os.remove(self.path + suffix)
