"""The dashboard's views in headless Chromium against a real ``lb serve``: the diff
highlighted per file, search, sort, keyboard shortcuts and a phone's width. Each test
writes its view's screenshot (see ``tests/server/screens.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from tests.server.conftest import WAIT_MS, Live
from tests.server.screens import shot
from tests.server.test_dashboard import ARGS, CHROMIUM
from tests.workspace.helpers import commit_file

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.store import open_store
from laneboard.workspace.hooks import install
from laneboard.workspace.lane_admit import LaneAdmitter

ME = human("alice")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def open_tab(chromium: Browser, width: int = 1400, height: int = 900) -> Page:
    p = chromium.new_context(viewport={"width": width, "height": height}).new_page()
    p.set_default_timeout(WAIT_MS)
    return p


@pytest.fixture
def tab(chromium: Browser) -> Iterator[Page]:
    p = open_tab(chromium)
    try:
        yield p
    finally:
        p.context.close()


def seeded(live: Live) -> Board:
    board = Board(open_store(live.db))
    board.add_project(ME, "WEB")
    for title, prio in (("Login page", 2), ("Billing export", 0), ("Footer links", 3)):
        board.create_card(ME, "WEB", title, priority=prio, labels=["web"])
    waiting = board.create_card(ME, "WEB", "Pick a port")
    board.claim(agent("worker-1"), waiting.ref)
    board.move(agent("worker-1"), waiting.ref, "awaiting", reason="E2", question="Which port?")
    board.comment(ME, "WEB-3", "the login link goes here too")
    return board


def selected(page: Page) -> str | None:
    return page.evaluate(
        "(document.querySelector('article.card.selected') || {dataset: {}}).dataset.ref || null"
    )  # type: ignore[no-any-return]


def test_keyboard_shortcuts(live: Live, tab: Page, tmp_path: Path) -> None:
    seeded(live)
    tab.goto(live.url + "/")
    expect(tab.locator("#live-state")).to_have_text("live")
    tab.keyboard.press("j")
    assert selected(tab) == "WEB-1"
    tab.keyboard.press("j")
    tab.keyboard.press("j")
    assert selected(tab) == "WEB-3"
    tab.keyboard.press("k")
    assert selected(tab) == "WEB-2"
    tab.keyboard.press("?")
    expect(tab.locator("#help")).to_be_visible()
    shot(tab, tmp_path, "keyboard-help")
    tab.keyboard.press("Escape")
    expect(tab.locator("#help")).to_be_hidden()
    tab.keyboard.press("j")
    tab.keyboard.press("Enter")
    tab.wait_for_url("**/cards/WEB-1")

    tab.goto(live.url + "/")
    tab.keyboard.press("/")
    expect(tab.locator("#search")).to_be_focused()
    tab.keyboard.type("j")  # typing in a field is not a shortcut
    assert selected(tab) is None
    tab.keyboard.press("Escape")
    tab.keyboard.press("a")  # the first card awaiting an answer, its answer box focused
    tab.wait_for_url("**/cards/WEB-4#answer")
    expect(tab.locator("#answer textarea")).to_be_focused()


def test_search_and_sort(live: Live, tab: Page, tmp_path: Path) -> None:
    seeded(live)
    tab.goto(live.url + "/")
    tab.fill("#search", "login")
    tab.press("#search", "Enter")
    tab.wait_for_url("**/?*q=login*")
    todo = tab.locator('.column[data-status="todo"] article.card')
    expect(todo).to_have_count(2)  # WEB-1 by its title, WEB-3 by a comment
    assert todo.evaluate_all("els => els.map(e => e.dataset.ref)") == ["WEB-1", "WEB-3"]
    tab.fill("#search", "")
    tab.select_option('select[name="sort"]', "priority")
    tab.click('form.filters button[type="submit"]')
    tab.wait_for_url("**sort=priority*")
    expect(todo).to_have_count(3)
    assert todo.evaluate_all("els => els.map(e => e.dataset.ref)") == ["WEB-2", "WEB-1", "WEB-3"]
    shot(tab, tmp_path, "board")


def test_phone_width(live: Live, chromium: Browser, tmp_path: Path) -> None:
    seeded(live)
    phone = open_tab(chromium, 390, 844)
    try:
        phone.goto(live.url + "/")
        expect(phone.locator("#live-state")).to_have_text("live")
        wide = phone.evaluate("document.documentElement.scrollWidth")
        assert wide <= 391  # nothing wider than the screen
        boxes = [
            phone.locator(f'.column[data-status="{s}"]').bounding_box()
            for s in ("backlog", "todo", "awaiting")
        ]
        assert all(b is not None for b in boxes)
        xs = {round(b["x"]) for b in boxes if b}
        ys = [b["y"] for b in boxes if b]
        assert len(xs) == 1 and ys == sorted(ys)  # the columns stack, one under another
        shot(phone, tmp_path, "phone", full_page=True)
        phone.goto(live.url + "/cards/WEB-4")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 391
        expect(phone.locator("#answer textarea")).to_be_visible()
    finally:
        phone.context.close()


def test_diff_renders_highlighted_per_file(
    live: Live, tab: Page, tmp_path: Path, repo: Path
) -> None:
    board = install(Board(open_store(live.db)))
    board.add_project(ME, "APP", path=str(repo))
    card = board.create_card(ME, "APP", "Add the greeter", acceptance_mode="off")
    lane = LaneAdmitter(board).admit(card, board.project("APP"))
    card = board.claim(ME, card.ref, holder="worker")
    commit_file(
        lane, "greet.py", 'def greet(name: str) -> str:\n    return f"hi {name}"\n', "greet"
    )
    Path(lane, "README.md").write_text("hello\nsee greet.py\n")
    worker = agent("worker", card.id, card.claim_epoch)
    board.report(
        worker, card.ref, "added greet",
        evidence=[{"command": "pytest -q", "exit_code": 0, "summary": "3 passed"}],
    )  # fmt: skip

    tab.goto(live.url + f"/cards/{card.ref}#lane")
    files = tab.locator(".diff-files tr")
    expect(files).to_have_count(2)
    expect(files.nth(0)).to_contain_text("README.md")
    expect(files.nth(1)).to_contain_text("greet.py")
    expect(files.nth(1)).to_contain_text("+2")
    keyword = tab.locator('.diff-file[data-path="greet.py"] .code span.k').first
    expect(keyword).to_have_text("def")
    colour = keyword.evaluate("el => getComputedStyle(el).color")
    assert colour != tab.locator(".diff-file h3").first.evaluate("el => getComputedStyle(el).color")
    expect(tab.locator("#lane-checks")).to_contain_text("pytest -q")
    tab.locator("#lane").scroll_into_view_if_needed()
    shot(tab, tmp_path, "diff-unified")
    tab.click("#view-split")
    expect(tab.locator("table.diff-code.split")).to_have_count(2)
    tab.locator("#lane").scroll_into_view_if_needed()
    shot(tab, tmp_path, "diff-split")


def test_pictures_render_statuses_and_figures(live: Live, tab: Page, tmp_path: Path) -> None:
    from laneboard.supervisor import records

    store = open_store(live.db)
    board = Board(store)
    board.add_project(ME, "WEB")
    run_id = board.create_run(ME, "WEB", "ship the login page")["id"]
    titles = ("schema", "api", "ui", "docs")
    made = []
    for i, title in enumerate(titles):
        deps = [made[0].ref] if i in (1, 2) else [made[1].ref, made[2].ref] if i == 3 else []
        made.append(board.create_card(ME, "WEB", title, run_id=run_id, depends_on=deps))
    w = board.claim(agent("w1"), made[0].ref)
    worker = agent("w1", w.id, w.claim_epoch)
    board.report(worker, w.ref, "done")
    board.move(worker, w.ref, "in_review")
    board.move(ME, w.ref, "done")
    board.claim(agent("w2"), made[1].ref)
    with store.write() as tx:
        for card, kind, cost in ((made[0], "claude", 0.4), (made[1], "codex", 0.15)):
            t = records.start_turn(tx, None, card.id, 1, None, kind, None, "p")
            usage = {"input_tokens": 900, "output_tokens": 100, "cost_usd": cost}
            records.finish_turn(tx, t, "ok", final_text="", error=None, exit_code=0, usage=usage)

    tab.goto(live.url + f"/?run={run_id}")
    tab.click("#run-pictures")
    tab.wait_for_url(f"**/pictures?run={run_id}")
    expect(tab.locator(".facts")).to_contain_text("4 cards · 2 agent turns · 2000 tokens · $0.55")
    for ref, status in (("WEB-1", "done"), ("WEB-2", "in_progress"), ("WEB-4", "todo")):
        expect(tab.locator(f'#graph [id="node-{ref}"]')).to_be_attached()
        assert status in (tab.locator(f'#graph [id="node-{ref}"]').text_content() or "")
    bars = tab.locator("#usage-kind rect")
    expect(bars).to_have_count(2)
    assert bars.evaluate_all("els => els.map(e => [e.dataset.label, +e.dataset.value])") == [
        ["claude", 0.4], ["codex", 0.15]
    ]  # fmt: skip
    expect(tab.locator("#progress polygon[data-status='done']")).to_have_count(1)
    shot(tab, tmp_path, "pictures", full_page=True)


def test_card_page_with_its_review(live: Live, tab: Page, tmp_path: Path) -> None:
    from laneboard.supervisor.workflow import review_key

    board = seeded(live)
    judged = board.get("WEB-1")
    rev = board.create_card(ME, "WEB", "review WEB-1", labels=["review"],
                            meta={"review_of": judged.id},
                            idempotency_key=review_key("WEB-1", 1))  # fmt: skip
    held = board.claim(agent("reviewer-1"), rev.ref)
    board.report(agent("reviewer-1", held.id, held.claim_epoch), rev.ref,
                 "VERDICT: REJECT\nThe redirect is right; two things are missing.\n"
                 "1. the test for a logged-out user asserts nothing\n"
                 "2. the login form has no label for its password field")  # fmt: skip
    tab.goto(live.url + "/cards/WEB-1")
    review = tab.locator("#reviews .review")
    expect(review).to_have_count(1)
    expect(review).to_contain_text("REJECT")
    expect(review.locator(".must-fix li")).to_have_count(2)
    shot(tab, tmp_path, "card")
