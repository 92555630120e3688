"""The live agent view and the "needs you" inbox in headless Chromium, against a real
``lb serve`` and the real supervisor running scripted agents: a running turn's
transcript appears and grows live, a person stops it and releases the hold (the same
session continues), sends a follow-up that reaches the next turn, answers the agent's
question inline (the same turn resumes), approves and rejects with must-fix items, and
clears each inbox item with its action (a refused landing retried once the checkout is
clean, a failing schedule disabled); at a phone's width too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from tests.server.conftest import WAIT_MS, Live
from tests.server.screens import shot
from tests.server.test_dashboard import ARGS, CHROMIUM
from tests.supervisor.helpers import RealNowClock, Running, config, settled, wait_for
from tests.workspace.helpers import claimed, commit_file, deliver, git, project

from laneboard.board.schedules import Schedules, run_schedule_pass
from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human, system
from laneboard.store import Store, open_store
from laneboard.workspace.hooks import install
from laneboard.workspace.land import land_closed

ME = human("alice")
DELIVERED = re.compile("in_review|done")


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


class Site:
    def __init__(self, live: Live, tmp: Path) -> None:
        self.live, self.tmp = live, tmp
        self.clock = RealNowClock()
        self.store: Store = open_store(live.db, self.clock)
        self.board = Board(self.store)
        self.proj = tmp / "proj"
        self.proj.mkdir()
        self.board.add_project(ME, "WEB", path=str(self.proj))

    def card(self, title: str, script: list[dict[str, Any]], **kw: Any) -> str:
        return self.board.create_card(ME, "WEB", title, acceptance_mode="off",
                                      meta={"script": script}, **kw).ref  # fmt: skip

    def supervisor(self) -> Running:
        return Running(self.live.db, config(self.tmp), self.clock)

    def turns(self, ref: str) -> list[dict[str, Any]]:
        return list(self.board.transcript(ref)["turns"])


@pytest.fixture
def site(live: Live, tmp_path: Path) -> Iterator[Site]:
    s = Site(live, tmp_path)
    try:
        yield s
    finally:
        s.store.close()


def entries(page: Page) -> Any:
    return page.locator("#transcript .entry")


def test_the_transcript_grows_live_and_a_person_stops_the_turn(
    site: Site, tab: Page, tmp_path: Path
) -> None:
    ref = site.card("Long job", [
        {"say": "starting the long job", "attempt": 1},
        {"run": "echo step one", "attempt": 1},
        {"sleep": 1.5, "attempt": 1},
        {"run": "echo step two", "attempt": 1},
        {"hang": True, "attempt": 1},
        {"say": "back after the stop", "attempt": 2},
        {"deliver": "finished after the stop", "attempt": 2},
    ])  # fmt: skip
    tab.goto(site.live.url + f"/cards/{ref}")
    expect(tab.locator(".agent .none")).to_have_text("no agent has worked on this card yet")
    tab.evaluate("window.__noReload = 7")
    with site.supervisor():
        expect(tab.locator("#transcript")).to_contain_text("starting the long job")
        expect(tab.locator("#agent-running")).to_be_visible()
        before = entries(tab).count()
        expect(tab.locator("#transcript .type-command").last).to_contain_text("echo step two")
        assert entries(tab).count() > before  # it grew while the turn ran
        expect(tab.locator("#transcript .type-lb").first).to_contain_text("lb card get")
        assert tab.evaluate("window.__noReload") == 7  # live, not reloaded
        shot(tab, tmp_path, "agent-live")
        tab.click("#stop-turn")
        expect(tab.locator("#release-hold")).to_be_visible()
        expect(tab.locator(".detail")).to_have_attribute("data-status", "blocked")
        expect(tab.locator("#transcript .type-interrupt")).to_contain_text("stopped by alice")
        expect(tab.locator(".turns .outcome-stopped")).to_have_count(1)
        shot(tab, tmp_path, "agent-stopped")
        tab.click("#release-hold")
        expect(tab.locator(".detail")).to_have_attribute("data-status", DELIVERED)
        wait_for(lambda: settled(site.store), what="turns recorded")
    first, second = site.turns(ref)
    assert (first["outcome"], second["outcome"]) == ("stopped", "ok")
    assert first["session"] == second["session"]  # the same session continued
    tab.reload()
    expect(tab.locator("#transcript")).to_contain_text("back after the stop")


def test_a_follow_up_reaches_the_next_turn(site: Site, tab: Page, tmp_path: Path) -> None:
    ref = site.card("Two turns", [
        {"say": "waiting for advice", "attempt": 1},
        {"run": "sleep 3", "attempt": 1},
        {"deliver": "took the advice", "attempt": 2},
    ])  # fmt: skip
    tab.goto(site.live.url + f"/cards/{ref}")
    with site.supervisor():
        expect(tab.locator("#agent-running")).to_be_visible()
        tab.fill("#followup textarea", "please mention the changelog")
        tab.click('#followup button[type="submit"]')
        expect(tab.locator(".pending .followup")).to_contain_text("please mention the changelog")
        shot(tab, tmp_path, "agent-followup")
        expect(tab.locator(".detail")).to_have_attribute("data-status", DELIVERED)
        wait_for(lambda: settled(site.store), what="turns recorded")
    first, second = site.turns(ref)
    assert first["session"] == second["session"]
    tab.reload()
    prompt = tab.locator("#transcript .type-prompt")
    expect(prompt).to_contain_text("from alice: please mention the changelog")
    expect(tab.locator(".pending")).to_have_count(0)  # delivered with that turn


def test_answering_inline_resumes_the_same_session(site: Site, tab: Page, tmp_path: Path) -> None:
    ref = site.card("Pick a port", [
        {"ask": "Q1: which port? I recommend 8080.", "timeout": 100},
        {"write": "port.txt", "content": "picked\n"},
        {"deliver": "configured the port"},
    ])  # fmt: skip
    tab.goto(site.live.url + f"/cards/{ref}")
    with site.supervisor():
        expect(tab.locator("#answer-inline .question")).to_contain_text("which port?")
        shot(tab, tmp_path, "agent-question")
        tab.fill("#answer-inline textarea", "use 8765")
        tab.click('#answer-inline button[type="submit"]')
        expect(tab.locator(".detail")).to_have_attribute("data-status", DELIVERED)
        expect(tab.locator("#transcript .type-info").last).to_contain_text("use 8765")
        wait_for(lambda: settled(site.store), what="turns recorded")
    worker = [t for t in site.turns(ref) if t["role"] != "director"]
    assert len(worker) == 1  # one turn asked, waited, was answered and delivered
    assert (site.proj / "port.txt").read_text() == "picked\n"
    assert site.board.comments(ref)[-1].kind.value in ("answer", "note")


def delivered(board: Board, title: str) -> str:
    c = board.create_card(ME, "WEB", title, acceptance=["it works"], acceptance_mode="human")
    w = agent("worker-2")
    board.claim(w, c.ref)
    board.report(w, c.ref, "delivered", evidence=[{"command": "pytest", "exit_code": 0}])
    return board.move(w, c.ref, "in_review").ref


def test_the_inbox_lists_each_item_and_its_action_clears_it(
    site: Site, tab: Page, tmp_path: Path
) -> None:
    board = site.board
    w = agent("worker-1")
    asks = board.create_card(ME, "WEB", "Asks").ref
    board.claim(w, asks)
    board.comment(w, asks, "Which colour?", "question")
    approve, reject = delivered(board, "Approve me"), delivered(board, "Reject me")
    held = board.create_card(ME, "WEB", "Held").ref
    board.claim(w, held)
    with site.store.write() as tx:
        card = tx.card_by_ref(held)
        assert card is not None
        board.hold(tx, system("supervisor"), card, "stop", 1, "stopped by alice")
    tab.goto(site.live.url + "/")
    items = tab.locator(".inbox-item")
    expect(items).to_have_count(4)
    assert [items.nth(i).get_attribute("data-kind") for i in range(4)] == [
        "question", "acceptance", "acceptance", "hold"]  # fmt: skip
    shot(tab, tmp_path, "inbox")
    item = tab.locator(f'.inbox-item[data-card="{asks}"]')
    item.locator("input").fill("blue")
    item.locator("button").click()
    expect(items).to_have_count(3)
    tab.locator(f'.inbox-item[data-card="{approve}"] .inbox-approve').click()
    expect(items).to_have_count(2)
    rej = tab.locator(f'.inbox-item[data-card="{reject}"]')
    rej.locator("textarea").fill("the button is too small\nadd a test")
    rej.locator(".inbox-reject button").click()
    expect(items).to_have_count(1)
    tab.locator(f'.inbox-item[data-card="{held}"] .inbox-release').click()
    expect(tab.locator(".inbox .none")).to_have_text("nothing needs you")
    assert board.get(asks).status.value == "todo"
    assert board.get(approve).status.value == "done"
    rejected = board.get(reject)
    assert (rejected.status.value, rejected.delivery_round) == ("todo", 2)
    assert [c.text for c in rejected.acceptance][1:] == ["the button is too small", "add a test"]
    assert board.get(held).status.value == "todo"


def refused_landing(site: Site, repo: Path) -> str:
    """A done card whose lane the lanes pass refused to land: the checkout is dirty."""
    gated = install(Board(site.store))
    project(gated, repo, key="LAND")
    card, lane = claimed(gated, "LAND", title="Land me", acceptance_mode="off")
    commit_file(lane, "feature.txt", "new\n", "the work")
    deliver(gated, card)
    (repo / "README.md").write_text("local edit\n")
    site.board.move(ME, card.ref, "done")  # closed without the landing gate
    [first] = land_closed(site.store)
    assert "uncommitted changes" in first["blocked"]
    return card.ref


def failing_schedule(site: Site) -> None:
    """A schedule whose last firing failed: its project was renamed after it was added."""
    site.board.add_project(ME, "OPS", path=None)
    schedules = Schedules(site.store, site.clock)
    schedules.add(ME, "nightly", "* * * * *", {"project": "OPS", "title": "report"},
                  timezone="UTC")  # fmt: skip
    with site.store.write() as tx:
        tx.run("UPDATE projects SET key = 'OPS2', name = 'OPS2' WHERE key = 'OPS'")
    res = run_schedule_pass(site.store, FakeClock(site.clock.now_ms()), "test")
    assert [f["reason"] for f in res.failed] == ["project OPS does not exist"]


def test_the_inbox_retries_a_refused_landing_and_disables_a_failing_schedule(
    site: Site, tab: Page, repo: Path, tmp_path: Path
) -> None:
    ref = refused_landing(site, repo)
    failing_schedule(site)
    tab.goto(site.live.url + "/")
    items = tab.locator(".inbox-item")
    expect(items).to_have_count(2)
    assert [items.nth(i).get_attribute("data-kind") for i in range(2)] == ["landing", "schedule"]
    landing = tab.locator(f'.inbox-item[data-card="{ref}"]')
    expect(landing).to_contain_text("uncommitted changes to tracked files (README.md)")
    schedule = tab.locator('.inbox-item[data-kind="schedule"]')
    expect(schedule).to_contain_text("schedule nightly failed to fire")
    expect(schedule).to_contain_text("project OPS does not exist")
    shot(tab, tmp_path, "inbox-landing-schedule")
    with tab.expect_event("dialog") as refusal:  # still dirty: refused again, and said so
        landing.locator(".inbox-retry-landing").click()
    assert refusal.value.message.startswith("LANDING_BLOCKED: ")
    refusal.value.dismiss()
    expect(items).to_have_count(2)
    git(repo, "checkout", "--", "README.md")
    landing.locator(".inbox-retry-landing").click()
    expect(items).to_have_count(1)
    schedule.locator(".inbox-disable").click()
    expect(tab.locator(".inbox .none")).to_have_text("nothing needs you")
    merge = site.board.get(ref).meta["merge_commit"]
    assert merge == git(repo, "rev-parse", "HEAD") and (repo / "feature.txt").read_text() == "new\n"
    assert Schedules(site.store).get("nightly")["enabled"] is False


def test_reject_with_must_fix_items_on_the_card_page(site: Site, tab: Page) -> None:
    ref = delivered(site.board, "Needs work")
    tab.goto(site.live.url + f"/cards/{ref}")
    tab.fill("#reject textarea", "handle the empty list")
    tab.click('#reject button[type="submit"]')
    expect(tab.locator(".detail")).to_have_attribute("data-status", "todo")
    expect(tab.locator(".acceptance")).to_contain_text("R1.1 handle the empty list")
    expect(tab.locator(".comment.kind-change")).to_contain_text("Must fix")


def test_the_agent_view_and_inbox_at_a_phone_width(
    site: Site, chromium: Browser, tmp_path: Path
) -> None:
    ref = site.card("Phone job", [{"say": "working from the phone's view"},
                                  {"deliver": "done"}])  # fmt: skip
    delivered(site.board, "Check on the phone")
    with site.supervisor():
        wait_for(
            lambda: site.board.get(ref).status.value in ("in_review", "done"), what="delivered"
        )
        wait_for(lambda: settled(site.store), what="turns recorded")
    phone = open_tab(chromium, 390, 844)
    try:
        phone.goto(site.live.url + "/")
        expect(phone.locator(".inbox-item")).to_have_count(1)
        box = phone.locator(".inbox").bounding_box()
        assert box is not None and box["width"] <= 390
        shot(phone, tmp_path, "inbox-phone", full_page=True)
        phone.goto(site.live.url + f"/cards/{ref}")
        expect(phone.locator("#transcript")).to_contain_text("working from the phone's view")
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the page scrolls sideways ({width}px)"
        shot(phone, tmp_path, "agent-phone", full_page=True)
    finally:
        phone.context.close()
