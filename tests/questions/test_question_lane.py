"""End to end: a scripted worker asks, the scripted director answers or escalates."""

from __future__ import annotations

import json
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.supervisor import records

from .helpers import RealNowClock, Running, config, wait_for


def _outcomes(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_director_answers_and_the_same_turn_delivers(store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    record = proj / "wait.jsonl"  # the session's own directory
    store = open_store(store_url, clock)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "Q", path=str(proj))
    card = board.create_card(
        me,
        "Q",
        "pick a colour",
        acceptance_mode="off",
        meta={
            "script": [
                {
                    "ask": "Q1: blue or green? I recommend blue.",
                    "timeout": 60,
                    "record": str(record),
                },
                {"write": "colour.txt", "content": "blue\n"},
                {"deliver": "painted it blue"},
            ],
            "director_script": [
                {"comment": "Use blue, as recommended.", "kind": "note"},
                {"lb": "card release {card}"},
            ],
        },
    )
    with Running(store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value in ("in_review", "done"), what="delivery")
    got = _outcomes(record)
    assert [o["outcome"] for o in got] == ["answered"]
    assert "Use blue, as recommended." in str(got[0]["answer"])
    assert len(str(got[0]["answer"])) <= 2000
    final = board.get(card.ref)
    assert final.claim_epoch == 2, "the worker re-claimed the released card itself"
    comments = board.comments(card.ref)
    q = next(c for c in comments if c.kind.value == "question")
    note = next(c for c in comments if c.kind.value == "note" and c.author == "Director")
    assert q.author == "worker" and q.author_kind.value == "agent"
    assert note.author_kind.value == "agent"
    assert (proj / "colour.txt").read_text() == "blue\n"
    with store.read() as tx:
        rows = records.queue_rows(tx, states=("done", "failed"), card_id=final.id)
        turns = records.turns_for_card(tx, final.id)
    kinds = sorted((r.kind, r.state) for r in rows)
    assert kinds == [("handoff", "done"), ("question", "done")]
    worker_turns = [
        t for t in turns if t["agent_kind"] == "scripted" and "Director row" not in t["prompt"]
    ]
    assert len(worker_turns) == 1, "one worker turn asked, waited, re-claimed and delivered"
    store.close()


def test_escalation_parks_then_the_same_session_resumes_with_the_answer(
    store_url: str, tmp_path: Path
) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    record = proj / "wait.jsonl"  # the session's own directory
    store = open_store(store_url, clock)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "Q", path=str(proj))
    card = board.create_card(
        me,
        "Q",
        "deploy it",
        acceptance_mode="off",
        meta={
            "script": [
                {"ask": "Q1: deploy to production now?", "turn": 1, "record": str(record)},
                {"write": "deployed.txt", "content": "yes\n", "turn": 2},
                {"deliver": "deployed after the answer", "turn": 2},
            ],
            "director_script": [
                {
                    "lb": [
                        "card", "move", "{card}", "awaiting", "--reason", "E2",
                        "--question", "Production deploys need a person: deploy now?",
                    ]
                }
            ],
        },
    )  # fmt: skip
    with Running(store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value == "awaiting", what="escalation")
        wait_for(lambda: len(_outcomes(record)) == 1, what="the wait to return")
        assert _outcomes(record)[0]["outcome"] == "escalated"

        def parked() -> bool:
            with store.read() as tx:
                return not records.queue_rows(tx, card_id=card.id)

        wait_for(parked, what="the worker to park")
        board.comment(me, card.ref, "Yes: deploy now, the window is open.")
        wait_for(lambda: board.get(card.ref).status.value in ("in_review", "done"), what="delivery")
    assert (proj / "deployed.txt").read_text() == "yes\n"
    with store.read() as tx:
        turns = [
            t for t in records.turns_for_card(tx, card.id) if "Director row" not in t["prompt"]
        ]
        handoffs = records.queue_rows(tx, states=("done",), card_id=card.id)
    assert len(turns) == 2
    assert turns[0]["native_id"] == turns[1]["native_id"], "the same native session resumed"
    assert "Yes: deploy now, the window is open." in turns[1]["prompt"]
    assert "a human answered" in turns[1]["prompt"]
    assert [r.kind for r in handoffs].count("handoff") == 2
    store.close()
