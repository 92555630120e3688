"""Fixtures of the cluster tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.conftest import drop_pg_schema, make_pg_schema, pg_schema_url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema's URL (the cluster is PostgreSQL's), dropped after."""
    schema = make_pg_schema()
    try:
        yield pg_schema_url(schema)
    finally:
        drop_pg_schema(schema)


@pytest.fixture
def named_pg_url() -> Iterator[str]:
    """``pg_url`` whose connections carry the schema as their ``application_name``: the
    server's sessions of the board's processes can be counted or ended."""
    schema = make_pg_schema()
    try:
        yield pg_schema_url(schema) + "&application_name=" + schema
    finally:
        drop_pg_schema(schema)
