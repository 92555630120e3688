"""The workflow pass on both backends, run directly (no pool): outcomes, bounds, alerts."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from tests.supervisor.helpers import count_calls

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store
from laneboard.supervisor import alerts

from .helpers import (
    ME,
    WORKER,
    delivered,
    event_count,
    outcomes,
    project,
    redeliver,
    review_card,
    run,
    runtime,
    settle,
    verdict,
)

APPROVE = "VERDICT: APPROVE\nEverything checked.\n$ make test"


def _alerts(board: Board, name: str) -> list[dict[str, object]]:
    return [
        e.payload
        for e in board.events(limit=10_000)
        if e.type == "alert" and e.payload.get("alert") == name
    ]


def test_approve_on_auto_closes_the_original(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    out = run(rt)
    assert outcomes(out) == [("dispatch", out["results"][0]["outcome"])]
    rev = review_card(board, card)
    assert rev.assignee == "reviewer" and rev.labels == ("review",)
    assert rev.meta["review_of"] == card.id and rev.meta["review_round"] == 1
    assert rev.idempotency_key == f"loop-review|{card.ref}|r1"
    assert rev.status.value == "todo"
    verdict(board, rev, APPROVE)
    out = run(rt)
    assert [a for a, _ in outcomes(out)] == ["approve"]
    got = board.get(card.ref)
    assert got.status.value == "done"
    assert got.meta["accepted_by"] == "loop-review"
    assert got.meta["review_verdict"] == "APPROVE"
    assert got.meta["review_verdict_round"] == 1
    assert got.meta["review_verdict_author"] == "reviewer"
    assert board.get(rev.ref).status.value == "done"
    closes = [
        e for e in board.events(limit=1000) if e.type == "card.moved" and e.payload["to"] == "done"
    ]
    assert [(e.card_id, e.actor, e.actor_kind) for e in closes] == [
        (card.id, "Orchestrator", "system"),
        (rev.id, "Orchestrator", "system"),
    ]  # the original first, the review card last


def test_reject_sends_the_card_back_with_must_fix_items(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key, acceptance=["it works"])
    run(rt)
    rev = review_card(board, card)
    verdict(board, rev, "VERDICT: REJECT\nTwo problems.\n1. Handle empty input\n2. Add a test")
    run(rt)
    got = board.get(card.ref)
    assert got.status.value == "in_progress" and got.delivery_round == 2
    assert got.holder == "worker" and got.heartbeat_at is None  # the same holder re-claims
    assert [(c.id, c.text) for c in got.acceptance] == [
        ("A1", "it works"),
        ("R1.1", "Handle empty input"),
        ("R1.2", "Add a test"),
    ]
    assert got.meta["rework_round"] == 1
    resume = got.meta["loop_resume"]
    assert resume["round"] == 2 and resume["from_round"] == 1
    assert "R1.1: Handle empty input" in resume["detail"]
    findings = [c for c in board.comments(card.ref) if c.kind.value == "finding"]
    assert len(findings) == 1 and "Two problems." in findings[0].body
    assert board.get(rev.ref).status.value == "done"
    stale = Board(store).candidates(assignees=["worker"], stale=True)
    assert [(c.card.ref, c.stale) for c in stale] == [(card.ref, True)]
    # round 2: a new review card, approved
    redeliver(board, card.ref)
    run(rt)
    rev2 = review_card(board, card, 2)
    assert rev2.id != rev.id and rev2.idempotency_key == f"loop-review|{card.ref}|r2"
    verdict(board, rev2, APPROVE)
    run(rt)
    assert board.get(card.ref).status.value == "done"


def test_reject_without_numbered_items_appends_one_pointer(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    run(rt)
    rev = review_card(board, card)
    verdict(board, rev, "VERDICT: REJECT\nnot what was asked")
    run(rt)
    got = board.get(card.ref)
    assert [c.id for c in got.acceptance] == ["R1.1"]
    assert rev.ref in got.acceptance[0].text


def test_human_card_waits_for_a_person(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key, mode="human")
    run(rt)
    rev = review_card(board, card)
    verdict(board, rev, APPROVE)
    settle(rt)
    got = board.get(card.ref)
    assert got.status.value == "in_review"
    assert got.meta["review_verdict"] == "APPROVE" and "accepted_by" not in got.meta
    assert board.get(rev.ref).status.value == "done"
    assert len(board.list_cards(label="review")) == 1  # no second review for the round
    scoped_worker = agent("worker", card_id=card.id, epoch=got.claim_epoch)
    for who in (scoped_worker, agent("reviewer"), rt.actor):
        with pytest.raises(LaneboardError) as err:
            board.move(who, card.ref, "done")
        assert err.value.code == "ACCEPTANCE_FORBIDDEN"
    assert board.move(human("bob"), card.ref, "done").status.value == "done"


def test_verdict_not_by_the_reviewer_is_not_applied(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    a = delivered(board, key)
    b = delivered(board, key)
    run(rt)
    rev_a, rev_b = review_card(board, a), review_card(board, b)
    verdict(board, rev_a, APPROVE, who=human("mallory"))
    verdict(board, rev_b, APPROVE)
    board.report(WORKER, rev_b.ref, APPROVE)  # the worker overwrites the reviewer's report
    out = run(rt)
    assert outcomes(out) == []
    for card, rev in ((a, rev_a), (b, rev_b)):
        assert board.get(card.ref).status.value == "in_review"
        assert "review_verdict" not in board.get(card.ref).meta
        assert board.get(rev.ref).status.value == "in_review"
    sent = _alerts(board, "review_report_not_by_reviewer")
    assert sorted(str(p["card"]) for p in sent) == sorted([rev_a.ref, rev_b.ref])
    before = event_count(store)
    run(rt)
    assert event_count(store) == before  # the ledger suppresses the repeat


def test_unreadable_verdict_reopens_at_most_twice_then_holds(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    run(rt)
    rev = review_card(board, card)
    bodies = ["looks good", "VERDICT: APPROVE\nno anchor here", "Verdict: approve"]
    for i, body in enumerate(bodies):
        verdict(board, rev, body)
        out = run(rt)
        got = board.get(rev.ref)
        if i < 2:
            assert outcomes(out) == [("reopen_review", f"review reopened ({i + 1}/2)")]
            assert got.status.value == "in_progress" and got.holder == "reviewer"
            assert got.meta["review_retry"] == i + 1
            assert got.meta["loop_resume"]["reason"].startswith("your verdict")
    assert board.get(rev.ref).status.value == "canceled"
    held = board.get(card.ref)
    assert held.status.value == "blocked"
    assert held.meta["hold_cycle"] == "review verdict" and held.meta["hold_bound"] == 2
    questions = [c for c in board.comments(card.ref) if c.kind.value == "question"]
    assert len(questions) == 1 and "review verdict" in questions[0].body
    problems = {str(p["alert"]) for p in board_alerts(board)}
    assert {"verdict_unreadable", "verdict_unsupported", "review_retries_exhausted"} <= problems
    # a human decides: back to todo, delivered again on the same round -> a fresh review
    board.move(ME, card.ref, "todo")
    redeliver(board, card.ref)
    run(rt)
    fresh = review_card(board, card)
    assert fresh.id != rev.id and fresh.meta.get("review_retry") is None


def board_alerts(board: Board) -> list[dict[str, object]]:
    return [e.payload for e in board.events(limit=10_000) if e.type == "alert"]


def test_the_runtimes_record_of_a_lane_head_is_no_command_anchor(
    board: Board, store: Store, tmp_path: Path
) -> None:
    """A review run in a lane of its own (on another machine than the reviewed work) is
    verified as a delivery, and its report gains the runtime's record of the lane's head.
    That record is no command the reviewer ran: an APPROVE with nothing else is as
    unsupported as in the reviewed lane, whichever machine ran the review."""
    from laneboard.domain.model import Evidence

    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    run(rt)
    rev = review_card(board, card)
    head = Evidence(
        "git rev-parse HEAD",
        0,
        "git:" + "ab" * 20,
        f"lane/{rev.ref} at abababababab, 0 path(s) changed since lane/{card.ref}",
    )
    verdict(board, rev, "VERDICT: APPROVE\nfine", evidence=[head])
    out = run(rt)
    assert outcomes(out) == [("reopen_review", "review reopened (1/2)")]
    assert board.get(card.ref).status.value == "in_review"
    verdict(board, rev, "VERDICT: APPROVE\nfine\n$ make test", evidence=[head])
    assert [a for a, _ in outcomes(run(rt))] == ["approve"]


def test_five_rejections_hold_after_round_four_and_a_hold_is_an_epoch(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    for rnd in range(1, 6):
        if rnd > 1:
            redeliver(board, card.ref)
        run(rt)
        rev = review_card(board, card, rnd)
        verdict(board, rev, f"VERDICT: REJECT\n1. fix thing {rnd}")
        run(rt)
        got = board.get(card.ref)
        if rnd < 5:
            assert got.status.value == "in_progress" and got.delivery_round == rnd + 1
            assert got.meta["rework_round"] == rnd
    assert got.status.value == "blocked" and got.delivery_round == 5
    assert got.meta["hold_cycle"] == "rework" and got.meta["hold_bound"] == 4
    assert got.meta["rework_round"] == 5 and got.meta["rework_base_round"] == 5
    assert got.acceptance[-1].text == "fix thing 5"
    assert [c for c in board.comments(card.ref) if c.kind.value == "question"]
    assert board.get(rev.ref).status.value == "done"
    assert settle(rt)["actions"] == []
    # the human moves it back: a fresh bounded run (the next REJECT is rework 1 again)
    board.move(ME, card.ref, "todo")
    redeliver(board, card.ref)
    run(rt)
    again = [c for c in board.list_cards(label="review", limit=100) if c.meta["review_round"] == 5]
    verdict(
        board, next(c for c in again if c.status.value == "todo"), "VERDICT: REJECT\n1. once more"
    )
    run(rt)
    got = board.get(card.ref)
    assert got.status.value == "in_progress" and got.delivery_round == 6
    assert got.meta["rework_round"] == 1


def test_round_mismatch_closes_the_review(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    run(rt)
    rev = review_card(board, card)
    verdict(board, rev, APPROVE)
    board.edit(ME, rev.ref, meta={"review_round": 7})
    out = run(rt)
    assert [(r["action"], r["reason"]) for r in out["results"] if "action" in r] == [
        ("close_review", "round_mismatch"),
        ("dispatch", "needs review"),  # the round still has no review of its own
    ]
    assert board.get(rev.ref).status.value == "done"
    got = board.get(card.ref)
    assert got.status.value == "in_review" and "review_verdict" not in got.meta
    assert review_card(board, card).id != rev.id


def test_done_original_with_reject_alerts_and_writes_nothing(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    run(rt)
    rev = review_card(board, card)
    verdict(board, rev, "VERDICT: REJECT\n1. broken")
    board.move(ME, card.ref, "done")
    before = event_count(store)
    out = run(rt)
    assert outcomes(out) == []
    assert event_count(store) == before + 1  # the alert only
    assert _alerts(board, "conflicting_verdict")
    assert board.get(rev.ref).status.value == "in_review"
    assert board.get(card.ref).status.value == "done"


def test_off_cards_are_accepted_without_review(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key, mode="off")
    out = run(rt)
    assert outcomes(out) == [("auto_accept", "accepted")]
    got = board.get(card.ref)
    assert got.status.value == "done" and got.meta["accepted_by"] == "loop-auto"
    assert board.list_cards(label="review") == []


def test_no_reviewer_configured_is_reported_not_fatal(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path, reviewer_roles=())
    card = delivered(board, key)
    out = run(rt)
    assert out["skipped"] == [
        {
            "dispatch_skipped": "reviewer_not_configured",
            "projects": {str(card.project_id): [card.ref]},
        }
    ]
    assert board.list_cards(label="review") == []


def test_truncated_read_dispatches_nothing(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path, board_limit=2)
    for _ in range(3):
        delivered(board, key)
    out = run(rt)
    assert out["truncated"] is True and outcomes(out) == []
    assert {s.get("reason") for s in out["skipped"]} == {"board_truncated"}
    assert board.list_cards(label="review") == []


def test_actions_are_capped_per_pass(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path, workflow_max_actions=2)
    refs = [delivered(board, key, mode="off").ref for _ in range(5)]
    out = run(rt)
    assert len(outcomes(out)) == 2 and out["capped"]["dropped"] == 3
    assert sum(board.get(r).status.value == "done" for r in refs) == 2
    settle(rt)
    assert all(board.get(r).status.value == "done" for r in refs)


def test_landing_refusal_leaves_the_card_in_review_and_alerts(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)

    def refuse(c: object) -> str | None:
        if getattr(c, "id", None) == card.id:
            raise LaneboardError("LANDING_BLOCKED", "merge conflict", "resolve it by hand")
        return None

    rt.board.landing_gate = refuse
    run(rt)
    verdict(board, review_card(board, card), APPROVE)
    out = run(rt)
    assert outcomes(out)[0][1].startswith("blocked: LANDING_BLOCKED")
    got = board.get(card.ref)
    assert got.status.value == "in_review" and got.meta["acceptance_blocked"]["round"] == 1
    assert board.get(review_card(board, card).ref).status.value == "done"
    assert _alerts(board, "acceptance_blocked")
    before = event_count(store)
    out = run(rt)
    assert event_count(store) == before and outcomes(out) == []  # not retried, not re-sent
    assert board.move(ME, card.ref, "done").status.value == "done"  # a human closes it


def test_one_failing_action_never_stops_the_rest(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    bad = delivered(board, key, mode="off")
    good = delivered(board, key, mode="off")

    def explode(c: object) -> str | None:
        if getattr(c, "id", None) == bad.id:
            raise RuntimeError("the landing hook crashed")
        return None

    rt.board.landing_gate = explode
    out = run(rt)
    assert sorted(o for _, o in outcomes(out)) == ["accepted", "failed"]
    assert board.get(good.ref).status.value == "done"
    assert board.get(bad.ref).status.value == "in_review"


def test_second_pass_over_the_same_state_writes_nothing(
    board: Board, store: Store, tmp_path: Path
) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    approved, rejected, human_card, off = (
        delivered(board, key),
        delivered(board, key),
        delivered(board, key, mode="human"),
        delivered(board, key, mode="off"),
    )
    not_mine = delivered(board, key)
    run(rt)
    verdict(board, review_card(board, approved), APPROVE)
    verdict(board, review_card(board, rejected), "VERDICT: REJECT\n1. x")
    verdict(board, review_card(board, human_card), APPROVE)
    verdict(board, review_card(board, not_mine), APPROVE, who=human("mallory"))
    first = run(rt)
    assert len(outcomes(first)) == 3
    before = event_count(store)
    second = run(rt)
    assert event_count(store) == before
    assert second["actions"] == [] and outcomes(second) == []
    assert board.get(off.ref).status.value == "done"


def test_dry_run_changes_nothing(board: Board, store: Store, tmp_path: Path) -> None:
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key)
    before = event_count(store)
    out = run(rt, dry_run=True)
    assert [(a["action"], a["card"]) for a in out["actions"]] == [("dispatch", card.ref)]
    assert "results" not in out and event_count(store) == before


def test_racing_passes_create_one_review_card_per_round(store_url: str, tmp_path: Path) -> None:
    clock = FakeClock()
    setup = open_store(store_url, clock)
    board = Board(setup)
    key = project(board, tmp_path)
    cards = [delivered(board, key) for _ in range(6)]
    stores = [open_store(store_url, clock) for _ in range(2)]
    rts = [runtime(s, tmp_path / f"rt{i}") for i, s in enumerate(stores)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def go(i: int) -> None:
        try:
            barrier.wait(10)
            for _ in range(3):
                run(rts[i])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    reviews = board.list_cards(label="review", limit=1000)
    assert sorted(c.meta["review_of"] for c in reviews) == sorted(c.id for c in cards)
    for s in (*stores, setup):
        s.close()


def test_alert_ledger_suppresses_repeats_but_never_promotions(store: Store) -> None:
    with store.write() as tx:
        assert alerts.raise_alert(tx, "k|1", "stale", "notice", {"card": "P-1"}, card_id=None)
    with store.write() as tx:
        assert not alerts.raise_alert(tx, "k|1", "stale", "notice", {})
        assert not alerts.raise_alert(tx, "k|1", "stale", "info", {})  # a lower tier
        assert alerts.raise_alert(tx, "k|1", "stale", "critical", {})  # promotion
        assert alerts.raise_alert(tx, "k|1", "fresh-state", "info", {})  # a new state
        assert not alerts.raise_alert(tx, "k|1", "fresh-state", "info", {})
    with store.read() as tx:
        rec = alerts.alert(tx, "k|1")
        assert rec is not None and rec.sends == 3 and rec.severity == "info"
        assert [a.dedup_key for a in alerts.alerts(tx, prefix="k|")] == ["k|1"]
    with store.write() as tx:
        assert alerts.clear_alert(tx, "k|1")
        assert alerts.raise_alert(tx, "k|1", "fresh-state", "info", {"token": "x lbt_abcdefghijk"})
    events = [e for e in Board(store).events(limit=100) if e.type == "alert"]
    assert [e.payload["promoted"] for e in events] == [False, True, False, False]
    assert events[-1].payload["token"] == "x lbt_***"  # redacted
    with pytest.raises(ValueError), store.write() as tx:
        alerts.raise_alert(tx, "k|2", "s", "loud", {})


def test_an_off_card_is_marked_and_accepted_without_a_transaction_on_postgresql(
    board: Board, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's acceptance mark is written on the version of the card its checks read,
    with its event, in one statement (it was a transaction that locked the card: five round
    trips); the acceptance that follows is one more. SQLite writes each under one short
    write lock."""
    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key, mode="off")
    writes = count_calls(monkeypatch, store, "write")
    out = run(rt)
    assert outcomes(out) == [("auto_accept", "accepted")]
    assert len(writes) == (0 if store.dialect == "postgresql" else 2)
    got = board.get(card.ref)
    assert got.status.value == "done" and got.meta["accepted_by"] == "loop-auto"
    edited = [e for e in board.events(card=card.ref, limit=100) if e.type == "card.edited"]
    assert [e.payload for e in edited] == [{"fields": ["meta"], "by": "workflow"}]


def test_an_off_card_that_changes_before_its_mark_is_skipped_this_pass(
    board: Board, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from laneboard.supervisor import workflow_apply

    key = project(board, tmp_path)
    rt = runtime(store, tmp_path)
    card = delivered(board, key, mode="off")
    real = workflow_apply.save_with_event

    def edited_first(*args: Any, **kw: Any) -> Any:
        board.edit(ME, card.ref, title="renamed")  # between the checks and the mark
        return real(*args, **kw)

    monkeypatch.setattr(workflow_apply, "save_with_event", edited_first)
    assert outcomes(run(rt)) == [("auto_accept", "skipped")]
    got = board.get(card.ref)
    assert got.status.value == "in_review" and "accepted_by" not in got.meta
    monkeypatch.setattr(workflow_apply, "save_with_event", real)
    assert outcomes(run(rt)) == [("auto_accept", "accepted")]  # the next pass accepts it
