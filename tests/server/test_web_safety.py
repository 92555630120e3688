"""No web page the user opens can write to the board: every write route (walked from the
application's own route table, both backends) refuses ``Origin: null`` with ``text/plain``,
a foreign origin, and a missing content type; the dashboard's same-origin JSON writes keep
working, in headless Chromium too; ``/metrics`` is never an agent's read."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from starlette.routing import Mount, Route
from starlette.testclient import TestClient
from tests.server.conftest import LOCAL, WAIT_MS, Live
from tests.server.test_dashboard import ARGS, CHROMIUM

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import human
from laneboard.server.app import create_app
from laneboard.store import Store, open_store

ME = human("alice")
WRITES = ("POST", "PUT", "PATCH", "DELETE")
PARAMS = {"ref": "WEB-1", "dep": "WEB-2", "depends_on": "WEB-2", "token_id": "1", "project": "WEB",
          "rest": "x/y", "name": "card.move", "question_id": "1", "id": "1"}  # fmt: skip
BODY = '{"to": "canceled", "project": "WEB", "title": "pwned", "key": "PWN", "body": "x"}'


def log(store: Store) -> list[tuple[int, str]]:
    with store.read() as tx:
        return [(e.id, e.type) for e in tx.events(0, limit=100_000)]


def seed(store: Store) -> None:
    board = Board(store)
    board.add_project(ME, "WEB")
    board.create_card(ME, "WEB", "one")
    board.create_card(ME, "WEB", "two", depends_on=["WEB-1"])
    Tokens(store).create(ME, "spare", "human")
    board.create_run(ME, "WEB", "a run a page must not stop")


def write_routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, concrete path) a route of the application takes a write on."""
    out = []
    for route in app.app.routes:
        if isinstance(route, Route):
            path, methods = route.path, route.methods
        elif isinstance(route, Mount):
            path, methods = route.path + "/laneboard.js", None
        else:  # pragma: no cover - the table holds only routes and mounts
            raise AssertionError(f"unknown route {route!r}")
        concrete = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: PARAMS[m.group(1)], path)
        for method in WRITES:
            if methods is None or method in methods:
                out.append((method, concrete))
    return out


@pytest.fixture
def app(store: Store) -> Any:
    seed(store)
    return create_app(store, local_user="alice")


@pytest.fixture
def local(app: Any) -> Iterator[TestClient]:
    """The local human on loopback: the ambient trust a web page would try to borrow."""
    with TestClient(app, base_url=LOCAL, client=("127.0.0.1", 50000)) as c:
        yield c


ATTACKS = {
    "opaque origin, text/plain": ({"Origin": "null", "Content-Type": "text/plain"}, 403),
    "foreign origin": ({"Origin": "http://evil.example", "Content-Type": "application/json"}, 403),
    "another local origin": (
        {"Origin": "http://127.0.0.1:9999", "Content-Type": "application/json"},
        403,
    ),
    "cross-site fetch": (
        {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
        403,
    ),
    "no content type": ({}, 415),
    "form content type": ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_every_write_route_refuses_a_web_page(
    app: Any, local: TestClient, store: Store, attack: str
) -> None:
    headers, status = ATTACKS[attack]
    routes = write_routes(app)
    assert ("POST", "/api/v1/cards/WEB-1/move") in routes and ("POST", "/mcp") in routes
    assert ("DELETE", "/api/v1/tokens/1") in routes
    before = log(store)
    for method, path in routes:
        resp = local.request(method, path, content=BODY, headers=headers)
        assert resp.status_code == status, (method, path, resp.status_code, resp.text)
        body = resp.json()
        assert body["code"] in ("FORBIDDEN", "UNSUPPORTED_MEDIA_TYPE") and body["fix"], body
    assert log(store) == before
    assert [c.status.value for c in Board(store).list_cards()] == ["todo", "todo"]


def test_a_bearer_token_does_not_lift_the_rules(store: Store, local: TestClient) -> None:
    token, _ = Tokens(store).create(ME, "script", "human")
    before = log(store)
    resp = local.post(
        "/api/v1/projects",
        content='{"key": "PWN"}',
        headers={
            "Authorization": f"Bearer {token}",
            "Origin": "null",
            "Content-Type": "text/plain",
        },
    )
    assert (resp.status_code, resp.json()["code"]) == (403, "FORBIDDEN")
    resp = local.post(
        "/api/v1/projects", content='{"key": "PWN"}', headers={"Authorization": f"Bearer {token}"}
    )
    assert (resp.status_code, resp.json()["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert log(store) == before


def test_same_origin_json_writes_work(local: TestClient, store: Store) -> None:
    same = {"Origin": LOCAL, "Content-Type": "application/json; charset=utf-8"}
    made = local.post("/api/v1/cards", content='{"project": "WEB", "title": "ok"}', headers=same)
    assert made.status_code == 201, made.text
    moved = local.post(
        "/api/v1/cards/WEB-3/move", json={"to": "backlog"}, headers={"Origin": LOCAL}
    )
    assert moved.status_code == 200, moved.text
    # a program (no Origin at all) writes once it says JSON, even with no body
    json_only = {"Content-Type": "application/json"}
    gone = local.request("DELETE", "/api/v1/cards/WEB-2/links/WEB-1", headers=json_only)
    assert gone.status_code == 200, gone.text
    # reads are not writes: an opaque origin may still read (the browser keeps the answer)
    assert local.get("/api/v1/cards", headers={"Origin": "null"}).status_code == 200


def test_undeclared_methods_still_get_the_routers_answer(local: TestClient) -> None:
    assert local.put("/api/v1/cards").status_code == 405
    assert local.post("/healthz").status_code == 405


def test_metrics_are_never_an_agents_read(store: Store, local: TestClient) -> None:
    scoped, _ = Tokens(store).create(ME, "worker", card_id=1, epoch=1)
    pool, _ = Tokens(store).create(ME, "pool-worker")
    person, _ = Tokens(store).create(ME, "grafana", "human")
    for token in (scoped, pool):
        resp = local.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert (resp.status_code, resp.json()["code"]) == (403, "FORBIDDEN")
    assert local.get("/metrics", headers={"Authorization": f"Bearer {person}"}).status_code == 200
    assert "laneboard_cards" in local.get("/metrics").text


def test_an_oversized_body_is_refused_before_it_is_read(local: TestClient, store: Store) -> None:
    before = log(store)
    big = '{"project": "WEB", "title": "' + "x" * 2_100_000 + '"}'
    resp = local.post("/api/v1/cards", content=big, headers={"Content-Type": "application/json"})
    assert (resp.status_code, resp.json()["code"]) == (422, "BAD_INPUT")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"project": "WEB", "title": "'
        for _ in range(30):
            yield b"x" * 100_000
        yield b'"}'

    resp = local.post(
        "/api/v1/cards", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert (resp.status_code, resp.json()["code"]) == (422, "BAD_INPUT")
    deep = "[" * 100_000 + "]" * 100_000
    mcp = local.post(
        "/mcp",
        content=deep,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert mcp.status_code == 400 and "Parse error" in mcp.text
    assert log(store) == before


# -- in the browser ---------------------------------------------------------------------
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
    ctx = browser.new_context()
    p = ctx.new_page()
    p.set_default_timeout(WAIT_MS)
    try:
        yield p
    finally:
        ctx.close()


class _Hostile(BaseHTTPRequestHandler):
    html = ""

    def do_GET(self) -> None:
        data = self.html.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        return


@pytest.fixture
def hostile() -> Iterator[tuple[str, type[_Hostile]]]:
    """Another web site on the user's machine (another origin: another port)."""
    handler = type("Handler", (_Hostile,), {})
    srv = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


def attack_page(target: str) -> str:
    """What a hostile page does without a preflight: a text/plain form post and no-cors
    fetches (the only cross-origin writes a browser sends unasked)."""
    return f"""<!doctype html><body>
<form id="f" method="POST" enctype="text/plain" action="{target}/api/v1/cards/WEB-1/move">
<input name='{{"to": "canceled", "x": "' value='"}}'></form>
<script>
const opts = {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}}};
Promise.all([
  fetch("{target}/api/v1/cards", {{...opts, body: '{{"project": "WEB", "title": "pwned"}}'}}),
  fetch("{target}/api/v1/tokens", {{...opts, body: '{{"name": "pwned", "kind": "human"}}'}}),
  fetch("{target}/api/v1/cards/WEB-1/release", {{method: "POST", mode: "no-cors"}}),
]).finally(() => {{ document.title = "sent"; document.getElementById("f").submit(); }});
</script></body>"""


def board_state(live: Live) -> tuple[list[str], int, list[str]]:
    store = open_store(live.db)
    try:
        cards = [f"{c.ref}:{c.status.value}" for c in Board(store).list_cards()]
        tokens = len(Tokens(store).list(ME))
        return cards, tokens, [t for _, t in log(store)]
    finally:
        store.close()


def test_hostile_pages_in_chromium_cannot_write(
    live: Live, page: Page, hostile: tuple[str, type[_Hostile]], tmp_path: Path
) -> None:
    store = open_store(live.db)
    Board(store).add_project(ME, "WEB")
    Board(store).create_card(ME, "WEB", "precious")
    store.close()
    before = board_state(live)
    site, handler = hostile
    handler.html = attack_page(live.url)
    for url in (site + "/", "data:text/html," + quote(attack_page(live.url))):
        page.goto(url)
        page.wait_for_url(re.compile(r".*/api/v1/cards/WEB-1/move$"))  # the form went
        assert '"FORBIDDEN"' in page.content()
    assert board_state(live) == before


def test_the_dashboard_writes_same_origin_json_in_chromium(live: Live, page: Page) -> None:
    store = open_store(live.db)
    Board(store).add_project(ME, "WEB")
    store.close()
    requests: list[dict[str, str]] = []  # what went on the wire, as the server saw it
    page.on(
        "response",
        lambda r: requests.append(r.request.all_headers()) if r.request.method == "POST" else None,
    )
    page.goto(live.url + "/")
    page.click("#create-card summary")
    page.fill('#create-card input[name="title"]', "from the dashboard")
    page.click('#create-card button[type="submit"]')
    page.locator('article[data-ref="WEB-1"]').wait_for()
    page.goto(live.url + "/cards/WEB-1")
    page.fill('#comment textarea[name="body"]', "a note from the page")
    page.click('#comment button[type="submit"]')
    page.locator(".comment", has_text="a note from the page").wait_for()
    assert len(requests) == 2
    for h in requests:
        assert h["content-type"] == "application/json" and h["origin"] == live.url
    assert board_state(live)[0] == ["WEB-1:todo"]
