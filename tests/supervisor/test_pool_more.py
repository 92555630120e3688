"""Session eviction at the cap and the pool verdicts."""

from __future__ import annotations

import os
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.domain.timecontract import TimeContract
from laneboard.store import open_store
from laneboard.supervisor import instances

from .helpers import RealNowClock, Running, config, settled, wait_for


def test_lru_eviction_keeps_the_session_id(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "V", path=str(proj))
    a = board.create_card(
        human(),
        "V",
        "comes back",
        acceptance_mode="off",
        meta={
            "script": [
                {"lb": "card release {card}", "attempt": 1},
                {"deliver": "back", "attempt": 2},
            ]
        },
    ).ref
    b = board.create_card(human(), "V", "plain", acceptance_mode="off").ref
    cfg = config(tmp_path, max_concurrency=1, pool_max_sessions=1)
    with Running(sqlite_store_url, cfg, clock):
        wait_for(
            lambda: (
                board.get(a).status.value in ("in_review", "done")
                and board.get(b).status.value in ("in_review", "done")
            ),
            what="both delivered",
        )
        wait_for(lambda: settled(store), what="turns recorded")
    log = Path(cfg.state_path("supervisor.log")).read_text()
    assert "evicted idle session (id kept)" in log
    with store.read() as tx:
        turns = tx.all(
            "SELECT c.ref, t.native_id FROM turns t JOIN cards c ON c.id = t.card_id ORDER BY t.id"
        )
    order = [t["ref"] for t in turns]
    assert order == [a, b, a]  # b's session evicted a's; a came back afterwards
    a_ids = [t["native_id"] for t in turns if t["ref"] == a]
    assert a_ids[0] == a_ids[1]  # resumed by its kept id in a new process
    store.close()


def test_pool_verdicts() -> None:
    t = TimeContract()
    now = 10_000_000
    me = os.getpid()

    def row(**kw: object) -> dict[str, object]:
        base = {
            "id": "m:1",
            "pid": me,
            "started_at": now - 100_000,
            "heartbeat_at": now - 1000,
            "tick_started_at": None,
            "state": "running",
        }
        base.update(kw)
        return base

    assert instances.verdict(None, now, t).state == "absent"
    assert instances.verdict(row(), now, t).state == "running"
    assert (
        instances.verdict(row(state="starting", started_at=now - 1000), now, t).state == "starting"
    )
    assert instances.verdict(row(heartbeat_at=now - 61_000), now, t).state == "unresponsive"
    assert (
        instances.verdict(row(tick_started_at=now - 2 * t.turn_timeout * 1000 - 1), now, t).state
        == "wedged"
    )
    assert instances.verdict(row(pid=2**22 + 12345), now, t).state == "absent"
    assert instances.verdict(row(state="stopped"), now, t).state == "stopped"


def _turn_rows(store) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    with store.read() as tx:
        return tx.all("SELECT native_id, prompt, outcome FROM turns ORDER BY id")


def test_lost_native_session_is_replayed(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "Y", path=str(proj))
    script = [
        {"run": "rm -f $LANEBOARD_AGENT_STATE/sessions/*.json", "attempt": 1},
        {"crash": 5, "attempt": 1},
        {"deliver": "after replay", "attempt": 2},
    ]
    ref = board.create_card(
        human(), "Y", "loses its session", acceptance_mode="off", meta={"script": script}
    ).ref
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value in ("in_review", "done"), what="delivery")
        wait_for(lambda: settled(store), what="turns recorded")
    turns = _turn_rows(store)
    assert [t["outcome"] for t in turns] == ["failed", "ok"]
    assert turns[0]["native_id"] != turns[1]["native_id"]  # a fresh native session
    assert "could not be restored" in str(turns[1]["prompt"])
    assert "> You are the" in str(turns[1]["prompt"])  # the transcript carries the handoff
    with store.read() as tx:
        rec = tx.one("SELECT resumed_by_replay FROM sessions")
    assert rec is not None and rec["resumed_by_replay"] == 1
    store.close()


def test_a_resume_that_fails_at_once_is_replayed_next(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "Z", path=str(proj))
    script = [
        {"crash": 5, "attempt": 1},
        {"crash": 6, "attempt": 2},
        {"deliver": "third time", "attempt": 3},
    ]
    ref = board.create_card(
        human(), "Z", "fails twice", acceptance_mode="off", meta={"script": script}
    ).ref
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value in ("in_review", "done"), what="delivery")
        wait_for(lambda: settled(store), what="turns recorded")
    turns = _turn_rows(store)
    assert [t["outcome"] for t in turns] == ["failed", "failed", "ok"]
    assert turns[0]["native_id"] == turns[1]["native_id"]  # the 2nd attempt resumed
    assert "continues" in str(turns[1]["prompt"])
    assert "could not be restored" in str(turns[2]["prompt"])  # the 3rd replayed
    store.close()
