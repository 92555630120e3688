"""MCP with the official SDK's client over both transports: stdio (``lb mcp``) and
streamable HTTP (``/mcp`` in ``lb serve``): list tools, call each, scoping enforced."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from tests.server.conftest import Live

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import human
from laneboard.ops.table import all_ops
from laneboard.store import open_store

TOOLS = {op.tool: op for op in all_ops() if op.tool}


@contextlib.asynccontextmanager
async def http_client(url: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers) as hc:
        transport = streamable_http_client(url + "/mcp", http_client=hc)
        async with Client(transport) as c:
            yield c


def stdio_client(db: str, token: str | None, env: dict[str, str]) -> Client:
    e = {k: v for k, v in env.items() if not k.startswith("LANEBOARD_TOKEN")}
    if token:
        e["LANEBOARD_TOKEN"] = token
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "laneboard.cli.main", "--db", db, "mcp"], env=e
    )
    return Client(params)


async def call(c: Client, name: str, **args: Any) -> Any:
    res = await c.call_tool(name, args)
    assert not res.is_error, res.content
    return res.structured_content


async def refused(c: Client, name: str, code: str, **args: Any) -> str:
    res = await c.call_tool(name, args)
    assert res.is_error
    text = res.content[0].text  # type: ignore[union-attr]
    assert code in text, text
    return str(text)


async def human_session(c: Client) -> dict[str, Any]:
    tools = await c.list_tools()
    assert {t.name for t in tools.tools} == set(TOOLS)
    for t in tools.tools:  # each tool is its operation: description, arguments, hints
        op = TOOLS[t.name]
        assert t.description and op.description in t.description
        assert t.annotations is not None
        assert t.annotations.read_only_hint is op.read_only
        assert t.annotations.destructive_hint is op.destructive
        props = t.input_schema["properties"]
        assert all(props[name].get("description") for name in props), t.name
        assert t.output_schema is not None and t.output_schema["type"] == "object"
    assert (await call(c, "whoami"))["kind"] == "human"
    a = await call(c, "create_card", project="WEB", title="alpha", acceptance=["works"])
    b = await call(c, "create_card", project="WEB", title="beta", idempotency_key="beta")
    again = await call(c, "create_card", project="WEB", title="beta", idempotency_key="beta")
    assert again["id"] == b["id"]
    listed = await call(c, "list_cards", project="WEB")
    assert [x["ref"] for x in listed["cards"]] == [a["ref"], b["ref"]]
    cands = await call(c, "candidates", include_unassigned=True)
    assert {x["ref"] for x in cands["candidates"]} == {a["ref"], b["ref"]}
    got = await call(c, "get_card", ref=a["ref"])
    assert got["acceptance"] == [{"id": "A1", "text": "works"}]
    note = await call(c, "comment", ref=a["ref"], body="a note")
    assert note["kind"] == "note" and note["author_kind"] == "human"
    await refused(c, "get_card", "NOT_FOUND", ref="WEB-99")
    await refused(c, "move_card", "ILLEGAL_TRANSITION", ref=a["ref"], to="done")
    moved = await call(c, "move_card", ref=b["ref"], to="backlog")
    assert moved["status"] == "backlog"
    return {"a": a, "b": b}


async def agent_session(c: Client, ref: str, other: str) -> None:
    """A worker scoped to ``ref``: reads and writes only that card."""
    me = await call(c, "whoami")
    assert me["kind"] == "agent"
    seen = await call(c, "list_cards")
    assert [x["ref"] for x in seen["cards"]] == [ref]
    await refused(c, "get_card", "FORBIDDEN", ref=other)
    await refused(c, "comment", "FORBIDDEN", ref=other, body="not mine")
    await refused(c, "create_card", "FORBIDDEN", project="WEB", title="x")
    await refused(c, "move_card", "FORBIDDEN", ref=other, to="backlog")
    await refused(c, "link_cards", "FORBIDDEN", ref=ref, depends_on=other)
    beat = await call(c, "heartbeat", ref=ref)
    assert beat["status"] == "in_progress"
    q = await call(c, "ask", ref=ref, text="which port?")
    timed = await call(c, "wait", ref=ref, question_id=q["question_id"], timeout_s=0.2)
    assert timed["outcome"] == "timeout"
    await refused(c, "wait", "BAD_INPUT", ref=ref, question_id=q["question_id"], timeout_s=9999)
    rep = await call(
        c, "report", ref=ref, body="draft", evidence=[{"command": "pytest", "exit_code": 0}]
    )
    assert rep["round"] == 1
    await refused(c, "report", "BAD_INPUT", ref=ref, body="x", evidence=[{"exit_code": 0}])
    done = await call(c, "deliver", ref=ref, body="final", commit="abc123")
    assert done["card"]["status"] == "in_review" and done["report"]["commit"] == "abc123"
    await refused(c, "move_card", "ACCEPTANCE_FORBIDDEN", ref=ref, to="done")  # unreviewed
    await refused(c, "deliver", "", ref=other, body="x")


def _setup(db: str) -> tuple[str, str, str]:
    store = open_store(db)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    store.close()
    return db, me.name, "WEB"


def _agent_token(db: str, ref: str, holder: str) -> str:
    store = open_store(db)
    board = Board(store)
    card = board.get(ref)
    board.move(human("alice"), ref, "todo") if card.status.value == "backlog" else None
    claimed = board.claim(human("alice"), ref, holder=holder)
    token, _ = Tokens(store).create(
        human("alice"), holder, "agent", card_id=claimed.id, epoch=claimed.claim_epoch
    )
    store.close()
    return token


def _answer(db: str, ref: str) -> None:
    store = open_store(db)
    board = Board(store)
    board.comment(human("alice"), ref, "8765", "answer")
    board.release(human("alice"), ref)  # the settle is the release
    store.close()


def test_mcp_over_streamable_http(live: Live) -> None:
    _setup(live.db)

    async def main() -> None:
        async with http_client(live.url) as c:  # loopback: the local human
            made = await human_session(c)
        token = _agent_token(live.db, made["a"]["ref"], "worker-a")
        async with http_client(live.url, token) as c:
            await agent_session(c, made["a"]["ref"], made["b"]["ref"])

    anyio.run(main)
    # a bad token, or no token from an untrusted address, never reaches the tools
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    bad = httpx.post(
        live.url + "/mcp", json=init, headers={**headers, "Authorization": "Bearer lbt_wrong"}
    )
    assert bad.status_code == 401 and bad.json()["code"] == "UNAUTHORIZED"
    remote = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    with remote:
        resp = remote.post(live.url + "/mcp", json=init, headers=headers)
    assert resp.status_code == 401


def test_mcp_over_stdio(tmp_path: Any, live: Live) -> None:
    db = f"sqlite:///{tmp_path / 'stdio.db'}"
    _setup(db)

    async def main() -> None:
        async with stdio_client(db, None, live.env) as c:
            made = await human_session(c)
        ref = made["a"]["ref"]
        token = _agent_token(db, ref, "worker-a")
        async with stdio_client(db, token, live.env) as c:
            await agent_session(c, ref, made["b"]["ref"])
        other = made["b"]["ref"]
        token_b = _agent_token(db, other, "worker-b")
        async with stdio_client(db, token_b, live.env) as c:
            q = await call(c, "ask", ref=other, text="one more?")
        _answer(db, other)
        async with stdio_client(db, token_b, live.env) as c:
            got = await call(c, "wait", ref=other, question_id=q["question_id"], timeout_s=5)
            assert got["outcome"] == "answered" and "8765" in got["answer"]

    anyio.run(main)
    store = open_store(db)
    events = [e.type for e in Board(store).events(0, limit=1000)]
    store.close()
    assert events.count("report.added") == 2
    assert json.dumps(events)
