"""Run transitions on every surface, on both backends: the whole table (every action from
every state) through REST, the CLI and MCP; idempotency over HTTP; the status snapshot."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from tests.ops.test_surfaces import cli_env, mcp_session
from tests.ops.walk import outcome_of_cli, outcome_of_rest, outcome_of_tool
from tests.runs import run_events

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.domain.runs import TRANSITIONS, RunStatus
from laneboard.ops.table import by_name
from laneboard.server.app import create_app
from laneboard.store import Store, open_store

ME = human("alice")
Call = Callable[[str, int, str], tuple[str, dict[str, Any] | None]]  # -> outcome, result
CASES = [(action, state) for action in TRANSITIONS for state in RunStatus]


def runs_in_every_state(store: Store) -> dict[tuple[str, str], int]:
    """One run per (action, state), its status set directly in the store."""
    board = Board(store)
    board.add_project(ME, "WEB")
    ids = {}
    for action, state in CASES:
        rid = int(board.create_run(ME, "WEB", f"{action} from {state.value}")["id"])
        with store.write() as tx:
            assert tx.update_run(rid, {"status": state.value}) is not None
        ids[(action, state.value)] = rid
    return ids


def check_table(store: Store, ids: dict[tuple[str, str], int], call: Call) -> None:
    board = Board(store)
    wrong = []
    for action, state in CASES:
        rid = ids[(action, state.value)]
        allowed, target = TRANSITIONS[action]
        outcome, result = call(action, rid, f"key-{rid}")
        expected = "ok" if state in allowed else "ILLEGAL_RUN_TRANSITION"
        now = board.run(rid)["status"]
        if outcome != expected:
            wrong.append((action, state.value, outcome))
        elif outcome == "ok":
            assert result is not None and result["status"] == target.value == now
            assert result["from"] == state.value
        else:
            assert now == state.value  # refused: nothing changed
    assert wrong == []


def test_the_table_through_rest(store_url: str) -> None:
    store = open_store(store_url)
    try:
        ids = runs_in_every_state(store)
        app = create_app(store, local_user="alice", with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)) as c:

            def call(action: str, rid: int, key: str) -> tuple[str, dict[str, Any] | None]:
                resp = c.post(f"/api/v1/runs/{rid}/{action}", json={},
                              headers={"Idempotency-Key": key})  # fmt: skip
                if resp.status_code == 409:
                    assert resp.json()["code"] == "ILLEGAL_RUN_TRANSITION"
                return outcome_of_rest(resp), resp.json() if resp.status_code == 200 else None

            check_table(store, ids, call)
    finally:
        store.close()


def test_the_table_through_the_cli(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    try:
        ids = runs_in_every_state(store)
        env = cli_env(store_url, tmp_path, LANEBOARD_USER="alice")

        def call(action: str, rid: int, key: str) -> tuple[str, dict[str, Any] | None]:
            got = subprocess.run(
                [sys.executable, "-m", "laneboard.cli.main", "run", action, str(rid),
                 "--key", key, "--json"],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            if got.returncode:
                assert got.returncode == 1 and got.stderr.startswith("error ILLEGAL_RUN_TRANSITION")
            return outcome_of_cli(got.returncode, got.stdout), (
                json.loads(got.stdout) if got.returncode == 0 else None
            )

        check_table(store, ids, call)
    finally:
        store.close()


def test_the_table_through_mcp(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    try:
        ids = runs_in_every_state(store)
        env = cli_env(store_url, tmp_path, LANEBOARD_USER="alice")
        with mcp_session(store_url, env) as (portal, tools):

            def call(action: str, rid: int, key: str) -> tuple[str, dict[str, Any] | None]:
                tool = by_name()[f"run.{action}"].tool
                assert tool == f"{action.replace('-', '_')}_run"
                res = portal.call(tools.call_tool, tool, {"id": rid, "idempotency_key": key})
                return outcome_of_tool(res), None if res.is_error else res.structured_content

            check_table(store, ids, call)
    finally:
        store.close()


@pytest.fixture
def client(store: Store) -> Any:
    Board(store).add_project(ME, "WEB")
    app = create_app(store, local_user="alice", with_mcp=False)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)) as c:
        yield c


def test_idempotency_over_http(client: TestClient, store: Store) -> None:
    rid = client.post("/api/v1/runs", json={"project": "WEB", "goal": "g"}).json()["id"]
    url = f"/api/v1/runs/{rid}/pause"
    first = client.post(url, json={"reason": "lunch"}, headers={"Idempotency-Key": "p1"})
    again = client.post(url, json={"reason": "lunch"}, headers={"Idempotency-Key": "p1"})
    assert first.status_code == again.status_code == 200
    assert again.json() == {**first.json(), "replayed": True}
    other = client.post(url, json={"reason": "dinner"}, headers={"Idempotency-Key": "p1"})
    assert other.status_code == 409 and other.json()["code"] == "IDEMPOTENCY_CONFLICT"
    none = client.post(f"/api/v1/runs/{rid}/resume", json={})
    assert none.status_code == 422 and none.json()["code"] == "BAD_INPUT"
    assert "Idempotency-Key" in none.json()["fix"]
    unknown = client.post(f"/api/v1/runs/{rid}/restart", json={}, headers={"Idempotency-Key": "x"})
    assert unknown.status_code in (404, 405)
    assert [e["type"] for e in run_events(store, rid)] == ["run.created", "run.pause"]


def test_the_status_snapshot(client: TestClient, store: Store) -> None:
    assert client.get("/api/v1/projects/WEB/runs/status").status_code == 404
    run = client.post("/api/v1/runs", json={"project": "WEB", "goal": "g"}).json()
    board = Board(store)
    cards = [board.create_card(ME, "WEB", f"c{i}", run_id=run["id"]) for i in range(4)]
    board.create_card(ME, "WEB", "outside")  # the project's other cards never count
    board.move(ME, cards[0].ref, "blocked", reason="credentials")
    human_review = board.create_card(ME, "WEB", "needs a person", run_id=run["id"],
                                     acceptance_mode="human")  # fmt: skip
    for c in (cards[1], human_review):
        board.claim(ME, c.ref)
        board.report(ME, c.ref, "delivered")
        board.move(ME, c.ref, "in_review")  # delivered (no gates on this board)
    board.claim(ME, cards[2].ref)
    with store.write() as tx:
        tx.insert_queue_row("work", cards[2].id, "worker", cards[2].project_id, "m", "/", 1, 1, {})
    got = client.get("/api/v1/projects/WEB/runs/status")
    assert got.status_code == 200
    snap = got.json()
    assert snap["run"]["id"] == run["id"] and snap["state"] == "active"
    assert (snap["active_agents"], snap["queued_dispatches"], snap["open_deliveries"],
            snap["pending_approvals"], snap["blockers"]) == (0, 1, 2, 1, 1)  # fmt: skip
    assert [b["ref"] for b in snap["blocked_cards"]] == [cards[0].ref]
    with store.write() as tx:
        tx.run("UPDATE queue SET state = 'processing'")
    assert client.get("/api/v1/projects/WEB/runs/status").json()["active_agents"] == 1
    by_id = client.get("/api/v1/projects/WEB/runs/status", params={"run": run["id"]}).json()
    assert by_id["run"]["id"] == run["id"]
