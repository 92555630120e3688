"""Copying a whole board between stores (``lb migrate``), and SQLite's online backup
(``lb backup``).

Every declared table is copied with its ids, in the order the migrations create them (so
a referenced row exists before the rows that reference it); a column that references its
own table (a card's parent) is filled in a second pass. The source is read in one
snapshot, the target written in one transaction, so a failed copy leaves the target
empty. On PostgreSQL each identity sequence is then set past the largest copied id.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from laneboard.store.base import Store
from laneboard.store.migrations import all_migrations, declared
from laneboard.store.schema import SCHEMA_MIGRATIONS, Table
from laneboard.store.tx import Tx

BATCH = 200
_CREATE = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)\s*\((.*)\)\s*$", re.S)
_REF = re.compile(r"(\w+) \{int\}[^,]*?REFERENCES (\w+)")
_PK = re.compile(r"(\w+) \{pk\}")


@dataclass(frozen=True)
class Shape:
    table: Table
    identity: str | None  # the auto-increment column
    self_refs: tuple[str, ...]  # columns that reference the same table


@cache
def shapes() -> tuple[Shape, ...]:
    """Every board table (not ``schema_migrations``), parents first."""
    identity: dict[str, str] = {}
    refs: dict[str, list[str]] = {}
    for m in all_migrations():
        for stmt in m.statements:
            found = _CREATE.search(stmt.strip()) if isinstance(stmt, str) else None
            if not found:
                continue
            name, body = found.group(1), found.group(2)
            pk = _PK.search(body)
            if pk:
                identity[name] = pk.group(1)
            refs[name] = [col for col, target in _REF.findall(body) if target == name]
    return tuple(
        Shape(t, identity.get(t.name), tuple(refs.get(t.name, ())))
        for t in declared().values()
        if t.name != SCHEMA_MIGRATIONS.name
    )


def columns(shape: Shape) -> list[str]:
    return [c.name for c in shape.table.columns]


def rows_of(tx: Tx, shape: Shape) -> list[dict[str, Any]]:
    cols = ", ".join(columns(shape))
    order = ", ".join(shape.table.primary_key)
    return tx.all(f"SELECT {cols} FROM {shape.table.name} ORDER BY {order}")


def counts(tx: Tx) -> dict[str, int]:
    return {
        s.table.name: int(tx.scalar(f"SELECT count(*) AS n FROM {s.table.name}") or 0)
        for s in shapes()
    }


def _insert(tx: Tx, shape: Shape, rows: list[dict[str, Any]]) -> None:
    cols = columns(shape)
    held = set(shape.self_refs)
    one = "(" + ", ".join("?" * len(cols)) + ")"
    for start in range(0, len(rows), BATCH):
        chunk = rows[start : start + BATCH]
        values = [_value(shape, c, r, held) for r in chunk for c in cols]
        tx.run(
            f"INSERT INTO {shape.table.name} ({', '.join(cols)}) VALUES "
            + ", ".join([one] * len(chunk)),
            values,
        )
    key = shape.table.primary_key
    for col in shape.self_refs:
        for r in rows:
            if r[col] is not None:
                where = " AND ".join(f"{k} = ?" for k in key)
                tx.run(
                    f"UPDATE {shape.table.name} SET {col} = ? WHERE {where}",
                    [r[col], *(r[k] for k in key)],
                )


def _value(shape: Shape, col: str, row: dict[str, Any], held: set[str]) -> Any:
    if col in held:
        return None
    if shape.table.name == "events" and col == "xid":
        # transaction ids mean nothing on another server: copied events become the
        # settled history before everything the target writes (see ``q_events``)
        return 0
    return row[col]


def _set_sequences(tx: Tx, names: Iterable[Shape]) -> None:
    for shape in names:
        if shape.identity is None:
            continue
        t, c = shape.table.name, shape.identity
        tx.run(
            f"SELECT setval(pg_get_serial_sequence('{t}', '{c}'), "
            f"COALESCE((SELECT max({c}) FROM {t}), 1), "
            f"(SELECT max({c}) FROM {t}) IS NOT NULL)"
        )


def copy_board(source: Store, target: Store) -> dict[str, int]:
    """Copy every table of ``source`` into the empty ``target``; returns rows per table."""
    copied: dict[str, int] = {}
    with source.read() as src, target.write() as dst:
        for shape in shapes():
            rows = rows_of(src, shape)
            _insert(dst, shape, rows)
            copied[shape.table.name] = len(rows)
        if target.dialect == "postgresql":
            _set_sequences(dst, shapes())
    return copied


def nonempty(store: Store) -> dict[str, int]:
    """The tables of ``store`` that hold rows."""
    with store.read() as tx:
        return {k: v for k, v in counts(tx).items() if v}


def live_supervisors(store: Store, fresh_ms: int) -> list[dict[str, Any]]:
    """Supervisors registered on the board whose heartbeat is younger than ``fresh_ms``."""
    with store.read() as tx:
        now = tx.now()
        rows = tx.all("SELECT * FROM supervisors WHERE state IN ('starting', 'running')")
    return [r for r in rows if now - int(r["heartbeat_at"]) <= fresh_ms]


def dump(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every row of every board table (for comparing two boards)."""
    with store.read() as tx:
        return {s.table.name: rows_of(tx, s) for s in shapes()}


# -- SQLite online backup ----------------------------------------------------------------------
def sqlite_backup(source_path: str, dest_path: str, *, pages: int = -1) -> int:
    """Copy a live SQLite board with the online backup API; returns the pages copied.

    Writers keep working while it runs: the copy reads one snapshot of the database
    (WAL readers do not block writers), so the result is consistent.
    """
    os.makedirs(os.path.dirname(os.path.abspath(dest_path)) or ".", exist_ok=True)
    tmp = dest_path + ".partial"
    if os.path.exists(tmp):
        os.remove(tmp)
    src = sqlite3.connect(source_path, timeout=30)
    dst = sqlite3.connect(tmp)
    try:
        src.backup(dst, pages=pages)  # -1: one step, one snapshot (WAL readers never block)
        total = int(dst.execute("PRAGMA page_count").fetchone()[0])
        dst.execute("PRAGMA journal_mode = DELETE")
        check = dst.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        dst.close()
        src.close()
    if check != "ok":
        os.remove(tmp)
        raise RuntimeError(f"the copy failed its integrity check: {check}")
    os.replace(tmp, dest_path)
    return total
