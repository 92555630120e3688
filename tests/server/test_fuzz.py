"""A bounded schemathesis run against the OpenAPI document: no input makes a 5xx, and
every response matches the schema its operation publishes (success and error alike)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance
from starlette.testclient import TestClient

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import human
from laneboard.server.app import create_app
from laneboard.store import open_store

STATE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    db = Path(tmp_path_factory.mktemp("fuzz")) / "board.db"
    store = open_store(f"sqlite:///{db}")
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    for i in range(3):
        board.create_card(me, "WEB", f"card {i}")
    STATE["token"], _ = Tokens(store).create(me, "fuzzer", "human")
    app = create_app(store, local_user="alice", with_mcp=False)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)):
        yield schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
    store.close()


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: Any) -> None:
    headers = {"Authorization": f"Bearer {STATE['token']}"}
    if case.path == "/api/v1/events":
        headers["Accept"] = "application/json"
    case.call_and_validate(
        headers=headers, checks=[not_a_server_error, response_schema_conformance]
    )
