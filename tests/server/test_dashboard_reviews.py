"""A reviewer's verdict and must-fix items are shown on the card they judge, per round."""

from __future__ import annotations

import html

from starlette.testclient import TestClient

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.domain.status import Status
from laneboard.store import Store
from laneboard.supervisor.workflow import review_key

ME = human("alice")


def review(board: Board, ref: str, round_: int, body: str | None) -> str:
    judged = board.get(ref)
    rev = board.create_card(ME, "WEB", f"review {ref} r{round_}", labels=["review"],
                            meta={"review_of": judged.id},
                            idempotency_key=review_key(ref, round_))  # fmt: skip
    if body is not None:
        held = board.claim(agent("reviewer-1"), rev.ref)
        board.report(agent("reviewer-1", held.id, held.claim_epoch), rev.ref, body)
    return rev.ref


def test_verdicts_and_must_fix_items_on_the_judged_card(client: TestClient, store: Store) -> None:
    board = Board(store)
    board.add_project(ME, "WEB")
    card = board.create_card(ME, "WEB", "the login page")
    page = client.get(f"/cards/{card.ref}").text
    assert 'id="reviews"' not in page  # no review, no section

    rev = review(
        board,
        card.ref,
        1,
        "VERDICT: REJECT\nTwo problems.\n1. the test <asserts> nothing\n2. rename x",
    )
    page = html.unescape(client.get(f"/cards/{card.ref}").text)
    section = page.split('id="reviews"')[1].split("</section>")[0]
    assert (
        "round 1" in section and rev in section and "REJECT" in section and "reviewer-1" in section
    )
    assert "<li>the test <asserts> nothing</li>" in section and "<li>rename x</li>" in section
    assert "&lt;asserts&gt;" in client.get(f"/cards/{card.ref}").text  # escaped, not markup

    with store.write() as tx:  # the second round (as the workflow sends a card back)
        board.move_in(tx, ME, tx.card(card.id), Status.IN_PROGRESS, new_round=True)
    review(board, card.ref, 2, None)
    page = html.unescape(client.get(f"/cards/{card.ref}").text)
    section = page.split('id="reviews"')[1].split("</section>")[0]
    assert section.index("round 2") < section.index("round 1")  # newest first
    assert "no verdict yet" in section

    odd = board.create_card(ME, "WEB", "another")
    review(board, odd.ref, 1, "looks fine to me")
    page = html.unescape(client.get(f"/cards/{odd.ref}").text)
    assert "verdict_unreadable" in page.split('id="reviews"')[1]
