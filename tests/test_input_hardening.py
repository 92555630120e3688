"""Bad input gets one clear refusal, on both backends and every surface, and writes nothing:
control characters and escape sequences in text, deep or huge JSON, ids beyond 64 bits,
arguments that are not UTF-8, a locked SQLite file, and a board that does not exist."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from starlette.testclient import TestClient

from laneboard.board import inputs
from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import agent, human
from laneboard.errors import LaneboardError
from laneboard.server.app import create_app
from laneboard.store import Store, open_store

ME = human("alice")
HUGE = 2**64 + 7
DEEP = "[" * 100_000 + "]" * 100_000
ARG_DEEP = "[" * 60_000 + "]" * 60_000  # as deep as one argument may be (128 KiB)
ONE_LINE_BAD = {
    "NUL": "a\x00b",
    "ESC": "\x1b[31mred\x1b[0m",
    "newline": "first\nsecond",
    "carriage return": "shown\rhidden",
    "tab": "a\tb",
    "C1 CSI": "a\x9b31m",
    "DEL": "a\x7f",
    "bidi override": "safe\u202etxt.exe",
    "lone surrogate": "a\udcff",
}


def log(store: Store) -> list[tuple[int, str]]:
    with store.read() as tx:
        return [(e.id, e.type) for e in tx.events(0, limit=100_000)]


def refused(store: Store, code: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> str:
    before = log(store)
    with pytest.raises(LaneboardError) as info:
        fn(*args, **kw)
    assert info.value.code == code, info.value.line()
    assert info.value.fix and "\n" not in info.value.line()
    assert log(store) == before, f"{code} changed the event log"
    return info.value.message


@pytest.fixture
def web(board: Board) -> Board:
    board.add_project(ME, "WEB")
    board.create_card(ME, "WEB", "first")
    return board


# -- text ------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", list(ONE_LINE_BAD.values()), ids=list(ONE_LINE_BAD))
def test_one_line_fields_refuse_control_characters(web: Board, store: Store, bad: str) -> None:
    s = store
    refused(s, "BAD_INPUT", web.create_card, ME, "WEB", bad)
    refused(s, "BAD_INPUT", web.create_card, ME, "WEB", "ok", labels=[bad])
    refused(s, "BAD_INPUT", web.create_card, ME, "WEB", "ok", assignee=bad)
    refused(s, "BAD_INPUT", web.create_card, ME, "WEB", "ok", checks=[bad])
    refused(s, "BAD_INPUT", web.create_card, ME, "WEB", "ok", allowed_paths=[bad])
    refused(s, "BAD_INPUT", web.create_card, ME, "WEB", "ok", idempotency_key=bad)
    refused(s, "BAD_INPUT", web.edit, ME, "WEB-1", title=bad)
    refused(s, "BAD_INPUT", web.add_project, ME, "NEW", name=bad)
    refused(s, "BAD_INPUT", web.claim, ME, "WEB-1", holder=bad)
    refused(s, "BAD_INPUT", web.get, bad)
    refused(s, "BAD_INPUT", web.list_cards, label=bad)
    refused(s, "BAD_INPUT", web.list_cards, project=bad)
    refused(s, "BAD_INPUT", Tokens(s).create, ME, bad)


def test_long_text_spans_lines_but_takes_no_escape_sequences(web: Board, store: Store) -> None:
    body = "line one\n\tindented\r\nwindows line"
    c = web.create_card(ME, "WEB", "multi", description=body, acceptance=["a\nb"])
    assert web.get(c.ref).description == body
    assert web.comment(ME, c.ref, body).body == body
    for bad in ("\x1b]0;owned\x07", "a\x00b", "over\rwrite", "a\x9bb", "a\udcffb"):
        refused(store, "BAD_INPUT", web.create_card, ME, "WEB", "t", description=bad)
        refused(store, "BAD_INPUT", web.comment, ME, c.ref, bad)
        refused(store, "BAD_INPUT", web.edit, ME, c.ref, description=bad)
        refused(store, "BAD_INPUT", web.move, ME, c.ref, "backlog", note=bad)
    web.claim(ME, c.ref)
    refused(store, "BAD_INPUT", web.report, ME, c.ref, "ok\x00")
    refused(
        store,
        "BAD_INPUT",
        web.report,
        ME,
        c.ref,
        "ok",
        evidence=[{"command": "a\nb", "exit_code": 0}],
    )


def test_text_is_stored_as_given_events_included(web: Board) -> None:
    """Quotes, backslashes and any script reach the cards and the event log unchanged
    (PostgreSQL's transactions write their events as literals, with COMMIT)."""
    title = "O'Brien's \\path\\ \\' '' -- ; DROP TABLE events; 漢字 ü 🚀 $1 %s"
    c = web.create_card(ME, "WEB", title, labels=["a'b", "c\\d"])
    assert web.get(c.ref).title == title
    edited = web.edit(ME, c.ref, title=title + " again")
    assert edited.title == title + " again"
    created = [e for e in web.events(0, limit=500) if e.card_id == c.id]
    assert created and all(e.actor == ME.name for e in created)
    assert [e.payload["title"] for e in created if e.type == "card.created"] == [title]


# -- JSON ------------------------------------------------------------------------------
def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def test_meta_is_bounded_in_depth_and_size_and_holds_storable_json(
    web: Board, store: Store
) -> None:
    ok = web.edit(ME, "WEB-1", meta={"deep": nested(inputs.JSON_DEPTH - 1)})
    assert ok.meta["deep"] == nested(inputs.JSON_DEPTH - 1)
    s = store
    refused(s, "BAD_INPUT", web.edit, ME, "WEB-1", meta={"deep": nested(inputs.JSON_DEPTH + 1)})
    refused(s, "BAD_INPUT", web.create_card, ME, "WEB", "t", meta={"big": "x" * 100_001})
    refused(s, "BAD_INPUT", web.edit, ME, "WEB-1", meta={"nul": "a\x00b"})
    refused(s, "BAD_INPUT", web.edit, ME, "WEB-1", meta={"a\nb": 1})
    refused(s, "BAD_INPUT", web.edit, ME, "WEB-1", meta={"n": float("nan")})
    refused(s, "BAD_INPUT", web.edit, ME, "WEB-1", meta={"n": HUGE})
    refused(s, "BAD_INPUT", web.edit, ME, "WEB-1", meta=["not", "an", "object"])
    with pytest.raises(LaneboardError) as info:
        inputs.json_text(DEEP, "--meta")
    assert info.value.code == "BAD_INPUT" and "deeper than" in info.value.message


# -- ids -------------------------------------------------------------------------------
def test_ids_beyond_64_bits_name_nothing(web: Board, store: Store) -> None:
    s = store
    for ref in (HUGE, str(HUGE), "99999999999999999999999", -1, 0):
        refused(s, "NOT_FOUND", web.get, ref)
        refused(s, "NOT_FOUND", web.comment, ME, ref, "hi")
    refused(s, "NOT_FOUND", web.project, HUGE)
    refused(s, "NOT_FOUND", web.list_cards, run_id=HUGE)
    refused(s, "NOT_FOUND", Tokens(s).revoke, ME, HUGE)
    refused(s, "BAD_INPUT", web.events, HUGE)
    refused(s, "BAD_INPUT", web.comments, "WEB-1", after=HUGE)
    refused(s, "NOT_FOUND", web.get, "²")  # a digit, but not one int() reads


# -- the store -------------------------------------------------------------------------
def test_a_one_statement_write_refuses_what_postgresql_cannot_hold(
    web: Board, store: Store
) -> None:
    """The last net holds on the store's one-statement write path too (claims, moves and
    reports written on a version read before): BAD_INPUT, nothing written, and the
    connection stays usable. An integer beyond 64 bits fits neither backend; a NUL in
    text only PostgreSQL refuses (SQLite stores it, and the board refuses it before)."""
    card = web.get("WEB-1")
    sql = "UPDATE cards SET title = ? WHERE id = ? RETURNING id"
    if store.dialect == "postgresql":
        refused(store, "BAD_INPUT", store.write_statement, sql, ["a\x00b", card.id])
    wide = "UPDATE cards SET priority = ? WHERE id = ? RETURNING id"
    refused(store, "BAD_INPUT", store.write_statement, wide, [HUGE, card.id])
    assert web.get("WEB-1").title == "first"
    assert store.write_statement(sql, ["second", card.id]) == [{"id": card.id}]


def test_a_locked_sqlite_board_is_lock_held_with_a_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "board.db"
    monkeypatch.setenv("LANEBOARD_BUSY_TIMEOUT", "0.2")
    store = open_store(f"sqlite:///{path}")
    board = Board(store)
    board.add_project(ME, "WEB")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        err = refused(store, "LOCK_HELD", board.create_card, ME, "WEB", "blocked")
        assert str(path) in err and "0.2 s" in err
        assert [c.title for c in board.list_cards()] == []  # reads go on meanwhile
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        env.update(LANEBOARD_DATABASE_URL=f"sqlite:///{path}", LANEBOARD_BUSY_TIMEOUT="0.2")
        r = subprocess.run(
            [sys.executable, "-m", "laneboard.cli.main", "card", "add", "WEB", "blocked"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 3 and r.stdout == "", r.stderr
        assert r.stderr.startswith("error LOCK_HELD: ") and r.stderr.count("\n") == 1
        assert "fuser" in r.stderr
        app = create_app(store, local_user="alice", with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5)) as c:
            resp = c.post("/api/v1/cards", json={"project": "WEB", "title": "blocked"})
        assert (resp.status_code, resp.json()["code"]) == (409, "LOCK_HELD")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert board.create_card(ME, "WEB", "after the lock").ref == "WEB-1"
    store.close()


def test_a_board_that_does_not_exist_is_refused_not_created(store_url: str) -> None:
    if store_url.startswith("sqlite:///"):
        url = store_url.replace("board.db", "typo.db")
        missing: Path | None = Path(url[len("sqlite:///") :])
    else:
        url, missing = store_url, None  # a fresh schema without laneboard's tables
    with pytest.raises(LaneboardError) as info:
        open_store(url, create=False)
    assert info.value.code == "NOT_FOUND" and info.value.message.startswith("no board at ")
    assert "lb init" in info.value.fix
    if missing is not None:
        assert not missing.exists() and not missing.parent.joinpath("typo.db-wal").exists()
    else:
        import psycopg

        with psycopg.connect(url) as conn:
            found = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
        assert found == (None,)
    open_store(url).close()  # the library (and lb init) makes one
    open_store(url, create=False).close()


# -- the CLI ---------------------------------------------------------------------------
class Lb:
    def __init__(self, url: str) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        self.env.update(LANEBOARD_DATABASE_URL=url, LANEBOARD_USER="alice")

    def run(self, *args: str | bytes, stdin: str = "") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "laneboard.cli.main", *args],
            env=self.env,
            input=stdin.encode("utf-8", "surrogatepass"),
            capture_output=True,
            timeout=60,
        )

    def refuse(self, code: str, exit_code: int, *args: str | bytes, stdin: str = "") -> str:
        r = self.run(*args, stdin=stdin)
        err = r.stderr.decode()
        assert (r.returncode, r.stdout) == (exit_code, b""), err
        assert err.startswith(f"error {code}: ") and err.count("\n") == 1, err
        assert "Traceback" not in err
        return err


@pytest.fixture
def cli(store: Store, store_url: str) -> Lb:
    board = Board(store)
    board.add_project(ME, "WEB")
    board.create_card(ME, "WEB", "first")
    board.claim(agent("w"), "WEB-1")
    return Lb(store_url)


def test_cli_refuses_bad_input_in_one_line(cli: Lb, store: Store) -> None:
    before = log(store)
    cli.refuse("BAD_INPUT", 2, "card", "add", "WEB", "\x1b[2J\x1b[Hfake prompt$ ")
    cli.refuse("BAD_INPUT", 2, "card", "add", "WEB", "two\nlines")
    cli.refuse("BAD_INPUT", 2, "card", "add", "WEB", b"not \xff utf-8")
    cli.refuse("BAD_INPUT", 2, "card", "comment", "WEB-1", "ring\x07 the bell")
    cli.refuse("BAD_INPUT", 2, "card", "report", "WEB-1", "--body", "-", stdin="done\x00")
    cli.refuse("BAD_INPUT", 2, "card", "add", "WEB", "deep", "--meta", ARG_DEEP)
    cli.refuse("BAD_INPUT", 2, "card", "edit", "WEB-1", "--meta", json.dumps({"k": "\x00"}))
    cli.refuse("NOT_FOUND", 1, "card", "get", str(HUGE))
    cli.refuse("NOT_FOUND", 1, "token", "revoke", str(HUGE))
    cli.refuse("BAD_INPUT", 2, "events", "tail", "--after", str(HUGE))
    assert log(store) == before


def test_cli_reads_refuse_a_board_that_does_not_exist(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo' / 'board.db'}"
    lb = Lb(url)
    err = lb.refuse("NOT_FOUND", 1, "card", "list")
    assert "no board at" in err and "lb init" in err
    lb.refuse("NOT_FOUND", 1, "serve", "--port", "9")
    assert not (tmp_path / "typo").exists()
    assert lb.run("init").returncode == 0
    assert lb.run("card", "list").stdout == b"(none)\n"


# -- REST ------------------------------------------------------------------------------
@pytest.fixture
def api(store: Store) -> Iterator[TestClient]:
    board = Board(store)
    board.add_project(ME, "WEB")
    board.create_card(ME, "WEB", "first")
    app = create_app(store, local_user="alice", with_mcp=False)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5)) as c:
        yield c


def expect(resp: Any, status: int, code: str) -> None:
    assert (resp.status_code, resp.json()["code"]) == (status, code), resp.text


def test_rest_refuses_bad_input_with_422_never_500(api: TestClient, store: Store) -> None:
    before = log(store)
    json_ct = {"Content-Type": "application/json"}
    for title in ("a\u0000b", "\u001b[31mred", "two\nlines", "safe\u202etxt"):
        expect(api.post("/api/v1/cards", json={"project": "WEB", "title": title}), 422, "BAD_INPUT")
    expect(api.post("/api/v1/cards", content=DEEP, headers=json_ct), 422, "BAD_INPUT")
    deep_meta = '{"meta": ' + "[" * 5000 + "]" * 5000 + "}"
    expect(api.patch("/api/v1/cards/WEB-1", content=deep_meta, headers=json_ct), 422, "BAD_INPUT")
    big = json.dumps({"project": "WEB", "title": "t", "description": "x" * 2_100_000})
    expect(api.post("/api/v1/cards", content=big, headers=json_ct), 422, "BAD_INPUT")
    expect(api.patch("/api/v1/cards/WEB-1", json={"meta": {"k": "\u0000"}}), 422, "BAD_INPUT")
    expect(api.get(f"/api/v1/cards/{HUGE}"), 404, "NOT_FOUND")
    expect(api.post(f"/api/v1/cards/{HUGE}/comments", json={"body": "x"}), 404, "NOT_FOUND")
    expect(api.get("/api/v1/cards", params={"label": "a\x00"}), 422, "BAD_INPUT")
    assert log(store) == before


# -- MCP -------------------------------------------------------------------------------
def test_mcp_refuses_bad_input_as_tool_errors(store: Store, store_url: str) -> None:
    board = Board(store)
    board.add_project(ME, "WEB")
    board.create_card(ME, "WEB", "first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "laneboard.cli.main", "--db", store_url, "mcp"], env=env
    )
    texts: list[str] = []

    async def main() -> None:
        async with Client(params) as c:
            for name, args in (
                ("create_card", {"project": "WEB", "title": "\x1b]0;owned\x07"}),
                ("create_card", {"project": "WEB", "title": "a\x00b"}),
                ("comment", {"ref": "WEB-1", "body": "a\x00b"}),
                ("get_card", {"ref": str(HUGE)}),
                ("list_cards", {"label": "x\x00"}),
            ):
                res = await c.call_tool(name, args)
                assert res.is_error, (name, res)
                texts.append(res.content[0].text)  # type: ignore[union-attr]

    before = log(store)
    anyio.run(main)
    assert log(store) == before
    codes = [t.split("error ", 1)[1].split(":")[0] for t in texts]  # "Error executing…: error X"
    assert codes == ["BAD_INPUT"] * 3 + ["NOT_FOUND", "BAD_INPUT"], texts
