"""Board set-ups for the workflow pass, without the pool (the pass is run directly)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.model import Actor, Card, agent, human
from laneboard.store import Store
from laneboard.supervisor import workflow
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime

ME = human("alice")
WORKER = agent("worker")
REVIEWER = agent("reviewer")


def runtime(store: Store, tmp: Path, **kw: Any) -> Runtime:
    cfg = replace(SupervisorConfig(default_agent="scripted", state_dir=str(tmp / "state")), **kw)
    cfg.validate()
    return Runtime(store, cfg, "test-machine", LogFile(str(tmp / "state" / "sup.log")))


def project(board: Board, tmp: Path, key: str = "P") -> str:
    path = tmp / f"proj-{key}"
    path.mkdir(exist_ok=True)
    board.add_project(ME, key, path=str(path))
    return key


def delivered(board: Board, key: str, mode: str = "auto", **kw: Any) -> Card:
    """A card claimed by the worker, reported and moved to in_review."""
    c = board.create_card(ME, key, kw.pop("title", "a task"), acceptance_mode=mode, **kw)
    board.claim(WORKER, c.ref)
    board.report(WORKER, c.ref, "did it", evidence=[{"command": "make", "exit_code": 0}])
    return board.move(WORKER, c.ref, "in_review")


def redeliver(board: Board, ref: str) -> Card:
    board.claim(WORKER, ref)
    board.report(WORKER, ref, "fixed it", evidence=[{"command": "make", "exit_code": 0}])
    return board.move(WORKER, ref, "in_review")


def review_card(board: Board, original: Card, round_: int | None = None) -> Card:
    rnd = original.delivery_round if round_ is None else round_
    found = [
        c
        for c in board.list_cards(label="review", limit=1000)
        if c.meta.get("review_of") == original.id and c.meta.get("review_round") == rnd
    ]
    live = [c for c in found if not c.terminal]
    if live:  # closed ones may sit beside it (a canceled review is recreated)
        assert len(live) == 1, f"{len(live)} open review cards for {original.ref} r{rnd}"
        return live[0]
    assert len(found) == 1, f"{len(found)} review cards for {original.ref} r{rnd}"
    return found[0]


def verdict(board: Board, rev: Card, body: str, who: Actor = REVIEWER, **kw: Any) -> Card:
    """The reviewer claims its review card, reports and moves it to in_review."""
    if board.get(rev.ref).status.value == "todo":
        board.claim(REVIEWER, rev.ref)
    board.report(who, rev.ref, body, **kw)
    return board.move(REVIEWER, rev.ref, "in_review")


def run(rt: Runtime, **kw: Any) -> dict[str, Any]:
    return workflow.run(rt, **kw)


def outcomes(out: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["action"], r["outcome"]) for r in out.get("results", []) if "action" in r]


def event_count(store: Store) -> int:
    with store.read() as tx:
        return int(tx.scalar("SELECT count(*) AS n FROM events"))


def settle(rt: Runtime, rounds: int = 5) -> dict[str, Any]:
    """Run passes until one writes nothing; returns that last pass."""
    for _ in range(rounds):
        before = event_count(rt.store)
        out = run(rt)
        if event_count(rt.store) == before:
            return out
    raise AssertionError("the workflow pass never settled")
