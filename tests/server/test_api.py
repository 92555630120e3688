"""The REST API in-process on both backends: every route, every error code, auth rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from tests.server.conftest import LOCAL
from tests.server.walk import BASE, bearer, expect, walk

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import agent, human
from laneboard.ops.table import all_ops
from laneboard.server.app import create_app
from laneboard.store import Store, open_store


def test_every_route_and_error_code(client: TestClient) -> None:
    made = walk(client)
    assert made["b"]["acceptance_mode"] == "human"


def test_openapi_lists_every_route(client: TestClient) -> None:
    doc = client.get(BASE + "/openapi.json").json()
    ops = {(m.upper(), p) for p, item in doc["paths"].items() for m in item}
    assert ("POST", "/api/v1/cards/{ref}/move") in ops
    assert ("GET", "/api/v1/events") in ops
    assert ops == {(r.method, BASE + r.path) for op in all_ops() for r in op.routes}
    for item in doc["paths"].values():
        for op in item.values():
            assert "401" in op["responses"]


def test_untrusted_address_needs_a_token(store: Store) -> None:
    app = create_app(store, local_user="alice")
    with TestClient(app, base_url=LOCAL, client=("10.9.8.7", 4000)) as remote:
        expect(remote.get(BASE + "/cards"), 401, "UNAUTHORIZED")
        expect(remote.get("/"), 401, "UNAUTHORIZED")
        assert remote.get(BASE + "/cards").headers["www-authenticate"].startswith("Bearer")
        token, _ = Tokens(store).create(human("alice"), "remote-bob", "human")
        assert expect(remote.get(BASE + "/me", headers=bearer(token)), 200)["name"] == "remote-bob"
        assert remote.get("/healthz").status_code == 200


def test_loopback_trust_refuses_rebinding_and_cross_site_writes(store: Store) -> None:
    app = create_app(store, local_user="alice")
    with TestClient(app, base_url="http://evil.example:8765", client=("127.0.0.1", 1)) as c:
        expect(c.get(BASE + "/me"), 403, "FORBIDDEN")
    app = create_app(store, local_user="alice")
    with TestClient(app, base_url=LOCAL, client=("::1", 1)) as c:
        assert expect(c.get(BASE + "/me"), 200)["name"] == "alice"
        expect(
            c.post(
                BASE + "/projects", json={"key": "X"}, headers={"Origin": "http://evil.example"}
            ),
            403,
            "FORBIDDEN",
        )
        expect(  # another local server's page is another origin
            c.post(
                BASE + "/projects", json={"key": "X"}, headers={"Origin": "http://127.0.0.1:8765"}
            ),
            403,
            "FORBIDDEN",
        )
        expect(
            c.post(BASE + "/projects", json={"key": "X"}, headers={"Origin": "http://127.0.0.1"}),
            201,
        )
        expect(c.get(BASE + "/me", headers={"Authorization": "Basic abc"}), 401, "UNAUTHORIZED")


def test_stale_epoch_write_is_refused(client: TestClient, store: Store) -> None:
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    card = board.create_card(me, "WEB", "fenced")
    board.claim(agent("w1"), card.ref)
    tok, _ = Tokens(store).create(me, "w1", "agent", card_id=card.id, epoch=1)
    expect(client.post(BASE + f"/cards/{card.ref}/heartbeat", json={}, headers=bearer(tok)), 200)
    # a new claim bumps the epoch; writes with the old token are fenced
    board.move(me, card.ref, "todo")
    board.claim(agent("w1"), card.ref)
    expect(
        client.post(BASE + f"/cards/{card.ref}/heartbeat", json={}, headers=bearer(tok)),
        409,
        "STALE_CLAIM",
    )


def test_events_stream_resumes_and_filters(client: TestClient, store: Store) -> None:
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    c1 = board.create_card(me, "WEB", "one")
    c2 = board.create_card(me, "WEB", "two")
    board.comment(me, c1.ref, "hello")

    def read(
        params: dict[str, str], headers: dict[str, str] | None = None
    ) -> list[tuple[str, str]]:
        got = []
        h = {"Accept": "text/event-stream", **(headers or {})}
        with client.stream("GET", BASE + "/events", params=params, headers=h) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            ident = None
            for line in resp.iter_lines():
                if line.startswith("id: "):
                    ident = line[4:]
                elif line.startswith("event: "):
                    assert ident is not None
                    got.append((ident, line[7:]))
        return got

    everything = read({"after": "0", "max_events": "4"})
    assert [t for _, t in everything] == [
        "project.added",
        "card.created",
        "card.created",
        "comment.added",
    ]
    resumed = read({"max_events": "2"}, {"Last-Event-ID": str(everything[1][0])})
    assert resumed == everything[2:4]
    only = read({"after": "0", "card": c2.ref, "max_events": "1"})
    assert only == [everything[2]]
    expect(
        client.get(
            BASE + "/events", params={"card": "WEB-77"}, headers={"Accept": "text/event-stream"}
        ),
        404,
        "NOT_FOUND",
    )
    head = board.event_head()  # a Last-Event-ID from another board, past this log's end
    ahead = str(int(head) + 1000) if "." not in head else f"{int(head.split('.')[0]) + 1000}.1"
    refused = client.get(
        BASE + "/events", headers={"Accept": "text/event-stream", "Last-Event-ID": ahead}
    )
    expect(refused, 422, "BAD_INPUT")
    assert "ahead of this board's log" in refused.text


def test_metrics_parse_and_count(client: TestClient, store: Store) -> None:
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    for i in range(3):
        board.create_card(me, "WEB", f"c{i}")
    board.claim(agent("w"), "WEB-1")
    resp = client.get("/metrics")
    assert resp.status_code == 200
    fams = {f.name: f for f in text_string_to_metric_families(resp.text)}
    cards = {
        s.labels["status"]: s.value
        for s in fams["laneboard_cards"].samples
        if s.labels["project"] == "WEB"
    }
    assert cards == {"todo": 2, "in_progress": 1}
    assert fams["laneboard_claims_active"].samples[0].value == 1
    assert fams["laneboard_claims"].samples[0].value == 1
    for name in (
        "laneboard_turns",
        "laneboard_queue_depth",
        "laneboard_alerts",
        "laneboard_tick_duration_seconds",
        "laneboard_sessions",
    ):
        assert fams[name].samples, name


def test_healthz_ok_then_503_when_store_unreachable(client: TestClient, tmp_path: Path) -> None:
    ok = client.get("/healthz")
    assert ok.status_code == 200
    body = ok.json()
    assert body["status"] == "ok" and body["store"]["ok"] is True
    assert body["supervisor"]["state"] in ("absent", "stopped", "running", "starting")
    for url in (
        f"sqlite:///{tmp_path / 'missing' / 'dir' / 'b.db'}",
        "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2",
    ):
        gone = open_store(url, migrate=False)
        app = create_app(gone, with_mcp=False)
        with TestClient(
            app, base_url=LOCAL, client=("127.0.0.1", 1), raise_server_exceptions=False
        ) as c:
            resp = c.get("/healthz")
            assert resp.status_code == 503
            assert resp.json()["status"] == "down"
            expect(c.get(BASE + "/cards"), 503, "STORE_UNAVAILABLE")


@pytest.mark.parametrize("path", ["/", "/cards/WEB-1", "/ui/board", "/ui/cards/WEB-1"])
def test_dashboard_pages_render(client: TestClient, store: Store, path: str) -> None:
    board = Board(store)
    board.add_project(human("alice"), "WEB")
    board.create_card(human("alice"), "WEB", "<b>escaped</b>", description="body text")
    resp = client.get(path)
    assert resp.status_code == 200
    assert "&lt;b&gt;escaped&lt;/b&gt;" in resp.text
    assert "<b>escaped</b>" not in resp.text


def test_undeclared_methods_answer_405_with_allow(client: TestClient) -> None:
    from laneboard.server.api import bindings

    for path, methods in bindings().items():
        url = path.replace("{ref}", "WEB-1").replace("{project}", "WEB")
        url = url.replace("{name}", "n").replace("{token_id}", "1").replace("{depends_on}", "WEB-2")
        url = url.replace("{question_id}", "1")
        allowed = set(methods) | ({"HEAD"} if "GET" in methods else set())
        for method in {"GET", "POST", "PATCH", "DELETE", "PUT"} - allowed:
            resp = client.request(method, url)
            assert resp.status_code == 405, (method, url, resp.text)
            assert set(resp.headers["allow"].split(", ")) == allowed, (method, url)
            assert resp.json()["code"] == "METHOD_NOT_ALLOWED"
    resp = client.get(BASE + "/ops/card.get")
    assert resp.status_code == 405 and resp.headers["allow"] == "POST"
