"""Finding things: text search over titles, descriptions and comments (every surface, both
backends), and the board sorted by priority, age or time in status."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from starlette.testclient import TestClient

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import human
from laneboard.errors import LaneboardError
from laneboard.store import Store

ME = human("alice")


def seeded(board: Board) -> None:
    board.add_project(ME, "WEB")
    board.create_card(ME, "WEB", "Login page", description="the form")
    board.create_card(ME, "WEB", "Billing", description="Invoices need a LOGIN link")
    c = board.create_card(ME, "WEB", "Footer")
    board.comment(ME, c.ref, "the login flow breaks here")
    board.create_card(ME, "WEB", "100% width_banner")


def refs(cards: list) -> list[str]:  # type: ignore[type-arg]
    return [c.ref for c in cards]


def test_search_matches_title_description_and_comments(board: Board) -> None:
    seeded(board)
    assert refs(board.list_cards(text="login")) == ["WEB-1", "WEB-2", "WEB-3"]
    assert refs(board.list_cards(text="LOGIN PAGE")) == ["WEB-1"]
    assert refs(board.list_cards(text="100%")) == ["WEB-4"]  # % and _ are literal
    assert refs(board.list_cards(text="0%")) == ["WEB-4"]
    assert refs(board.list_cards(text="h_b")) == ["WEB-4"]
    assert refs(board.list_cards(text="h%b")) == []
    assert refs(board.list_cards(text="nothing like it")) == []
    assert refs(board.list_cards(text="login", statuses=["done"])) == []
    with pytest.raises(LaneboardError) as err:
        board.list_cards(text="x\x00")
    assert err.value.code == "BAD_INPUT"


def test_search_on_rest_and_cli(client: TestClient, store: Store) -> None:
    seeded(Board(store))
    got = client.get("/api/v1/cards", params={"search": "login"}).json()
    assert [c["ref"] for c in got] == ["WEB-1", "WEB-2", "WEB-3"]
    out = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "--db", store.url, "card", "list",
         "--search", "footer"],
        capture_output=True, text=True, check=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")},
             "LANEBOARD_USER": "alice"},
    )  # fmt: skip
    assert "WEB-3" in out.stdout and "WEB-1" not in out.stdout


def column(page: str, status: str) -> list[str]:
    chunk = page.split(f'<div class="column" data-status="{status}">', 1)[1]
    chunk = chunk.split('<div class="column"', 1)[0]
    return re.findall(r'<article class="card[^"]*" data-ref="([^"]+)"', chunk)


def test_board_page_searches_and_sorts(client: TestClient, store: Store) -> None:
    clock = store.clock
    assert isinstance(clock, FakeClock)
    board = Board(store)
    board.add_project(ME, "WEB")
    for title, prio in (("old low", 3), ("urgent", 0), ("middle", 2)):
        board.create_card(ME, "WEB", title, priority=prio, status="backlog")
        clock.advance(minutes=5)
    for ref in ("WEB-3", "WEB-1"):  # moved to todo in this order
        board.move(ME, ref, "todo")
        clock.advance(minutes=5)
    board.move(ME, "WEB-2", "todo")

    page = client.get("/").text
    assert column(page, "todo") == ["WEB-1", "WEB-2", "WEB-3"]  # board order: oldest card first
    page = client.get("/?sort=priority").text
    assert column(page, "todo") == ["WEB-2", "WEB-3", "WEB-1"]
    page = client.get("/?sort=status_time").text
    assert column(page, "todo") == ["WEB-3", "WEB-1", "WEB-2"]  # longest in todo first
    page = client.get("/?sort=age&q=old").text
    assert column(page, "todo") == ["WEB-1"]
    assert re.search(r'name="q"[^>]*value="old"', page) and '<option value="age" selected>' in page
    assert 'data-partial="/ui/board?q=old&amp;sort=age"' in page  # live refresh keeps them

    bad = client.get("/?sort=random")
    assert bad.status_code == 422 and bad.json()["code"] == "BAD_INPUT"
    assert "priority, age or status_time" in bad.json()["fix"]
