"""``links.card_open`` follows the dependant's status (migration 210), on both backends.

``claim --next`` asks from it whether any ``todo`` card is waited on by an open card, so
it must be exact through every way a card opens and closes: a link made to an open or a
closed card, a close (done, canceled), a move between open statuses, and a board made
before the column existed.
"""

from __future__ import annotations

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import Card, agent, human, system
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store

ME = human("alice")
WORKER = agent("w1")
ACCEPTER = system("accepter")


def _open_flags(store: Store) -> dict[tuple[int, int], int]:
    with store.read() as tx:
        rows = tx.all("SELECT card_id, depends_on, card_open FROM links")
    return {(int(r["card_id"]), int(r["depends_on"])): int(r["card_open"]) for r in rows}


def _finish(board: Board, card: Card) -> None:
    board.claim(WORKER, card.ref)
    board.report(WORKER, card.ref, "done")
    board.move(WORKER, card.ref, "in_review")
    board.move(ACCEPTER, card.ref, "done")


def _project(board: Board) -> None:
    board.add_project(ME, "P")


def test_a_link_is_open_while_its_card_is(store: Store) -> None:
    board = Board(store)
    _project(board)
    base = board.create_card(ME, "P", "base", acceptance_mode="off")
    waiter = board.create_card(ME, "P", "waits on base", status="backlog")
    board.link(ME, waiter.ref, base.ref)
    assert _open_flags(store) == {(waiter.id, base.id): 1}
    board.move(ME, waiter.ref, "todo")  # open to open: unchanged
    assert _open_flags(store) == {(waiter.id, base.id): 1}
    board.move(ME, waiter.ref, "canceled")
    assert _open_flags(store) == {(waiter.id, base.id): 0}


def test_done_closes_a_link_and_a_link_to_a_closed_card_starts_closed(store: Store) -> None:
    board = Board(store)
    _project(board)
    first = board.create_card(ME, "P", "first", acceptance_mode="off")
    second = board.create_card(ME, "P", "second", acceptance_mode="off")
    third = board.create_card(ME, "P", "third", acceptance_mode="off")
    board.link(ME, second.ref, first.ref)
    _finish(board, first)
    _finish(board, second)
    assert _open_flags(store) == {(second.id, first.id): 0}
    try:  # whether a closed card may take a new dependency is the board's rule to say
        board.link(ME, second.ref, third.ref)
    except LaneboardError:
        return
    assert _open_flags(store)[(second.id, third.id)] == 0


def test_claim_next_weighs_fan_out_only_while_the_waiting_card_is_open(store: Store) -> None:
    board = Board(store)
    _project(board)
    plain = board.create_card(ME, "P", "plain, older")
    waited = board.create_card(ME, "P", "waited on")
    waiter = board.create_card(ME, "P", "waiter", status="backlog")
    board.link(ME, waiter.ref, waited.ref)
    # fan-out makes the waited-on card heavier than the older plain one
    assert board.claim_next(ME, include_unassigned=True).id == waited.id
    board.release(ME, waited.ref)
    board.move(ME, waiter.ref, "canceled")
    # nobody waits any more: age alone orders them again
    assert board.claim_next(ME, include_unassigned=True).id == plain.id


DDL = (
    "DROP TRIGGER links_card_open",  # PostgreSQL: ON cards is added below
    "DROP INDEX links_card_open",
    "ALTER TABLE links DROP COLUMN card_open",
    "DELETE FROM schema_migrations WHERE version = 210",
)


def test_a_board_made_before_the_column_gets_it_exact(store_url: str) -> None:
    store = open_store(store_url, FakeClock())
    board = Board(store)
    _project(board)
    base = board.create_card(ME, "P", "base", acceptance_mode="off")
    closed = board.create_card(ME, "P", "closed waiter", acceptance_mode="off")
    still = board.create_card(ME, "P", "open waiter", status="backlog")
    board.link(ME, closed.ref, base.ref)
    board.link(ME, still.ref, base.ref)
    _finish(board, base)
    _finish(board, closed)
    with store.write() as tx:
        for sql in DDL:
            on = " ON cards" if store.dialect == "postgresql" and "TRIGGER" in sql else ""
            tx.run(sql + on)
    store.close()
    store = open_store(store_url, FakeClock())
    try:
        assert 210 in store.applied_versions()
        assert _open_flags(store) == {(closed.id, base.id): 0, (still.id, base.id): 1}
        Board(store).move(ME, still.ref, "canceled")  # and the trigger is back
        assert _open_flags(store) == {(closed.id, base.id): 0, (still.id, base.id): 0}
    finally:
        store.close()
