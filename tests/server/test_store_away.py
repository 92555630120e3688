"""``lb serve`` while its PostgreSQL server is out of reach: every request is answered
``503 STORE_UNAVAILABLE`` (tokenless, with a token, a write), nothing raises in the
application, and it serves again once the database is back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient
from tests.conftest import drop_pg_schema, make_pg_schema, pg_schema_url

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import human
from laneboard.server.app import create_app
from laneboard.store import Store, open_store

LOCAL = "http://127.0.0.1"


@pytest.fixture
def pg() -> Iterator[Store]:
    """A board on PostgreSQL only: a database server that goes away is PostgreSQL's (a
    SQLite board is a file the process opens itself)."""
    schema = make_pg_schema()
    store = open_store(pg_schema_url(schema), create=True)
    try:
        yield store
    finally:
        store.close()
        drop_pg_schema(schema)


def test_requests_while_the_database_is_away_are_refused_as_unavailable(pg: Store) -> None:
    board = Board(pg)
    board.add_project(human("alice"), "S")
    token, _ = Tokens(pg).create(human("alice"), "bob", kind="human")
    app = create_app(pg, local_user="alice", with_mcp=False)
    raw: Any = pg
    real = raw._connect

    real_acquire = raw._acquire

    def refused() -> Any:
        raise psycopg.OperationalError("connection refused (the test's outage)")

    def away() -> Any:
        # an outage ends the pooled connections too, including one a thread of the store
        # held while the test dropped the idle ones (the announcer sends a queued
        # wake-up of the setup's writes on a connection of its own, and gives it back)
        raw._drop_idle()
        return real_acquire()

    with TestClient(app, base_url=LOCAL, client=("127.0.0.1", 50000)) as c:
        assert c.get("/api/v1/cards").status_code == 200
        raw._connect, raw._acquire = refused, away
        try:
            for got in (
                c.get("/api/v1/cards"),
                c.get("/api/v1/cards", headers={"Authorization": f"Bearer {token}"}),
                c.post("/api/v1/cards", json={"project": "S", "title": "t"}),
            ):
                assert got.status_code == 503, got.text
                assert got.json()["code"] == "STORE_UNAVAILABLE"
        finally:
            raw._connect, raw._acquire = real, real_acquire
        assert (
            c.get("/api/v1/cards", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        )
