"""The dashboard's supervisor panel lists schedules, overdue ones marked."""

from __future__ import annotations

from pathlib import Path

import pytest
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


def test_supervisor_panel_shows_the_doctor_report(
    client: TestClient, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The panel reads this machine's configuration, as ``lb doctor`` and the API do: here
    every role runs on the scripted kind, so only the board can need attention."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LANEBOARD_DEFAULT_AGENT", "scripted")
    board = Board(store)
    board.add_project(human(), "WEB")
    page = client.get("/")
    assert 'id="doctor"' in page.text and "nothing needs attention" in page.text
    card = board.create_card(human(), "WEB", "stuck on a decision")
    board.claim(human(), card.ref, holder="worker")
    board.move(human(), card.ref, "awaiting", reason="E2", question="which vendor?")
    page = client.get("/")
    assert "needs attention:" in page.text
    doctor = client.get("/api/v1/doctor").json()
    assert doctor["attention"] is True and doctor["reasons"]
    for reason in doctor["reasons"]:
        assert f"<li>{reason}</li>" in page.text
