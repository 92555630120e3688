"""SQLite backend: WAL, ``BEGIN IMMEDIATE`` for writes, a busy timeout."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, ClassVar

from laneboard.domain.clock import Clock
from laneboard.store.base import Conn, IntegrityError, Row, Store

BUSY_TIMEOUT_MS = 30_000


class _SqliteConn(Conn):
    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw
        self._rowcount = 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        try:
            cur = self.raw.execute(sql, tuple(params))
        except sqlite3.IntegrityError as exc:
            raise IntegrityError(str(exc)) from exc
        rows = cur.fetchall()
        self._rowcount = cur.rowcount
        if not rows:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in rows]

    def rowcount(self) -> int:
        return self._rowcount


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

    def _connect(self) -> sqlite3.Connection:
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        conn = sqlite3.connect(
            self.path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Conn]:
        raw = self._acquire()
        try:
            raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except BaseException:
            self._release(raw, broken=True)
            raise
        try:
            yield _SqliteConn(raw)
        except BaseException:
            try:
                raw.execute("ROLLBACK")
            except sqlite3.Error:
                self._release(raw, broken=True)
                raise
            self._release(raw)
            raise
        try:
            raw.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                raw.execute("ROLLBACK")
            self._release(raw)
            raise
        self._release(raw)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        raw = self._acquire()  # autocommit: one statement is its own snapshot
        try:
            got = _SqliteConn(raw).execute(sql, params)
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
            for _seq, iname, unique, origin, _partial in raw.execute(f"PRAGMA index_list({name})"):
                if origin != "c":
                    continue
                icols = tuple(r[2] for r in raw.execute(f"PRAGMA index_info({iname})"))
                indexes[iname] = (icols, bool(unique))
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
