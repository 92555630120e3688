"""``lb mcp`` in remote mode, as an orchestrated session launches it: a real ``lb mcp``
process with only ``LANEBOARD_URL`` (a real board socket) and a card-scoped credential
file serves the tools by sending each call to that board; a refusal is the board's line;
the environment the runtime gives it holds no database URL and no other token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from laneboard.agents.mcp_config import laneboard_server
from laneboard.agents.permissions import ToolPolicy, claude_args
from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import agent, human
from laneboard.store import open_store
from laneboard.supervisor import board_socket


class Client:
    """A minimal MCP client over a real ``lb mcp`` process's stdio."""

    def __init__(self, command: str, args: tuple[str, ...], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([command, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        self.next = 0
        init = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "test", "version": "1"}})  # fmt: skip
        assert init["serverInfo"]["name"] == "laneboard"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params})
        assert self.proc.stdout is not None
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == self.next, answer
        result: dict[str, Any] = answer["result"]
        return result

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        self.proc.stdout.close()
        assert code == 0


def test_lb_mcp_forwards_each_call_to_the_board_under_the_session_credential(
    tmp_path: Path,
) -> None:
    db = tmp_path / "board" / "board.db"
    db.parent.mkdir()
    url = f"sqlite:///{db}"
    board = Board(open_store(url))
    me = human("alice")
    board.add_project(me, "WEB", path=str(tmp_path))
    card = board.create_card(me, "WEB", "the card", acceptance_mode="off")
    claimed = board.claim(agent("worker"), card.ref)
    token, _ = Tokens(board.store).create(me, "worker", card_id=card.id, epoch=claimed.claim_epoch)
    tokfile = tmp_path / "token"
    tokfile.write_text(token)
    sock = board_socket.serve(board, str(tmp_path / "state"))
    session_env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "HOME": str(tmp_path),
        "LANEBOARD_URL": sock.url,
        "LANEBOARD_TOKEN_FILE": str(tokfile),
        "LANEBOARD_TOKEN": token,
        "LANEBOARD_CARD": card.ref,
        "LANEBOARD_DB": url,  # never passed on
        "LANEBOARD_DATABASE_URL": url,
        "OPENAI_API_KEY": "not for the server",
    }
    server = laneboard_server(session_env, ("get_card", "create_card"))
    assert server is not None
    assert server.command == sys.executable
    assert server.args[-4:] == ("--tool", "get_card", "--tool", "create_card")
    passed = {"PATH", "LANEBOARD_URL", "LANEBOARD_TOKEN_FILE", "LANEBOARD_CARD"}
    if os.environ.get("PYTHONPATH"):  # an empty value is not passed on
        passed.add("PYTHONPATH")
    assert set(server.env) == passed
    assert url not in json.dumps(server.codex_override()) + server.claude_document()
    client = Client(server.command, server.args, {**server.env, "HOME": str(tmp_path)})
    try:
        listed = client.request("tools/list", {})
        assert sorted(t["name"] for t in listed["tools"]) == ["create_card", "get_card"]
        other = client.call("whoami", {})  # served, but not to this session
        assert other["isError"] is True
        assert other["content"][0]["text"].startswith("error NOT_FOUND: there is no tool")
        got = client.call("get_card", {"ref": card.ref})
        assert not got.get("isError"), got
        assert got["structuredContent"]["ref"] == card.ref
        assert got["structuredContent"]["claim"]["holder"] == "worker"
        refused = client.call("create_card", {"project": "WEB", "title": "not mine"})
        assert refused["isError"] is True
        text = refused["content"][0]["text"]
        assert text.startswith("error FORBIDDEN: only a person may create cards"), text
        # it went to the board: the same refusal as any remote lb call, and nothing written
        with board.store.read() as tx:
            assert [c.title for c in tx.list_cards()] == ["the card"]
        client.close()
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()
        for pipe in (client.proc.stdin, client.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        board_socket.stop(board)
        board.store.close()


def test_no_server_without_a_board_address_or_a_credential() -> None:
    assert laneboard_server({"LANEBOARD_TOKEN": "lbt_x"}, ()) is None
    assert laneboard_server({"LANEBOARD_URL": "unix:/x.sock"}, ()) is None
    only_token = laneboard_server({"LANEBOARD_URL": "unix:/x.sock", "LANEBOARD_TOKEN": "t"}, ())
    assert only_token is not None and only_token.env["LANEBOARD_TOKEN"] == "t"


def test_each_kind_renders_the_server_with_its_tools_allowed() -> None:
    env = {"LANEBOARD_URL": "unix:/x.sock", "LANEBOARD_TOKEN_FILE": "/t/token", "PATH": "/bin"}
    server = laneboard_server(env, ("orchestrator_control", "ask"))
    assert server is not None
    (table,) = server.codex_override().values()
    assert table["command"] == sys.executable and table["args"] == list(server.args)
    assert table["env"] == {"LANEBOARD_URL": "unix:/x.sock", "LANEBOARD_TOKEN_FILE": "/t/token",
                            "PATH": "/bin"}  # fmt: skip
    assert table["enabled_tools"] == ["orchestrator_control", "ask"]
    entry = json.loads(server.claude_document())["mcpServers"]["laneboard"]
    assert entry["alwaysLoad"] is True and entry["env"] == table["env"]
    names = [server.claude_tool(t) for t in server.tools]
    assert names == ["mcp__laneboard__orchestrator_control", "mcp__laneboard__ask"]
    worker = claude_args(
        ToolPolicy("worker", edit=True, commands=("lb",)), euid=1000, mcp_tools=names
    )
    allowed = worker[worker.index("--allowedTools") + 1 : worker.index("--permission-mode")]
    assert set(names) <= set(allowed) and worker[-1] == "dontAsk"
    root = claude_args(
        ToolPolicy("worker", edit=True, commands=(), allow_all=True), euid=0, mcp_tools=names
    )
    assert set(names) <= set(
        root[root.index("--allowedTools") + 1 : root.index("--permission-mode")]
    )
