"""The dashboard's supervisor panel lists schedules, overdue ones marked."""

from __future__ import annotations

from starlette.testclient import TestClient

from laneboard.board.schedules import Schedules
from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store


def test_supervisor_panel_shows_schedules(client: TestClient, store: Store) -> None:
    Board(store).add_project(human(), "WEB")
    Schedules(store).add(
        human(), "nightly", "0 2 * * *", {"project": "WEB", "title": "nightly bump"}
    )
    page = client.get("/")
    assert page.status_code == 200
    assert 'id="schedules"' in page.text
    assert "1 of 1 enabled" in page.text and "nightly" in page.text
