"""Epics: roll-up, the empty-epic grace, notices, and a rejected epic's fix child."""

from __future__ import annotations

from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.store import Store

from .helpers import (
    ME,
    WORKER,
    delivered,
    event_count,
    outcomes,
    project,
    review_card,
    run,
    runtime,
    settle,
    verdict,
)

APPROVE = "VERDICT: APPROVE\nchildren verified\n$ lb card get E-1 --json"


def _alert_names(board: Board) -> list[str]:
    return [str(e.payload["alert"]) for e in board.events(limit=10_000) if e.type == "alert"]


def test_epic_rolls_up_and_is_reviewed_in_the_same_pass(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    epic = board.create_card(ME, key, "the epic", kind="epic")
    kids = [delivered(board, key, mode="off", parent=epic.ref) for _ in range(2)]
    canceled = board.create_card(ME, key, "dropped", parent=epic.ref)
    board.move(ME, canceled.ref, "canceled")
    out = run(rt)  # accepts the children, then acts on the new state in the same pass
    assert [a for a, _ in outcomes(out)] == [
        "auto_accept",
        "auto_accept",
        "rollup_epic",
        "dispatch",
    ]
    got = board.get(epic.ref)
    assert got.status.value == "in_review" and got.delivery_round == 1
    rep = board.reports(epic.ref)[0]
    assert rep.author == "Orchestrator" and all(k.ref in rep.body for k in kids)
    moves = [
        (e.payload["from"], e.payload["to"])
        for e in board.events(card=epic.ref, limit=100)
        if e.type == "card.moved"
    ]
    assert moves == [("todo", "in_progress"), ("in_progress", "in_review")]
    rev = review_card(board, got)
    verdict(board, rev, APPROVE)
    run(rt)
    assert board.get(epic.ref).status.value == "done"


def test_empty_epic_waits_out_its_grace_then_notifies_once(
    board: Board, store: Store, tmp_path: Path, clock: FakeClock
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    epic = board.create_card(ME, key, "empty", kind="epic")
    clock.advance(minutes=29)
    assert run(rt)["alerts"] == []
    clock.advance(minutes=2)
    out = run(rt)
    assert [a["alert"] for a in out["alerts"]] == ["empty_epic"]
    before = event_count(store)
    run(rt)
    assert event_count(store) == before
    assert board.get(epic.ref).status.value == "todo"


def test_epics_that_cannot_close_are_notified(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    all_canceled = board.create_card(ME, key, "nothing delivered", kind="epic")
    c = board.create_card(ME, key, "dropped", parent=all_canceled.ref)
    board.move(ME, c.ref, "canceled")
    unreported = board.create_card(ME, key, "no evidence", kind="epic")
    d = board.create_card(ME, key, "closed by hand", parent=unreported.ref, acceptance_mode="off")
    board.claim(WORKER, d.ref)
    board.move(WORKER, d.ref, "done")  # mode off: in_progress -> done with no report
    unfinished = board.create_card(ME, key, "in flight", kind="epic")
    board.create_card(ME, key, "still todo", parent=unfinished.ref)
    out = settle(rt)
    assert sorted(_alert_names(board)) == ["no_child_done", "no_delivery_evidence"]
    assert outcomes(out) == []
    for e in (all_canceled, unreported, unfinished):
        assert board.get(e.ref).status.value == "todo"


def test_rejected_epic_gets_a_fix_child_and_is_not_closed_again(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    epic = board.create_card(
        ME, key, "the epic", kind="epic", meta={"fix_child_meta": {"origin": "review"}}
    )
    delivered(board, key, mode="off", parent=epic.ref)
    settle(rt)
    assert board.get(epic.ref).status.value == "in_review"
    verdict(board, review_card(board, epic), "VERDICT: REJECT\n1. Add the missing docs page")
    out = run(rt)
    assert [a for a, _ in outcomes(out)] == ["reject"]
    got = board.get(epic.ref)
    assert got.status.value == "in_progress" and got.delivery_round == 2
    fixes = [c for c in board.list_cards(parent=epic.ref) if c.meta.get("fix_of") == epic.id]
    assert len(fixes) == 1
    fix = fixes[0]
    assert fix.status.value == "todo" and fix.idempotency_key == f"loop-fix|{epic.ref}|r1"
    assert [c.text for c in fix.acceptance] == ["Add the missing docs page"]
    assert fix.meta["origin"] == "review"
    created = next(
        e for e in board.events(limit=1000) if e.type == "card.created" and e.card_id == fix.id
    )
    reopened = next(
        e
        for e in board.events(card=epic.ref, limit=100)
        if e.type == "card.moved" and e.payload["to"] == "in_progress" and e.payload["round"] == 2
    )
    assert created.id < reopened.id  # the fix child exists before the epic reopens
    settle(rt)
    assert board.get(epic.ref).status.value == "in_progress"  # not re-closed
    # the fix is delivered and accepted: the epic returns to review on round 2
    board.edit(ME, fix.ref, acceptance_mode="off")
    board.claim(WORKER, fix.ref)
    board.report(WORKER, fix.ref, "docs added", evidence=[{"command": "make docs", "exit_code": 0}])
    board.move(WORKER, fix.ref, "in_review")
    settle(rt)
    got = board.get(epic.ref)
    assert got.status.value == "in_review" and got.delivery_round == 2
    rev2 = review_card(board, got, 2)
    verdict(board, rev2, APPROVE)
    run(rt)
    assert board.get(epic.ref).status.value == "done"
