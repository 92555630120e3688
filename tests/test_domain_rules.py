"""The pure rules of the board, checked without a database."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from laneboard.board import inputs
from laneboard.domain import acceptance, claims, deps, weights
from laneboard.domain.clock import HOUR_MS, MINUTE_MS, FakeClock, iso
from laneboard.domain.model import (
    AcceptanceMode,
    Actor,
    ActorKind,
    Card,
    CardKind,
    CommentKind,
    agent,
    check_priority,
    human,
    parse_enum,
    system,
)
from laneboard.domain.status import (
    TERMINAL,
    TRANSITIONS,
    Status,
    check_transition,
    is_allowed,
    parse_status,
)
from laneboard.domain.timecontract import TimeContract
from laneboard.errors import CODES, LaneboardError

T0 = 1_767_225_600_000

# The transition table of the product description, written out again by hand.
EXPECTED_MOVES = {
    "backlog": {"todo", "canceled"},
    "todo": {"backlog", "in_progress", "blocked", "canceled"},
    "in_progress": {"todo", "in_review", "awaiting", "blocked", "done", "canceled"},
    "awaiting": {"todo", "blocked", "canceled"},
    "blocked": {"todo", "backlog", "canceled"},
    "in_review": {"done", "in_progress", "todo", "blocked", "canceled"},
    "done": set(),
    "canceled": set(),
}


def make_card(**over: Any) -> Card:
    base: dict[str, Any] = dict(
        id=7,
        ref="WEB-7",
        project_id=1,
        title="t",
        description="",
        kind=CardKind.TASK,
        parent_id=None,
        status=Status.TODO,
        assignee=None,
        priority=2,
        labels=(),
        acceptance=(),
        acceptance_mode=AcceptanceMode.AUTO,
        delivery_round=1,
        checks=(),
        allowed_paths=(),
        holder=None,
        holder_kind=None,
        session_id=None,
        claimed_at=None,
        heartbeat_at=None,
        claim_epoch=0,
        meta={},
        idempotency_key=None,
        run_id=None,
        status_since=T0,
        created_at=T0,
        updated_at=T0,
        version=1,
    )
    base.update(over)
    return Card(**base)


def code_of(fn: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(LaneboardError) as info:
        fn(*args, **kw)
    return info.value.code


# -- statuses ---------------------------------------------------------------------------
def test_transition_table_matches_the_written_rules() -> None:
    got = {s.value: {d.value for d in dsts} for s, dsts in TRANSITIONS.items()}
    assert got == EXPECTED_MOVES
    assert {s.value for s in TERMINAL} == {"done", "canceled"}


@pytest.mark.parametrize("src", list(Status))
@pytest.mark.parametrize("dst", list(Status))
def test_check_transition_agrees_with_table(src: Status, dst: Status) -> None:
    legal = dst.value in EXPECTED_MOVES[src.value]
    assert is_allowed(src, dst) is legal
    if legal:
        check_transition(src, dst)
        return
    with pytest.raises(LaneboardError) as info:
        check_transition(src, dst)
    err = info.value
    assert err.code == "ILLEGAL_TRANSITION"
    assert err.message == f"{src.value} -> {dst.value} is not a legal move"
    assert err.fix.startswith(f"from {src.value} the legal moves are: ")
    assert "\n" not in err.line()


def test_parse_status_refuses_unknown_names() -> None:
    assert parse_status("in_review") is Status.IN_REVIEW
    assert code_of(parse_status, "doing") == "BAD_INPUT"


# -- claims -----------------------------------------------------------------------------
def test_claim_todo_needs_done_dependencies_and_the_assignee() -> None:
    card = make_card(assignee="worker")
    assert claims.claim_verdict(card, "worker", True, T0).ok
    assert not claims.claim_verdict(card, "worker", False, T0).ok
    refused = claims.claim_verdict(card, "other", True, T0)
    assert not refused.ok and "assigned to worker" in refused.reason
    assert claims.claim_verdict(card, "other", True, T0, may_bypass_assignee=True).ok
    assert claims.claim_verdict(make_card(), "anyone", True, T0).ok


def test_claim_windows_same_holder_stale_and_takeover() -> None:
    card = make_card(status=Status.IN_PROGRESS, holder="w1", heartbeat_at=T0, claim_epoch=1)
    w = claims.DEFAULT_WINDOWS
    assert (w.fresh_ms, w.stale_ms, w.takeover_ms) == (10 * MINUTE_MS, 30 * MINUTE_MS, 6 * HOUR_MS)
    # the same holder: refused while fresh, allowed from 10 min on
    assert not claims.claim_verdict(card, "w1", True, T0 + 10 * MINUTE_MS - 1).ok
    again = claims.claim_verdict(card, "w1", True, T0 + 10 * MINUTE_MS)
    assert again.ok and not again.takeover
    # anyone else: refused until 6 h, then a takeover; the refusal says how old the beat is
    live = claims.claim_verdict(card, "w2", True, T0 + 5 * MINUTE_MS)
    assert live.reason == "held by w1 with a live heartbeat (5 min old)"
    old = claims.claim_verdict(card, "w2", True, T0 + 60 * MINUTE_MS)
    assert not old.ok and "live" not in old.reason
    assert old.reason == (
        "held by w1, whose heartbeat is 60 min old (stale, but anyone may take it over only "
        "after 6 h: 300 min from now)"
    )
    assert not claims.claim_verdict(card, "w2", True, T0 + 6 * HOUR_MS - 1).ok
    took = claims.claim_verdict(card, "w2", True, T0 + 6 * HOUR_MS)
    assert took.ok and took.takeover
    # sent back for rework (no heartbeat): its holder at once, anyone 6 h after the move
    rework = replace(card, heartbeat_at=None, status_since=T0)
    assert claims.claim_verdict(rework, "w1", True, T0).ok
    held = claims.claim_verdict(rework, "w2", True, T0 + 6 * HOUR_MS - 1)
    assert not held.ok and held.reason == "held by w1, who has it back for rework"
    assert claims.claim_verdict(rework, "w2", True, T0 + 6 * HOUR_MS).takeover
    # the stale pool opens at 30 min
    assert not claims.is_stale(card, T0 + 30 * MINUTE_MS - 1)
    assert claims.is_stale(card, T0 + 30 * MINUTE_MS)
    assert not claims.is_stale(make_card(), T0 + 10 * HOUR_MS)


@pytest.mark.parametrize(
    "status", [s for s in Status if s not in (Status.TODO, Status.IN_PROGRESS)]
)
def test_claim_refused_in_other_statuses(status: Status) -> None:
    verdict = claims.claim_verdict(make_card(status=status), "w", True, T0)
    assert not verdict.ok and status.value in verdict.reason


# -- acceptance authority ---------------------------------------------------------------
def approved(card: Card, author: str = "reviewer", rnd: int = 1) -> Card:
    meta = {"review_verdict": "APPROVE", "review_verdict_round": rnd}
    meta["review_verdict_author"] = author  # type: ignore[assignment]
    return replace(card, meta=meta)


def test_acceptance_off_lets_deliverer_supervisor_and_human_close() -> None:
    for status in (Status.IN_PROGRESS, Status.IN_REVIEW):
        card = make_card(status=status, acceptance_mode=AcceptanceMode.OFF, holder="w")
        for actor in (agent("w"), system(), human("h")):
            acceptance.check_close(card, actor)


@pytest.mark.parametrize("mode", [AcceptanceMode.AUTO, AcceptanceMode.HUMAN])
def test_in_progress_to_done_needs_mode_off(mode: AcceptanceMode) -> None:
    card = make_card(status=Status.IN_PROGRESS, acceptance_mode=mode)
    assert code_of(acceptance.check_close, card, human("h")) == "ACCEPTANCE_FORBIDDEN"


def test_acceptance_human_only_a_person_closes() -> None:
    card = make_card(status=Status.IN_REVIEW, acceptance_mode=AcceptanceMode.HUMAN)
    acceptance.check_close(approved(card), human("h"))
    for actor in (agent("w"), system()):
        assert code_of(acceptance.check_close, approved(card), actor) == "ACCEPTANCE_FORBIDDEN"


def test_acceptance_auto_needs_current_round_approve_and_another_closer() -> None:
    card = make_card(status=Status.IN_REVIEW, delivery_round=2)
    closer = system()
    assert code_of(acceptance.check_close, card, closer) == "ACCEPTANCE_FORBIDDEN"
    assert code_of(acceptance.check_close, approved(card, rnd=1), closer) == "ACCEPTANCE_FORBIDDEN"
    rejected = replace(card, meta={**approved(card, rnd=2).meta, "review_verdict": "REJECT"})
    assert code_of(acceptance.check_close, rejected, closer) == "ACCEPTANCE_FORBIDDEN"
    acceptance.check_close(approved(card, rnd=2), closer)
    acceptance.check_close(approved(card, rnd=2), agent("worker"))
    # the verdict's author never closes its own verdict
    mine = approved(card, author="rev", rnd=2)
    assert code_of(acceptance.check_close, mine, agent("rev")) == "ACCEPTANCE_FORBIDDEN"
    # a human always may
    acceptance.check_close(card, human("h"))


def test_review_card_is_not_closed_by_its_own_reviewer() -> None:
    card = make_card(status=Status.IN_REVIEW, holder="rev", meta={"review_of": 3})
    assert code_of(acceptance.check_close, card, agent("rev")) == "ACCEPTANCE_FORBIDDEN"
    acceptance.check_close(card, system())
    acceptance.check_close(card, human("rev"))


# -- dependencies and weights -----------------------------------------------------------
def test_would_cycle_and_downstream_counts() -> None:
    edges = {1: [2], 2: [3]}  # 1 depends on 2 depends on 3
    assert deps.would_cycle(edges, 3, 1)
    assert deps.would_cycle(edges, 2, 2)
    assert not deps.would_cycle(edges, 1, 3)
    assert not deps.would_cycle(edges, 4, 1)
    dependents = {3: [2], 2: [1, 5], 5: [6]}
    assert deps.downstream_counts(dependents, [3, 2, 6]) == {3: 4, 2: 3, 6: 0}


def test_weight_order_priority_then_weight_then_id() -> None:
    now = T0 + 100 * MINUTE_MS
    old = make_card(id=1, created_at=T0, status_since=T0)
    new = make_card(id=2, created_at=now, status_since=now)
    urgent_new = make_card(id=3, created_at=now, status_since=now, priority=0)
    fanned = make_card(id=4, created_at=now, status_since=now)
    twin = make_card(id=5, created_at=now, status_since=now)
    got = weights.order([new, old, fanned, urgent_new, twin], now, {4: 4})
    assert [w.card.id for w in got] == [3, 1, 4, 2, 5]
    assert got[1].weight == pytest.approx(100 + 50)
    assert got[2].weight == pytest.approx(4 * weights.FANOUT_MINUTES) and got[2].fanout == 4


# -- clocks, contract, records ----------------------------------------------------------
def test_clock_and_iso() -> None:
    c = FakeClock(1000)
    c.advance(5, seconds=1, minutes=1)
    assert c.now_ms() == 1000 + 5 + 1000 + MINUTE_MS
    assert iso(T0 + 7) == "2026-01-01T00:00:00.007Z"
    assert iso(None) is None


def test_time_contract_defaults_hold_and_violations_are_named() -> None:
    assert TimeContract().validate().violations() == []
    bad = TimeContract(heartbeat_fresh=40 * 60)
    with pytest.raises(LaneboardError) as info:
        bad.validate()
    assert info.value.code == "CONFIG_INVALID"
    assert "heartbeat_fresh < stale_same_holder < stale_anyone" in info.value.message


def test_enums_priority_and_actors() -> None:
    assert parse_enum(CommentKind, "finding", "comment kind") is CommentKind.FINDING
    assert code_of(parse_enum, CommentKind, "rant", "comment kind") == "BAD_INPUT"
    assert [check_priority(p) for p in range(4)] == [0, 1, 2, 3]
    assert code_of(check_priority, 4) == "BAD_INPUT"
    assert code_of(check_priority, -1) == "BAD_INPUT"
    a = agent("w", card_id=3, epoch=2)
    assert (a.kind, a.card_id, a.epoch, a.is_human) == (ActorKind.AGENT, 3, 2, False)
    assert human("h").is_human and not system().is_human
    assert Actor(ActorKind.HUMAN, "x").to_dict() == {"kind": "human", "name": "x", "card_id": None}


def test_errors_are_one_line_with_a_known_code() -> None:
    err = LaneboardError("NOT_FOUND", "card X does not exist", "list cards")
    assert err.line() == "error NOT_FOUND: card X does not exist — list cards"
    assert (err.http_status, err.exit_code) == (404, 1)
    assert LaneboardError("BAD_INPUT", "m", "f").exit_code == 2
    assert err.to_dict() == {
        "code": "NOT_FOUND",
        "message": "card X does not exist",
        "fix": "list cards",
    }
    with pytest.raises(ValueError):
        LaneboardError("NO_SUCH_CODE", "m")
    assert all(len(v) == 2 for v in CODES.values())


# -- input validation -------------------------------------------------------------------
@pytest.mark.parametrize("key", ["", "web", "1AB", "ABCDEFGHIJK", "A-B"])
def test_bad_project_keys(key: str) -> None:
    assert code_of(inputs.project_key, key) == "BAD_INPUT"


@pytest.mark.parametrize("path", ["", "/abs", "a/../b", "a/./b", "a//b", "src/*.py", "a\\b"])
def test_bad_repo_paths(path: str) -> None:
    assert code_of(inputs.repo_path, path) == "BAD_INPUT"


def test_inputs_normalize() -> None:
    assert inputs.project_key("WEB2") == "WEB2"
    assert inputs.repo_path(" src/app/ ") == "src/app"
    assert inputs.card_ref(" web-3 ") == "WEB-3"
    assert inputs.card_ref("12") == 12
    crit = inputs.criteria(["one", {"id": "X", "text": "two"}, "three"])
    assert [(c.id, c.text) for c in crit] == [("A1", "one"), ("X", "two"), ("A3", "three")]
    assert code_of(inputs.criteria, [{"id": "A", "text": "x"}, {"id": "A", "text": "y"}]) == (
        "BAD_INPUT"
    )
    assert code_of(inputs.text, "  ", "title") == "BAD_INPUT"
    assert code_of(inputs.text, "x" * 11, "title", limit=10) == "BAD_INPUT"
    assert code_of(inputs.strings, ["ok", " "], "labels") == "BAD_INPUT"
    assert code_of(inputs.card_ref, "  ") == "BAD_INPUT"
