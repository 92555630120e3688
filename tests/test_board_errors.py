"""Refusals change nothing: every forbidden move, and every error code of the services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.domain.status import TRANSITIONS, Status
from laneboard.errors import LaneboardError
from laneboard.store import Store

ME = human("alice")
WORKER = agent("worker")
TABLES = ("projects", "cards", "links", "comments", "reports", "events", "idempotency", "tokens")


def snapshot(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every row of the board's tables, in a stable order."""
    out = {}
    with store.read() as tx:
        for t in TABLES:
            rows = tx.all(f"SELECT * FROM {t}")
            out[t] = sorted((dict(r) for r in rows), key=lambda r: repr(sorted(r.items())))
    return out


def bring_to(board: Board, status: Status, title: str) -> str:
    """Create a real card and move it into ``status`` through legal steps."""
    mode = "off" if status is Status.DONE else "auto"
    start = "backlog" if status is Status.BACKLOG else "todo"
    ref = board.create_card(ME, "WEB", title, acceptance_mode=mode, status=start).ref
    if status in (Status.BACKLOG, Status.TODO):
        return ref
    if status in (Status.BLOCKED, Status.CANCELED):
        board.move(ME, ref, status.value)
        return ref
    board.claim(WORKER, ref)
    if status is Status.AWAITING:
        board.move(WORKER, ref, "awaiting", reason="E1", question="which way?")
    elif status is Status.IN_REVIEW:
        board.report(WORKER, ref, "delivered")
        board.move(WORKER, ref, "in_review")
    elif status is Status.DONE:
        board.move(WORKER, ref, "done")
    return ref


@pytest.mark.parametrize("src", list(Status), ids=lambda s: s.value)
def test_every_forbidden_move_is_refused_and_changes_nothing(board: Board, src: Status) -> None:
    board.add_project(ME, "WEB")
    ref = bring_to(board, src, f"card in {src.value}")
    assert board.get(ref).status is src
    forbidden = [d for d in Status if d not in TRANSITIONS[src]]
    assert forbidden, "every status has at least one forbidden target (itself)"
    for dst in forbidden:
        before = snapshot(board.store)
        for actor in (ME, WORKER):
            with pytest.raises(LaneboardError) as info:
                board.move(actor, ref, dst.value, reason="E1", question="q", note="n")
            err = info.value
            assert err.code == "ILLEGAL_TRANSITION", (src, dst, err.line())
            assert err.message == f"{src.value} -> {dst.value} is not a legal move"
            assert "\n" not in err.line()
        assert snapshot(board.store) == before, (src, dst)


def test_every_allowed_move_is_reachable(board: Board) -> None:
    """The other half: each legal pair succeeds from a card brought into ``src``."""
    board.add_project(ME, "WEB")
    n = 0
    for src, dsts in TRANSITIONS.items():
        for dst in dsts:
            n += 1
            ref = bring_to(board, src, f"{src.value} to {dst.value}")
            actor = ME
            if src is Status.IN_PROGRESS and dst is Status.IN_REVIEW:
                board.report(WORKER, ref, "delivered")
            if dst is Status.DONE and src is Status.IN_PROGRESS:
                board.edit(ME, ref, acceptance_mode="off")
            moved = board.move(actor, ref, dst.value, reason="E3", question="q?")
            assert moved.status is dst, (src, dst)
    assert n == sum(len(v) for v in TRANSITIONS.values())


def check_refusal(
    store: Store, code: str, fn: Callable[..., Any], *args: Any, **kw: Any
) -> LaneboardError:
    before = snapshot(store)
    with pytest.raises(LaneboardError) as info:
        fn(*args, **kw)
    err = info.value
    assert err.code == code, err.line()
    assert err.message and err.fix and "\n" not in err.line()
    assert snapshot(store) == before, f"{code} wrote something"
    return err


def test_each_error_code_writes_nothing(board: Board, clock: FakeClock) -> None:
    s = board.store
    board.add_project(ME, "WEB")
    a = board.create_card(ME, "WEB", "a")
    b = board.create_card(ME, "WEB", "b", depends_on=[a.ref])
    check_refusal(s, "NOT_FOUND", board.get, "WEB-404")
    check_refusal(s, "NOT_FOUND", board.move, ME, "WEB-404", "done")
    check_refusal(s, "NOT_FOUND", board.comment, ME, "WEB-404", "hi")
    check_refusal(s, "BAD_INPUT", board.create_card, ME, "WEB", "")
    check_refusal(s, "BAD_INPUT", board.move, ME, a.ref, "somewhere")
    check_refusal(s, "BAD_INPUT", board.move, ME, a.ref, "awaiting", reason="E9", question="q")
    check_refusal(s, "CONFLICT", board.add_project, ME, "WEB")
    check_refusal(s, "DEPENDENCY_CYCLE", board.link, ME, a.ref, b.ref)
    check_refusal(s, "CLAIM_CONFLICT", board.claim, WORKER, b.ref)  # a is not done
    board.claim(agent("w1", card_id=a.id, epoch=1), a.ref)
    check_refusal(s, "CLAIM_CONFLICT", board.claim, agent("w2"), a.ref)
    check_refusal(s, "REPORT_REQUIRED", board.move, ME, a.ref, "in_review")
    check_refusal(s, "ACCEPTANCE_FORBIDDEN", board.move, ME, a.ref, "done")
    check_refusal(s, "FORBIDDEN", board.comment, agent("w1", card_id=a.id, epoch=1), b.ref, "x")
    check_refusal(s, "FORBIDDEN", board.link, WORKER, b.ref, a.ref)
    clock.advance(minutes=10)
    board.claim(agent("w1"), a.ref)  # the same holder re-claims: epoch 2
    stale = agent("w1", card_id=a.id, epoch=1)
    check_refusal(s, "STALE_CLAIM", board.heartbeat, stale, a.ref)
    check_refusal(s, "STALE_CLAIM", board.report, stale, a.ref, "old news")
    check_refusal(s, "STALE_CLAIM", board.move, stale, a.ref, "todo")
    check_refusal(s, "STALE_CLAIM", board.edit, stale, a.ref, title="mine")
    check_refusal(s, "UNAUTHORIZED", Tokens(s).resolve, "lbt_nope")


def test_a_failed_transaction_rolls_back(store: Store) -> None:
    before = snapshot(store)
    with pytest.raises(RuntimeError), store.write() as tx:
        tx.insert_project("TMP", "tmp", None, None)
        tx.append_event("project.added", ME, payload={})
        raise RuntimeError("boom")
    assert snapshot(store) == before
