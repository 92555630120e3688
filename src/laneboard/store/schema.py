"""The declared schema and the versioned migrations that build it.

Each migration is a module ``laneboard.store.migrations.vNNNN_name`` with ``VERSION``,
``NAME``, ``STATEMENTS`` and the ``TABLES`` it declares (the declared schema).
Statements are written once with type tokens that each backend expands:
``{pk}`` an auto-increment primary key, ``{int}`` a 64-bit integer, ``{text}``,
``{real}``. An index may be built on some backends only (``Index.dialects``). A test
builds the schema from the migrations on each backend and compares it with what is
declared for that backend.
"""

from __future__ import annotations

from dataclasses import dataclass

# column type families used by the declared schema
INT, TEXT, REAL = "int", "text", "real"


@dataclass(frozen=True)
class Column:
    name: str
    family: str
    nullable: bool = True


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool = False
    where: str | None = None  # a partial index: only the rows this condition holds for
    dialects: tuple[str, ...] = ()  # the backends that build it; () means every one

    def built_on(self, dialect: str) -> bool:
        return not self.dialects or dialect in self.dialects


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    indexes: tuple[Index, ...] = ()


def cols(spec: str) -> tuple[Column, ...]:
    """Parse 'name:family[!]' items separated by spaces (! = NOT NULL)."""
    out = []
    for item in spec.split():
        name, fam = item.split(":")
        out.append(Column(name, fam.rstrip("!"), nullable=not fam.endswith("!")))
    return tuple(out)


MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version {int} NOT NULL PRIMARY KEY, name {text} NOT NULL, applied_at {int} NOT NULL)"""

SCHEMA_MIGRATIONS = Table(
    "schema_migrations", cols("version:int! name:text! applied_at:int!"), ("version",)
)
