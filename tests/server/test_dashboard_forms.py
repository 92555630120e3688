"""A live update never discards what a person is typing or submitting, in headless
Chromium against a real ``lb serve``: the card page's agent section is redrawn by a
live update whose partial was fetched before the person typed (the update is held in
flight with Playwright's routing until the text is in), and the typed text, the focus
and the caret survive it; a refused submission's error stays on the page through the
next live update, and the typed text with it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Request, Route, expect, sync_playwright
from tests.server.conftest import WAIT_MS, Live
from tests.server.test_dashboard import ARGS, CHROMIUM

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store, open_store

ME = human("alice")
AGENT_PARTIAL = re.compile(r"/ui/cards/[^/?]+/agent")
FOLLOWUPS = re.compile(r"/api/v1/cards/[^/]+/followups$")

# Resolves with what the follow-up box holds when the next live update has been drawn.
AFTER_NEXT_UPDATE = """() => { window.__drawn = new Promise(done => document.addEventListener(
  "laneboard:refreshed", () => {
    const box = document.querySelector("#followup textarea");
    done({value: box ? box.value : null, focused: document.activeElement === box,
          caret: box ? [box.selectionStart, box.selectionEnd] : null,
          error: document.querySelector("#followup .error")?.textContent ?? null});
  }, {once: true})); }"""


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def tab(chromium: Browser) -> Iterator[Page]:
    p = chromium.new_context(viewport={"width": 1400, "height": 900}).new_page()
    p.set_default_timeout(WAIT_MS)
    try:
        yield p
    finally:
        p.context.close()


@pytest.fixture
def board(live: Live) -> Iterator[Board]:
    store: Store = open_store(live.db)
    try:
        b = Board(store)
        b.add_project(ME, "WEB", path=None)
        yield b
    finally:
        store.close()


class Held:
    """Requests matching a pattern wait in flight until released (continued as they
    were, to the real server)."""

    def __init__(self, page: Page, pattern: re.Pattern[str]) -> None:
        self.page, self.pattern, self.routes = page, pattern, list[Route]()
        self.released = False
        page.route(pattern, self.hold)

    def hold(self, route: Route) -> None:
        if self.released:
            route.continue_()
        else:
            self.routes.append(route)

    def release(self) -> None:
        self.released = True
        for r in self.routes:
            r.continue_()
        self.page.unroute(self.pattern)  # (after: dropping the routing lets held ones go)


def is_agent_partial(r: Request) -> bool:
    return AGENT_PARTIAL.search(r.url) is not None


def opened(tab: Page, live: Live, board: Board) -> str:
    ref = board.create_card(ME, "WEB", "Needs advice").ref
    tab.goto(live.url + f"/cards/{ref}")
    expect(tab.locator("#followup textarea")).to_be_visible()
    expect(tab.locator("#live-state")).to_have_text("live")
    return ref


def drawn(tab: Page) -> Any:
    return tab.evaluate("window.__drawn")


def test_a_live_update_fetched_before_the_person_typed_keeps_the_text(
    tab: Page, live: Live, board: Board
) -> None:
    ref = opened(tab, live, board)
    held = Held(tab, AGENT_PARTIAL)
    with tab.expect_request(is_agent_partial):  # a live update is on its way
        board.comment(ME, ref, "a change the page follows")
    tab.fill("#followup textarea", "please mention the changelog")
    tab.evaluate("document.querySelector('#followup textarea').setSelectionRange(7, 12)")
    tab.evaluate(AFTER_NEXT_UPDATE)
    held.release()
    now = drawn(tab)  # the section was redrawn from markup fetched before the typing
    assert now == {"value": "please mention the changelog", "focused": True,
                   "caret": [7, 12], "error": ""}  # fmt: skip
    tab.click('#followup button[type="submit"]')
    expect(tab.locator(".pending .followup")).to_contain_text("please mention the changelog")
    expect(tab.locator("#followup textarea")).to_have_value("")  # sent, so cleared
    assert [f["body"] for f in board.transcript(ref)["followups"]] == [
        "please mention the changelog"
    ]


def test_a_refused_follow_up_keeps_its_error_and_text_through_live_updates(
    tab: Page, live: Live, board: Board
) -> None:
    ref = opened(tab, live, board)
    tab.fill("#followup textarea", "   ")  # not empty to the browser, empty to laneboard
    held = Held(tab, FOLLOWUPS)
    with tab.expect_request(FOLLOWUPS):
        tab.click('#followup button[type="submit"]')
    with tab.expect_request(is_agent_partial):  # a live update while the form is sent
        board.comment(ME, ref, "a change while the follow-up is sent")
    held.release()
    error = tab.locator("#followup .error")
    expect(error).to_contain_text("BAD_INPUT: follow-up is empty")
    tab.evaluate(AFTER_NEXT_UPDATE)
    board.comment(ME, ref, "another change after the refusal")
    now = drawn(tab)
    assert now["value"] == "   " and now["error"].startswith("BAD_INPUT: follow-up is empty")
    expect(error).to_contain_text("BAD_INPUT: follow-up is empty")
    assert board.transcript(ref)["followups"] == []
