"""Versioned migrations, discovered from the ``vNNNN_name`` modules in this package.

Add a migration by adding a module; never edit one that has shipped. A statement is
portable SQL, or a mapping from dialect to SQL for a step only some backends take.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from laneboard.store.schema import SCHEMA_MIGRATIONS, Table


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str | Mapping[str, str], ...]
    tables: tuple[Table, ...]


@cache
def all_migrations() -> tuple[Migration, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("v"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        found.append(Migration(mod.VERSION, mod.NAME, tuple(mod.STATEMENTS), tuple(mod.TABLES)))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return tuple(found)


def for_dialect(m: Migration, dialect: str) -> list[str]:
    """The statements of ``m`` this backend runs, in order."""
    out = []
    for stmt in m.statements:
        sql = stmt if isinstance(stmt, str) else stmt.get(dialect)
        if sql is not None:
            out.append(sql)
    return out


def latest() -> int:
    return max(m.version for m in all_migrations())


@cache
def declared() -> Mapping[str, Table]:
    """The declared schema: every table the migrations declare, by name (read-only)."""
    tables = {SCHEMA_MIGRATIONS.name: SCHEMA_MIGRATIONS}
    for m in all_migrations():
        for t in m.tables:
            tables[t.name] = t
    return MappingProxyType(tables)
