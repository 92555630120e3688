"""The schema the migrations build equals the declared schema, on every backend.

Generic over ``laneboard.store.migrations.declared()``: a new migration module is
covered without touching this file.
"""

from __future__ import annotations

from typing import Any

from laneboard.domain.clock import FakeClock
from laneboard.store import Store, open_store
from laneboard.store.migrations import all_migrations, declared, latest
from laneboard.store.schema import Table


def expected_shape(table: Table, dialect: str) -> dict[str, Any]:
    return {
        "columns": {c.name: (c.family, c.nullable) for c in table.columns},
        "primary_key": tuple(table.primary_key),
        "indexes": {
            ix.name: (tuple(ix.columns), ix.unique, ix.where is not None)
            for ix in table.indexes
            if ix.built_on(dialect)
        },
    }


def test_built_schema_equals_declared(store: Store) -> None:
    built = store.introspect()
    want = declared()
    assert sorted(built) == sorted(want), "tables differ"
    for name, table in want.items():
        got = built[name]
        exp = expected_shape(table, store.dialect)
        assert got["columns"] == exp["columns"], f"columns of {name}"
        assert tuple(got["primary_key"]) == exp["primary_key"], f"primary key of {name}"
        assert {k: (tuple(v[0]), bool(v[1]), bool(v[2])) for k, v in got["indexes"].items()} == (
            exp["indexes"]
        ), f"indexes of {name}"


def test_declared_schema_is_well_formed() -> None:
    index_names: list[str] = []
    for name, table in declared().items():
        col_names = [c.name for c in table.columns]
        assert len(set(col_names)) == len(col_names), f"{name} repeats a column"
        assert table.primary_key and set(table.primary_key) <= set(col_names)
        for c in table.columns:
            assert c.family in ("int", "text", "real"), f"{name}.{c.name}"
        for ix in table.indexes:
            assert set(ix.columns) <= set(col_names), f"index {ix.name} of {name}"
            index_names.append(ix.name)
    assert len(set(index_names)) == len(index_names), "index names must be unique"
    versions = [m.version for m in all_migrations()]
    assert versions == sorted(set(versions))


def test_migrations_record_versions_and_rerun_as_noop(store_url: str) -> None:
    first = open_store(store_url, FakeClock())
    try:
        assert first.schema_version() == latest()
        assert first.migrate() == 0
        with first.read() as tx:
            got = [
                (r["version"], r["name"])
                for r in tx.all("SELECT version, name FROM schema_migrations ORDER BY version")
            ]
        assert got == [(m.version, m.name) for m in all_migrations()]
        shape = first.introspect()
    finally:
        first.close()
    second = open_store(store_url, FakeClock())  # opening an up-to-date board changes nothing
    try:
        assert second.schema_version() == latest()
        assert second.introspect() == shape
    finally:
        second.close()


def test_sqlite_indexes_no_constant_transaction_id(sqlite_store: Store) -> None:
    """On SQLite every event's ``xid`` is 0 and the cursor reads go by id alone, so an
    index led by ``xid`` would cost every write an entry and serve no read."""
    events = sqlite_store.introspect()["events"]["indexes"]
    assert [name for name, spec in events.items() if spec[0][0] == "xid"] == []
