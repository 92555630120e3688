"""Fixtures for driving the real agent CLIs against the scripted model server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_kit import KINDS, BoardSetup, Kind, rerun_codex_once
from model_server import ModelServer

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.clock import SystemClock
from laneboard.domain.model import agent, human
from laneboard.store import open_store
from laneboard.supervisor import board_socket


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rerun_codex_once(items)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, tmp_path: Path, server: ModelServer) -> Kind:
    home = tmp_path / "home"
    home.mkdir()
    return Kind(str(request.param), home, server)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    srv = ModelServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def claimed_card(tmp_path: Path, repo: Path) -> Iterator[BoardSetup]:
    """A SQLite board with project WEB, card WEB-1 claimed by ``worker``, and its token."""
    db = tmp_path / "board" / "board.db"
    db.parent.mkdir()
    url = f"sqlite:///{db}"
    store = open_store(url, SystemClock())
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB", path=str(repo))
    card = board.create_card(
        me, "WEB", "Add a feature file", acceptance=["feature.txt exists"], acceptance_mode="off"
    )
    claimed = board.claim(agent("worker"), card.ref)
    token, _ = Tokens(store).create(me, "worker", card_id=card.id, epoch=claimed.claim_epoch)
    sock = board_socket.serve(board, str(tmp_path / "state"))  # the agents' lb calls go here
    try:
        yield BoardSetup(sock.url, card.ref, token, board)
    finally:
        board_socket.stop(board)
        store.close()
