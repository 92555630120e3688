"""The dashboard's runs: the list, a run's page (goal, status, convergence, progress bar,
what was verified, events, transitions), the board's run filter, and a transition button
clicked in headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Browser, expect
from starlette.testclient import TestClient
from tests.server.conftest import WAIT_MS, Live
from tests.server.test_dashboard import board_of, browser, page  # noqa: F401 (fixtures)
from tests.supervisor.helpers import wait_for

from laneboard.board.service import Board
from laneboard.domain.cursor import EventCursor
from laneboard.domain.model import human
from laneboard.store import Store

ME = human("alice")


def seeded(store: Store) -> tuple[Board, dict[str, object], list[str]]:
    board = Board(store)
    board.add_project(ME, "WEB")
    run = board.create_run(ME, "WEB", "ship the billing export")
    refs = [board.create_card(ME, "WEB", f"part {i}", run_id=run["id"]).ref for i in range(3)]
    board.move(ME, refs[0], "canceled")
    board.move(ME, refs[1], "blocked", reason="credentials")
    board.create_card(ME, "WEB", "not in the run")
    # a run's page lists its settled events; on PostgreSQL an older transaction anywhere on
    # the cluster (another test's) holds those back until it ends
    last = board.events(0, limit=1000)[-1]
    wait_for(lambda: settled_head(store) >= EventCursor(last.xid, last.id), what="settled log")
    return board, run, refs


def settled_head(store: Store) -> EventCursor:
    with store.autocommit() as tx:
        return tx.event_head()


def test_the_runs_list_and_a_run_page(client: TestClient, store: Store) -> None:
    _, run, refs = seeded(store)
    listed = client.get("/runs")
    assert listed.status_code == 200
    assert "ship the billing export" in listed.text and f'href="/runs/{run["id"]}"' in listed.text
    page_ = client.get(f"/runs/{run['id']}")
    assert page_.status_code == 200
    text = page_.text
    assert 'id="run-status">active<' in text
    for ref in refs:
        assert f'href="/cards/{ref}"' in text
    assert "not in the run" not in text
    segs = re.findall(r'run-bar-seg run-bar-(\w+) status-(\w+)" style="width: ([\d.]+)%', text)
    assert sorted(segs) == sorted([("terminal", "canceled", "33.3"), ("blocked", "blocked", "33.3"),
                                   ("active", "todo", "33.3")])  # fmt: skip
    buttons = re.findall(r'data-api="POST /api/v1/runs/\d+/([\w-]+)" data-idempotent', text)
    assert buttons == ["pause", "stop", "force-stop"]  # what an active run allows
    assert "not a verdict that tests passed" in text
    assert "run.created" in client.get(f"/ui/runs/{run['id']}").text
    assert f'href="/runs/{run["id"]}" id="card-run"' in client.get(f"/cards/{refs[0]}").text
    assert client.get("/runs/abc").status_code == 422
    assert client.get("/runs/999").status_code == 404


def test_the_board_filters_a_runs_cards(client: TestClient, store: Store) -> None:
    _, run, refs = seeded(store)
    got = client.get("/", params={"run": run["id"]}).text
    for ref in refs:
        assert ref in got
    assert "not in the run" not in got
    assert "not in the run" in client.get("/").text


def test_pausing_a_run_from_its_page(live: Live, browser: Browser, tmp_path: Path) -> None:  # noqa: F811
    board, store = board_of(live)
    board.add_project(ME, "WEB")
    run = board.create_run(ME, "WEB", "a goal to pause")
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        p = ctx.new_page()
        p.set_default_timeout(WAIT_MS)
        p.goto(f"{live.url}/runs/{run['id']}")
        expect(p.locator("#run-status")).to_have_text("active")
        p.click("#run-pause")
        expect(p.locator("#run-status")).to_have_text("paused-intake")
        expect(p.locator("#run-resume")).to_be_visible()
        assert board.run(run["id"])["status"] == "paused-intake"
        p.click("#run-resume")
        expect(p.locator("#run-status")).to_have_text("active")
    finally:
        ctx.close()
        store.close()  # type: ignore[attr-defined]
