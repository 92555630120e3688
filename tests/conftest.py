"""Shared fixtures: stores on both backends, injectable clocks, temporary git repos."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import human
from laneboard.store import Store, open_store

PG_BASE = os.environ.get("LANEBOARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgres"]


def pg_schema_url(schema: str) -> str:
    sep = "&" if "?" in PG_BASE else "?"
    return f"{PG_BASE}{sep}options=-csearch_path%3D{schema}"


def make_pg_schema() -> str:
    import psycopg

    schema = "lbt_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return schema


def drop_pg_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for a fresh, empty board on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'board.db'}"
        return
    schema = make_pg_schema()
    try:
        yield pg_schema_url(schema)
    finally:
        drop_pg_schema(schema)


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    s = open_store(store_url, clock)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def postgres_store(clock: FakeClock) -> Iterator[Store]:
    """A fresh board on PostgreSQL alone (what only PostgreSQL does)."""
    schema = make_pg_schema()
    s = open_store(pg_schema_url(schema), clock)
    try:
        yield s
    finally:
        s.close()
        drop_pg_schema(schema)


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'board.db'}", clock)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def board(store: Store) -> Board:
    return Board(store)


@pytest.fixture
def me():  # type: ignore[no-untyped-def]
    return human("alice")


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit on ``main``."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "Test")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def sqlite_store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'board.db'}"
