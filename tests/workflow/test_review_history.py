"""A board's closed review cards are history, not work. The workflow pass finds review
cards by their keys and reads at most ``board_limit`` cards, oldest first: it relies on a
card giving its key up when it closes (``released_key``). If closed review cards kept
their keys, a board that had reviewed ``board_limit`` deliveries (500 by default) would
fill the pass with them, cut it short, and accept, review or close nothing again."""

from __future__ import annotations

from pathlib import Path

from laneboard.board.service import Board
from laneboard.store import Store
from laneboard.supervisor.workflow import REVIEW_KEY_RANGE

from .helpers import delivered, outcomes, project, review_card, run, runtime, settle, verdict

APPROVE = "VERDICT: APPROVE\nEverything checked.\n$ make test"
LIMIT = 4


def reviewed(board: Board, store: Store, tmp_path: Path, key: str, n: int) -> None:
    """``n`` deliveries reviewed, approved and closed: ``n`` closed review cards."""
    rt = runtime(store, tmp_path, board_limit=LIMIT)
    for _ in range(n):
        card = delivered(board, key)
        run(rt)  # its review card
        verdict(board, review_card(board, card), APPROVE)
        settle(rt)
        assert board.get(card.ref).status.value == "done"
    assert len(board.list_cards(label="review", limit=100)) == n


def test_closed_review_cards_do_not_fill_the_pass(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    reviewed(board, store, tmp_path, key, LIMIT + 2)
    rt = runtime(store, tmp_path, board_limit=LIMIT)
    off = delivered(board, key, mode="off")
    auto = delivered(board, key)
    out = run(rt)
    assert out["truncated"] is False
    assert ("auto_accept", "accepted") in outcomes(out)
    assert board.get(off.ref).status.value == "done"
    review_card(board, auto)  # its review was dispatched: nothing held it back
    with store.read() as tx:
        work = tx.review_work_cards(REVIEW_KEY_RANGE, 100)
    # the open review card and the delivery it reviews; no closed review card
    assert {c.ref for c in work} == {auto.ref, review_card(board, auto).ref}


def test_a_board_of_closed_reviews_has_no_review_work(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    reviewed(board, store, tmp_path, key, 2)
    with store.read() as tx:
        assert not tx.has_review_work(REVIEW_KEY_RANGE)  # the pass reads nothing more
