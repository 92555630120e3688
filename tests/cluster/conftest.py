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
