"""The dashboard in headless Chromium (Debian's chromium driven by Playwright) against a
real ``lb serve``: create a card, live column moves, answering a question, approving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright
from tests.server.conftest import WAIT_MS, Live

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.store import open_store

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    ctx = browser.new_context(viewport={"width": 1500, "height": 900})
    p = ctx.new_page()
    p.set_default_timeout(WAIT_MS)
    try:
        yield p
    finally:
        ctx.close()


def board_of(live: Live) -> tuple[Board, object]:
    store = open_store(live.db)
    return Board(store), store


def seed(live: Live) -> Board:
    board, _ = board_of(live)
    board.add_project(human("alice"), "WEB")
    return board


def column(page: Page, status: str, ref: str) -> object:
    return page.locator(f'.column[data-status="{status}"] article[data-ref="{ref}"]')


def test_create_a_card_from_the_page(live: Live, page: Page, tmp_path: Path) -> None:
    seed(live)
    page.goto(live.url + "/")
    page.click("#create-card summary")
    page.fill('#create-card input[name="title"]', "Made in the browser")
    page.fill('#create-card textarea[name="acceptance"]', "it shows up\nit is todo")
    page.select_option('#create-card select[name="acceptance_mode"]', "human")
    page.click('#create-card button[type="submit"]')
    expect(column(page, "todo", "WEB-1")).to_contain_text("Made in the browser")  # type: ignore[arg-type]
    page.screenshot(path=str(tmp_path / "created.png"), full_page=True)
    board, _ = board_of(live)
    card = board.get("WEB-1")
    assert card.acceptance_mode.value == "human"
    assert [c.text for c in card.acceptance] == ["it shows up", "it is todo"]


def test_claim_by_another_process_moves_the_column_live(
    live: Live, page: Page, tmp_path: Path
) -> None:
    board = seed(live)
    board.create_card(human("alice"), "WEB", "to be claimed")
    page.goto(live.url + "/")
    expect(column(page, "todo", "WEB-1")).to_be_visible()  # type: ignore[arg-type]
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate("window.__noReload = 42")
    worker = live.lb("card", "claim", "WEB-1", "--holder", "worker-7")
    assert worker.returncode == 0, worker.stderr
    moved = column(page, "in_progress", "WEB-1")
    expect(moved).to_contain_text("held by worker-7")  # type: ignore[arg-type]
    assert page.evaluate("window.__noReload") == 42
    assert column(page, "todo", "WEB-1").count() == 0  # type: ignore[attr-defined]
    page.screenshot(path=str(tmp_path / "claimed-live.png"), full_page=True)


def test_answering_a_question_releases_the_card(live: Live, page: Page, tmp_path: Path) -> None:
    board = seed(live)
    card = board.create_card(human("alice"), "WEB", "needs an answer")
    board.claim(agent("worker-1"), card.ref)
    board.move(agent("worker-1"), card.ref, "awaiting", reason="E2", question="Which port?")
    page.goto(live.url + f"/cards/{card.ref}")
    expect(page.locator(".detail")).to_have_attribute("data-status", "awaiting")
    page.fill("#answer textarea", "Use 8765.")
    page.click('#answer button[type="submit"]')
    expect(page.locator(".detail")).to_have_attribute("data-status", "todo")
    expect(page.locator(".comment.kind-answer")).to_contain_text("Use 8765.")
    page.screenshot(path=str(tmp_path / "answered.png"), full_page=True)
    fresh = board.get(card.ref)
    assert fresh.status.value == "todo"
    comments = board.comments(card.ref)
    assert (comments[-1].kind.value, comments[-1].author_kind.value) == ("answer", "human")


def test_approving_a_human_card_closes_it(live: Live, page: Page, tmp_path: Path) -> None:
    board = seed(live)
    card = board.create_card(human("alice"), "WEB", "human gate", acceptance_mode="human")
    w = agent("worker-2")
    board.claim(w, card.ref)
    board.report(w, card.ref, "delivered", evidence=[{"command": "pytest", "exit_code": 0}])
    board.move(w, card.ref, "in_review")
    page.goto(live.url + f"/cards/{card.ref}")
    expect(page.locator(".evidence")).to_contain_text("pytest")
    page.click("#approve")
    expect(page.locator(".detail")).to_have_attribute("data-status", "done")
    page.screenshot(path=str(tmp_path / "approved.png"), full_page=True)
    assert board.get(card.ref).status.value == "done"
    page.goto(live.url + "/")
    expect(column(page, "done", card.ref)).to_be_visible()  # type: ignore[arg-type]


@pytest.mark.parametrize("failure", ["dropped", "503"])
def test_a_redraw_that_fails_is_fetched_again(live: Live, page: Page, failure: str) -> None:
    """A partial that does not arrive (a dropped connection, a server busy for a moment)
    leaves the section stale only until the next try, never until the next event."""
    board = seed(live)
    board.create_card(human("alice"), "WEB", "to be claimed")
    page.goto(live.url + "/")
    expect(page.locator("#live-state")).to_have_text("live")
    dropped: list[str] = []

    def drop_once(route: Route) -> None:
        if dropped:
            route.continue_()
        else:
            dropped.append(route.request.url)
            if failure == "dropped":
                route.abort()
            else:
                route.fulfill(status=503, body="busy")

    page.route("**/ui/board*", drop_once)
    worker = live.lb("card", "claim", "WEB-1", "--holder", "worker-7")
    assert worker.returncode == 0, worker.stderr
    expect(column(page, "in_progress", "WEB-1")).to_contain_text("held by worker-7")  # type: ignore[arg-type]
    assert len(dropped) == 1
