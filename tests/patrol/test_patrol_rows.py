"""Every SLA patrol row, table-driven, with an injected clock.

For each row the same driver builds the situation, then checks with the fake clock:
nothing one minute before the threshold (nor exactly at it where the rule is strictly
greater), one alert just after, a repeated pass suppressed, for tiered rows the
promotion re-notified under the same ``dedup_key`` (and nothing new just before it),
the ``--notify`` sink receiving one valid JSON object per sent alert, and a board that
no pass changes (the event log gains only ``alert`` events, one per sent alert).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import MINUTE_MS, FakeClock, iso
from laneboard.domain.model import agent, human, system
from laneboard.store import Store
from laneboard.store.migrations import declared
from laneboard.supervisor import patrol
from laneboard.supervisor.patrol import PatrolSettings, run_patrol
from laneboard.supervisor.workflow import review_key

ME = human("alice")
WORKER = "worker"
ALERT_FIELDS = {
    "type",
    "dedup_key",
    "row",
    "tier",
    "severity",
    "card",
    "target",
    "measure_start_at",
    "threshold_min",
    "due_at",
    "at",
    "action",
    "confidence",
    "evidence",
}
# The patrol's own ledger: the only tables a pass may write (besides `alert` events).
LEDGER_TABLES = {"events", "alerts", "patrol_marks"}


# -- the board, before and after ------------------------------------------------------
def _key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def snapshot(store: Store, skip: set[str] = LEDGER_TABLES) -> dict[str, list[dict[str, Any]]]:
    """Every declared table's rows (cards, comments, links, reports, queue, …)."""
    out: dict[str, list[dict[str, Any]]] = {}
    with store.read() as tx:
        for name in sorted(set(declared()) - skip):
            out[name] = sorted((dict(r) for r in tx.all(f"SELECT * FROM {name}")), key=_key)
    return out


@dataclass
class Harness:
    board: Board
    clock: FakeClock
    settings: PatrolSettings
    notified: Path
    sent: list[dict[str, Any]] = field(default_factory=list)  # every alert any pass sent

    @property
    def store(self) -> Store:
        return self.board.store

    def run(self) -> patrol.PatrolResult:
        """One pass; asserts it changed nothing but the ledger and appended only alerts."""
        before = snapshot(self.store)
        with self.store.read() as tx:
            last_event = tx.max_event_id()
        res = run_patrol(self.store, self.settings, "m1")
        assert snapshot(self.store) == before, "the patrol changed the board"
        with self.store.read() as tx:
            new = tx.all("SELECT type, payload FROM events WHERE id > ? ORDER BY id", (last_event,))
        assert [e["type"] for e in new] == ["alert"] * len(res.sent), "non-alert events"
        assert [json.loads(e["payload"])["key"] for e in new] == [a["dedup_key"] for a in res.sent]
        assert res.notify_errors == [] and res.dropped == []
        self.sent.extend(res.sent)
        return res

    def notify_lines(self) -> list[dict[str, Any]]:
        if not self.notified.exists():
            return []
        lines = self.notified.read_text().splitlines()
        out = []
        for line in lines:
            obj = json.loads(line)  # one valid JSON object per line
            assert isinstance(obj, dict)
            out.append(obj)
        return out


@pytest.fixture
def harness(board: Board, clock: FakeClock, tmp_path: Path) -> Harness:
    board.add_project(ME, "P")
    notified = tmp_path / "alerts.jsonl"
    settings = PatrolSettings(notify_command=f"cat >> {shlex.quote(str(notified))}")
    return Harness(board, clock, settings, notified)


# -- the situations -------------------------------------------------------------------
@dataclass(frozen=True)
class Built:
    start: int  # the measure start the row counts from
    card: str | None  # the card the alert names (None for board-wide rows)
    target: str = "leader"
    keepalive: Callable[[], None] | None = None  # a live worker's writes between passes


def _stale_heartbeat(h: Harness) -> Built:
    c = h.board.create_card(ME, "P", "a worker that went quiet")
    c = h.board.claim(ME, c.ref)
    assert c.heartbeat_at is not None
    return Built(c.heartbeat_at, c.ref)


def _absent_heartbeat(h: Harness) -> Built:
    c = h.board.create_card(ME, "P", "claimed, no heartbeat")
    c = h.board.claim(ME, c.ref)
    with h.store.write() as tx:
        assert tx.update_card(c.id, c.version, {"heartbeat_at": None})
    return Built(c.status_since, c.ref)


def _question_in_progress(h: Harness) -> Built:
    c = h.board.create_card(ME, "P", "asks a question", assignee=WORKER)
    w = agent(WORKER, c.id)
    h.board.claim(w, c.ref)
    q = h.board.comment(w, c.ref, "Q1: which API?", "question")

    def alive() -> None:  # the worker waits, heartbeating: no stale row
        h.board.heartbeat(w, c.ref)

    return Built(q.created_at, c.ref, keepalive=alive)


def _question_awaiting(h: Harness) -> Built:
    c = h.board.create_card(ME, "P", "parked on a question", assignee=WORKER)
    w = agent(WORKER, c.id)
    h.board.claim(w, c.ref)
    c = h.board.move(w, c.ref, "awaiting", reason="E1", question="Which API, please?")
    return Built(c.status_since, c.ref)


def _blocked(h: Harness) -> Built:
    c = h.board.create_card(ME, "P", "waits on a vendor")
    c = h.board.move(ME, c.ref, "blocked", reason="external", note="vendor")
    return Built(c.status_since, c.ref)


def _delivered(h: Harness, mode: str = "auto") -> Any:
    d = h.board.create_card(ME, "P", "delivered work", acceptance_mode=mode)
    h.board.claim(ME, d.ref)
    h.board.report(ME, d.ref, "done")
    return h.board.move(ME, d.ref, "in_review")


def _review_card(h: Harness) -> Built:
    d = _delivered(h)
    r = h.board.create_card(
        ME,
        "P",
        f"Review {d.ref} (round 1)",
        assignee="reviewer",
        meta={"review_of": d.id, "review_of_ref": d.ref, "review_round": 1, "flow": "B"},
        idempotency_key=review_key(d.ref, d.delivery_round),
    )
    return Built(r.created_at, r.ref)


def _missing_review(mode: str) -> Callable[[Harness], Built]:
    def build(h: Harness) -> Built:
        d = _delivered(h, mode)
        return Built(d.status_since, d.ref)

    return build


def _leader_owes(h: Harness) -> Built:
    c = h.board.create_card(ME, "P", "needs a decision")
    c = h.board.move(ME, c.ref, "blocked", reason="decision")
    return Built(c.status_since, None)


def _peer_marker(h: Harness) -> Built:
    with h.store.write() as tx:
        patrol.mark(tx, "patrol:peer", {})
    return Built(h.clock.now_ms(), None, target="patrol:peer")


@dataclass(frozen=True)
class Case:
    id: str
    row: str
    build: Callable[[Harness], Built]
    first_min: int
    tier: str = "overdue"
    severity: str = "warning"
    strict: bool = True  # fires only when the counted time is strictly greater
    escalate_min: int | None = None
    confidence: str = "high"
    also: frozenset[str] = frozenset()  # rows the same situation raises on its own
    settings: dict[str, Any] = field(default_factory=dict)
    evidence: Callable[[Harness, Built], dict[str, Any]] = lambda h, b: {}


CASES = [
    Case(
        "heartbeat_stale",
        "heartbeat_stale",
        _stale_heartbeat,
        30,
        escalate_min=360,
        evidence=lambda h, b: {"holder": "alice", "heartbeat_at": iso(b.start), "epoch": 1},
    ),
    Case(
        "heartbeat_unreadable-absent",
        "heartbeat_unreadable",
        _absent_heartbeat,
        10,
        tier="warn",
        severity="critical",
        strict=False,  # "no heartbeat for 10 minutes": due at 10 minutes sharp
        confidence="low",
        evidence=lambda h, b: {"heartbeat_at": None, "holder": "alice"},
    ),
    Case(
        "question_waiting-in_progress",
        "question_waiting",
        _question_in_progress,
        60,
        escalate_min=1440,
        evidence=lambda h, b: {"asked_by": WORKER, "status": "in_progress"},
    ),
    Case(
        "question_waiting-awaiting",
        "question_waiting",
        _question_awaiting,
        60,
        escalate_min=1440,
        also=frozenset({"leader_stalled"}),  # an awaiting card is leader-owed work
        evidence=lambda h, b: {"status": "awaiting"},
    ),
    Case(
        "blocked_waiting",
        "blocked_waiting",
        _blocked,
        120,
        escalate_min=1440,
        also=frozenset({"leader_stalled"}),
        evidence=lambda h, b: {"blocked": {"reason": "external", "note": "vendor"}},
    ),
    Case(
        "review_aging",
        "review_aging",
        _review_card,
        60,
        evidence=lambda h, b: {"round": 1, "status": "todo"},
    ),
    Case(
        "review_missing-auto",
        "review_missing",
        _missing_review("auto"),
        30,
        evidence=lambda h, b: {"round": 1, "mode": "auto"},
    ),
    Case(
        "review_missing-human",
        "review_missing",
        _missing_review("human"),
        30,
        evidence=lambda h, b: {"round": 1, "mode": "human"},
    ),
    Case(
        "leader_stalled",
        "leader_stalled",
        _leader_owes,
        240,
        also=frozenset({"blocked_waiting"}),
        evidence=lambda h, b: {"owed_count": 1, "last_leader_action_at": iso(b.start)},
    ),
    Case(
        "inspector_liveness",
        "inspector_liveness",
        _peer_marker,
        30,  # 3 periods of 600 s
        tier="warn",
        settings={"peer_marker": "patrol:peer", "peer_period_s": 600},
        evidence=lambda h, b: {"marker": "patrol:peer", "marker_at": iso(b.start), "periods": 3},
    ),
]


def test_every_row_has_a_case() -> None:
    assert {c.row for c in CASES} == set(patrol.ROWS)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_row_fires_once_at_its_threshold(harness: Harness, case: Case) -> None:
    h = harness
    h.settings = replace(h.settings, **case.settings)
    built = case.build(h)
    subject = built.card or built.target
    key = f"{case.row}|{subject}|{built.start}"
    allowed = {case.row} | case.also

    def at(minutes: float, ms: int = 0) -> patrol.PatrolResult:
        target = built.start + int(minutes * MINUTE_MS) + ms
        assert target >= h.clock.now_ms()
        h.clock.t = target
        if built.keepalive is not None:
            built.keepalive()
        res = h.run()
        stray = {a["row"] for a in res.sent} - allowed
        assert not stray, f"unexpected rows {stray}"
        return res

    def mine(res: patrol.PatrolResult) -> list[dict[str, Any]]:
        return [a for a in res.sent if a["row"] == case.row]

    def check(a: dict[str, Any], tier: str, severity: str, threshold: int) -> None:
        assert a["type"] == "laneboard.alert" and a["action"] == "notify"
        assert a["dedup_key"] == key
        assert (a["tier"], a["severity"]) == (tier, severity)
        assert a["card"] == built.card and a["target"] == built.target
        assert a["measure_start_at"] == iso(built.start)
        assert a["threshold_min"] == threshold
        assert a["due_at"] == iso(built.start + threshold * MINUTE_MS)
        assert a["at"] == iso(h.clock.now_ms())
        assert a["confidence"] == case.confidence
        want = case.evidence(h, built)
        assert {k: a["evidence"].get(k) for k in want} == want

    # (a) nothing a minute before, nor exactly at a strict threshold
    assert mine(at(case.first_min - 1)) == []
    if case.strict:
        assert mine(at(case.first_min)) == []
    # (b) once, just after
    fire = at(case.first_min, 1 if case.strict else 0)
    [first] = mine(fire)
    check(first, case.tier, case.severity, case.first_min)
    lines_after_first = len(h.notify_lines())
    # (c) a repeat is suppressed: not sent, not piped again
    again = at(case.first_min, 1 if case.strict else 0)
    assert mine(again) == [] and key in again.suppressed
    assert len(h.notify_lines()) == lines_after_first
    later = at(case.first_min + 5)
    assert mine(later) == [] and key in later.suppressed
    # (d) tiered rows: nothing new before the escalation, the promotion re-notified
    if case.escalate_min is not None:
        for just_before in (at(case.escalate_min - 1), at(case.escalate_min)):
            assert mine(just_before) == [] and key in just_before.suppressed
        [promoted] = mine(at(case.escalate_min, 1))
        check(promoted, "escalate", "critical", case.escalate_min)
        final = at(case.escalate_min + 5)
        assert mine(final) == [] and key in final.suppressed
    # (e) the notify sink got exactly the sent alerts, as documented JSON objects
    lines = h.notify_lines()
    assert lines == h.sent
    for obj in lines:
        assert set(obj) == ALERT_FIELDS
    tiers = [x["tier"] for x in lines if x["row"] == case.row]
    assert tiers == [case.tier] + (["escalate"] if case.escalate_min is not None else [])


def test_a_heartbeat_in_the_future_is_unreadable_at_once(harness: Harness) -> None:
    h = harness
    c = h.board.create_card(ME, "P", "clock skew")
    c = h.board.claim(ME, c.ref)

    def set_heartbeat(ahead_ms: int) -> None:
        with h.store.write() as tx:
            cur = tx.card(c.id)
            assert cur is not None
            assert tx.update_card(c.id, cur.version, {"heartbeat_at": tx.now() + ahead_ms})

    set_heartbeat(MINUTE_MS)  # a minute ahead is tolerated skew
    assert h.run().sent == []
    set_heartbeat(MINUTE_MS + 1)
    [a] = h.run().sent
    assert (a["row"], a["tier"], a["severity"], a["card"]) == (
        "heartbeat_unreadable",
        "warn",
        "critical",
        c.ref,
    )
    assert a["dedup_key"] == f"heartbeat_unreadable|{c.ref}|{c.status_since}"
    again = h.run()
    assert again.sent == [] and again.suppressed == [a["dedup_key"]]
    assert h.notify_lines() == [a]


def test_a_new_episode_of_an_absent_heartbeat_is_a_new_alert(harness: Harness) -> None:
    """A card re-claimed later whose heartbeat goes missing again is news again."""
    h = harness
    c = h.board.create_card(ME, "P", "flaky worker")

    def claim_without_heartbeat() -> int:
        got = h.board.claim(ME, c.ref)
        with h.store.write() as tx:
            assert tx.update_card(got.id, got.version, {"heartbeat_at": None})
        return got.status_since

    first_start = claim_without_heartbeat()
    h.clock.advance(minutes=10)
    [a] = h.run().sent
    h.board.release(ME, c.ref)
    h.clock.advance(minutes=60)
    second_start = claim_without_heartbeat()
    h.clock.advance(minutes=10)
    [b] = h.run().sent
    assert b["row"] == "heartbeat_unreadable" and b["dedup_key"] != a["dedup_key"]
    assert (a["measure_start_at"], b["measure_start_at"]) == (
        iso(first_start),
        iso(second_start),
    )
    assert len(h.notify_lines()) == 2


def test_an_epic_without_a_heartbeat_is_not_unreadable(harness: Harness) -> None:
    h = harness
    e = h.board.create_card(ME, "P", "an epic", kind="epic")
    with h.store.write() as tx:
        assert tx.update_card(e.id, e.version, {"status": "in_progress", "heartbeat_at": None})
    h.clock.advance(minutes=600)
    assert h.run().sent == []


def test_a_canceled_review_card_does_not_hide_a_missing_review(harness: Harness) -> None:
    """Only an open review for the round suppresses review_missing; a closed review card
    releases its key, and the delivery is again one with no review."""
    h = harness
    d = _delivered(h)
    r = h.board.create_card(
        ME,
        "P",
        f"Review {d.ref} (round 1)",
        meta={"review_of": d.id, "review_of_ref": d.ref, "review_round": 1},
        idempotency_key=review_key(d.ref, 1),
    )
    h.clock.advance(minutes=31)
    assert h.run().sent == [], "an open review card suppresses the row"
    h.board.move(ME, r.ref, "canceled", reason="wrong reviewer")
    [a] = h.run().sent
    assert (a["row"], a["card"]) == ("review_missing", d.ref)


def test_blocked_evidence_names_only_the_current_episode(harness: Harness) -> None:
    """hold_* meta outlives a hold and blocked meta outlives a block: the alert for a
    person's block after a released hold names the block, and a hold after a person's
    block names the hold."""
    h = harness
    c = h.board.create_card(ME, "P", "held once, then blocked by a person")
    with h.store.write() as tx:
        card = tx.card(c.id)
        assert card is not None
        h.board.hold(tx, system(), card, "dispatch", 3, "the agent cannot be started.")
    h.clock.advance(minutes=121)
    [held] = [a for a in h.run().sent if a["row"] == "blocked_waiting"]
    assert (held["evidence"]["hold_cycle"], held["evidence"]["blocked"]) == ("dispatch", None)
    h.board.move(ME, c.ref, "todo")  # a person fixed it
    h.board.move(ME, c.ref, "blocked", reason="external", note="vendor")
    h.clock.advance(minutes=121)
    [block] = [a for a in h.run().sent if a["row"] == "blocked_waiting"]
    assert block["evidence"]["hold_cycle"] is None
    assert block["evidence"]["blocked"] == {"reason": "external", "note": "vendor"}
    h.board.move(ME, c.ref, "todo")
    with h.store.write() as tx:
        card = tx.card(c.id)
        assert card is not None
        h.board.hold(tx, system(), card, "admission", 5, "the lane cannot be prepared.")
    h.clock.advance(minutes=121)
    [again] = [a for a in h.run().sent if a["row"] == "blocked_waiting"]
    assert (again["evidence"]["hold_cycle"], again["evidence"]["blocked"]) == ("admission", None)
