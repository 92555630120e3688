"""Fixtures of the cluster tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from tests.conftest import PG_BASE, drop_pg_schema, make_pg_schema, pg_schema_url


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


@contextmanager
def board_role(named_pg_url: str, prefix: str, options: str = "") -> Iterator[tuple[str, str]]:
    """(the board's URL as a role of its own, with ``options``, owning the board's schema;
    that role), dropped after with the schema."""
    role = prefix + uuid.uuid4().hex[:10]
    schema = named_pg_url.split("search_path%3D", 1)[1].split("&", 1)[0]
    with psycopg.connect(PG_BASE, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN {options}")
        admin.execute(f"ALTER SCHEMA {schema} OWNER TO {role}")
    try:
        yield named_pg_url.replace("postgres@", f"{role}@", 1), role
    finally:
        with psycopg.connect(PG_BASE, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin.execute(f"DROP ROLE IF EXISTS {role}")
