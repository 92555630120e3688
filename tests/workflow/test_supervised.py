"""End to end: the real supervisor, scripted workers and scripted reviewers as real
processes. A card's ``meta.review_script`` is copied onto its review card as the
reviewer's script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.supervisor.helpers import RealNowClock, Running, config, wait_for

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import human
from laneboard.store import Store, open_store
from laneboard.supervisor import records, sandboxing

ME = human("alice")
APPROVE = {"verdict": "APPROVE", "body": "checked\n$ make test", "evidence": ["0:true"]}


def reject(*items: str) -> dict[str, Any]:
    body = "not yet\n" + "\n".join(f"{i}. {t}" for i, t in enumerate(items, 1))
    return {"verdict": "REJECT", "body": body}


def _setup(url: str, tmp: Path) -> tuple[Store, Board, Path, RealNowClock]:
    clock = RealNowClock()
    store = open_store(url, clock)
    board = Board(store)
    proj = tmp / "proj"
    proj.mkdir()
    board.add_project(ME, "W", path=str(proj))
    return store, board, proj, clock


def _turns(store: Store, card_id: int) -> list[dict[str, Any]]:
    with store.read() as tx:
        return [
            dict(r)
            for r in tx.all(
                "SELECT native_id, prompt, round, outcome FROM turns WHERE card_id = ? ORDER BY id",
                (card_id,),
            )
        ]


def _reviews(board: Board, card_id: int) -> list[Any]:
    return [
        c for c in board.list_cards(label="review", limit=500) if c.meta["review_of"] == card_id
    ]


def test_approve_on_the_first_round_reaches_done(store_url: str, tmp_path: Path) -> None:
    store, board, proj, clock = _setup(store_url, tmp_path)
    card = board.create_card(
        ME,
        "W",
        "approve me",
        assignee="worker",
        meta={
            "script": [{"deliver": "done", "evidence": ["0:true"]}],
            "review_script": [{"run": "pwd > reviewed-in.txt"}, APPROVE],
        },
    )
    with Running(store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value == "done", what="acceptance")
    got = board.get(card.ref)
    assert got.meta["accepted_by"] == "loop-review" and got.meta["review_verdict_round"] == 1
    (rev,) = _reviews(board, card.id)
    assert rev.status.value == "done"
    assert (proj / "reviewed-in.txt").read_text().strip() == str(proj)  # the original's lane
    with store.read() as tx:
        dirs = {r.card_id: r.target_dir for r in records.queue_rows(tx, states=("done",))}
    assert dirs == {card.id: str(proj), rev.id: str(proj)}
    store.close()


def test_reject_resumes_the_same_worker_session_with_the_must_fix_items(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    store, board, _, clock = _setup(sqlite_store_url, tmp_path)
    card = board.create_card(
        ME,
        "W",
        "needs a second round",
        assignee="worker",
        meta={
            "script": {"r1": [{"deliver": "first try"}], "r2": [{"deliver": "second try"}]},
            "review_script": {
                "r1": [reject("Handle empty input", "Add a unicode test")],
                "r2": [APPROVE],
            },
        },
    )
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value == "done", what="second round approved")
    got = board.get(card.ref)
    assert got.delivery_round == 2 and got.meta["rework_round"] == 1
    assert [c.text for c in got.acceptance] == ["Handle empty input", "Add a unicode test"]
    turns = _turns(store, card.id)
    assert [t["round"] for t in turns] == [1, 2]
    assert turns[0]["native_id"] == turns[1]["native_id"]  # the same worker session
    second = turns[1]["prompt"]
    assert "continues (round 2)" in second and "rejected round 1" in second
    assert "R1.1: Handle empty input" in second and "R1.2: Add a unicode test" in second
    assert [r.status.value for r in _reviews(board, card.id)] == ["done", "done"]
    store.close()


def test_five_rejections_hold_the_card_with_a_question(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    store, board, _, clock = _setup(sqlite_store_url, tmp_path)
    card = board.create_card(
        ME,
        "W",
        "never good enough",
        assignee="worker",
        meta={"script": [{"deliver": "attempt {round}"}], "review_script": [reject("still wrong")]},
    )
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value == "blocked", timeout=180, what="hold")
    got = board.get(card.ref)
    assert got.delivery_round == 5 and got.meta["rework_round"] == 5
    assert got.meta["hold_cycle"] == "rework" and got.meta["hold_bound"] == 4
    questions = [c for c in board.comments(card.ref) if c.kind.value == "question"]
    assert len(questions) == 1 and "rejected it 5 times" in questions[0].body
    reviews = _reviews(board, card.id)
    assert sorted(r.meta["review_round"] for r in reviews) == [1, 2, 3, 4, 5]
    assert {r.status.value for r in reviews} == {"done"}
    assert len({t["native_id"] for t in _turns(store, card.id)}) == 1
    store.close()


def _lb_as(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env["LANEBOARD_TOKEN"] = token
    env["LANEBOARD_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_human_card_stops_after_approve_until_a_person_closes_it(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    store, board, _, clock = _setup(sqlite_store_url, tmp_path)
    card = board.create_card(
        ME,
        "W",
        "a person decides",
        assignee="worker",
        acceptance_mode="human",
        meta={"script": [{"deliver": "done"}], "review_script": [APPROVE]},
    )
    cfg = config(tmp_path)
    with Running(sqlite_store_url, cfg, clock):
        wait_for(
            lambda: board.get(card.ref).meta.get("review_verdict") == "APPROVE",
            what="verdict recorded",
        )
        (rev,) = _reviews(board, card.id)
        wait_for(lambda: board.get(rev.ref).status.value == "done", what="review closed")
        # the worker's own credential; the review card is done, so its session files are
        # pruned: the reviewer's credential is minted as the pool mints it
        worker_token = Path(sandboxing.token_path(cfg.state_path(), card.ref)).read_text()
        done = board.get(rev.ref)
        reviewer_token, _ = Tokens(store).create(
            ME, "reviewer", "agent", card_id=done.id, epoch=done.claim_epoch
        )
        move = ("card", "move", card.ref, "done")
        worker = _lb_as(sqlite_store_url, worker_token.strip(), *move)
        reviewer = _lb_as(sqlite_store_url, reviewer_token, *move)
    forbidden = (
        f"error ACCEPTANCE_FORBIDDEN: {card.ref} has acceptance mode human: only a person may "
        "close it"
    )
    assert worker.returncode == 1 and worker.stderr.startswith(forbidden), worker.stderr
    assert reviewer.returncode == 1 and reviewer.stderr.startswith(forbidden), reviewer.stderr
    assert board.get(card.ref).status.value == "in_review"
    assert len(_reviews(board, card.id)) == 1
    assert board.move(ME, card.ref, "done").status.value == "done"
    store.close()


def test_unreadable_verdicts_reopen_the_review_twice_then_hold(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    store, board, _, clock = _setup(sqlite_store_url, tmp_path)
    garbage = [{"report": "I think it is fine"}, {"lb": "card move {card} in_review"}]
    card = board.create_card(
        ME,
        "W",
        "unreadable reviewer",
        assignee="worker",
        meta={"script": [{"deliver": "done"}], "review_script": garbage},
    )
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value == "blocked", timeout=120, what="hold")
    got = board.get(card.ref)
    assert got.meta["hold_cycle"] == "review verdict"
    (rev,) = _reviews(board, card.id)
    assert rev.status.value == "canceled" and rev.meta["review_retry"] == 2
    turns = _turns(store, rev.id)
    assert len(turns) == 3 and len({t["native_id"] for t in turns}) == 1
    assert "could not be used" in turns[1]["prompt"]
    store.close()


def test_rejected_epic_gets_a_fix_child_and_closes_after_it(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    store, board, _, clock = _setup(sqlite_store_url, tmp_path)
    epic = board.create_card(
        ME,
        "W",
        "the epic",
        kind="epic",
        meta={
            "review_script": {"r1": [reject("Add the docs page")], "r2": [APPROVE]},
            "fix_child_meta": {
                "script": [{"write": "docs.md", "content": "docs"}, {"deliver": "docs added"}],
                "review_script": [APPROVE],
            },
        },
    )
    child = board.create_card(
        ME,
        "W",
        "child",
        parent=epic.ref,
        acceptance_mode="off",
        meta={"script": [{"deliver": "child done"}]},
    )
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(epic.ref).status.value == "done", timeout=120, what="epic done")
    got = board.get(epic.ref)
    assert got.delivery_round == 2
    kids = board.list_cards(parent=epic.ref)
    fix = [k for k in kids if k.meta.get("fix_of") == epic.id]
    assert len(fix) == 1 and fix[0].status.value == "done"
    assert board.get(child.ref).status.value == "done"
    assert sorted(r.meta["review_round"] for r in _reviews(board, epic.id)) == [1, 2]
    assert _turns(store, epic.id) == []  # an epic is never handed to an agent
    store.close()
