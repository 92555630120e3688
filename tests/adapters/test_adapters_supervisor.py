"""A card run through the real supervisor with each real agent CLI: the supervisor claims
it, the pool opens a Claude / Codex / Pi session through the adapter, and the model's
scripted tool call delivers the card with ``lb``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_kit import Kind
from model_server import ModelServer, Reply

from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.clock import SystemClock
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Supervisor
from laneboard.supervisor.runtime import Runtime


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait for real processes to reach a state (never used to let board time pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_card_runs_through_the_supervisor_on_each_kind(
    kind: Kind, server: ModelServer, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'board.db'}"
    store = open_store(url, SystemClock())
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB", path=str(repo))
    card = board.create_card(me, "WEB", "Deliver through the supervisor", acceptance_mode="off")
    deliver = (
        f"lb card report {card.ref} --body 'Delivered by {kind.name}' && "
        f"lb card move {card.ref} in_review"
    )
    server.add(
        Reply(tool_calls=[kind.bash(deliver)], expect=(card.ref,)),
        Reply(text=f"Delivered {card.ref}."),
    )
    for key, value in kind.env().items():
        monkeypatch.setenv(key, value)  # the pool hands its own environment to the agent
    cfg = SupervisorConfig(
        default_agent=kind.name,
        agent_kinds={kind.name: kind.config(tmp_path)},
        state_dir=str(tmp_path / "state"),
        event_poll_ms=50,
        debounce_ms=50,
    ).validate()
    rt = Runtime(store, cfg, "test-machine", LogFile(cfg.state_path("supervisor.log")))
    sup = Supervisor(rt)
    thread = threading.Thread(target=sup.run, daemon=True)
    sup.start()
    thread.start()
    try:
        wait_for(
            lambda: board.get(card.ref).status.value in ("in_review", "done"),
            120,
            f"{card.ref} delivered by {kind.name}",
        )
        with store.read() as tx:
            wait_for(lambda: bool(tx.all("SELECT outcome FROM turns")), 60, "the turn record")
    finally:
        sup.stop_event.set()
        thread.join(60)
    with store.read() as tx:
        turns = tx.all("SELECT outcome FROM turns")
        sessions = tx.all("SELECT * FROM sessions")
    store.close()
    # the pool may stop the turn itself once it sees the card delivered
    assert len(turns) == 1 and turns[0]["outcome"] in ("ok", "interrupted"), server.errors
    assert [r.body for r in board.reports(card.ref)] == [f"Delivered by {kind.name}"]
    assert len(sessions) == 1 and sessions[0]["native_id"]
    assert server.errors == []
    assert server.served >= 1
