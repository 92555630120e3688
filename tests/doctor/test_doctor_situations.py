"""lb doctor, one situation at a time.

Each looping / stuck / orphaned / lane / schedule / supervisor situation is built alone
on an otherwise healthy board (a finished card, an assigned todo card, a live worker and
a card waiting on a human review) and must appear with ``attention: true`` and exactly its
own reason; the same situation one step short of its bound must leave the board needing no
attention. Every report is taken twice, in process and through the real
``lb doctor --json``, the two must agree, and neither may change any table, the event log
included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.schedules import Schedules, run_schedule_pass
from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.clock import MINUTE_MS, FakeClock, iso
from laneboard.domain.model import agent, human, system
from laneboard.store import Store
from laneboard.store.migrations import declared
from laneboard.supervisor import instances, patrol, records
from laneboard.supervisor.doctor import doctor_report, render
from laneboard.supervisor.workflow import review_key

ME = human("alice")
MACHINE = "doctor-test"
TIME = SupervisorConfig().time
CLOCK_START = FakeClock().now_ms()  # 2026-01-01 00:00 UTC
HOUR_MS = 60 * MINUTE_MS

AGENTS = SupervisorConfig(default_agent="scripted")  # every role has a kind here


# -- harness --------------------------------------------------------------------------
def _key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def snapshot(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every declared table, the event log and the alert ledger included."""
    with store.read() as tx:
        return {
            name: sorted((dict(r) for r in tx.all(f"SELECT * FROM {name}")), key=_key)
            for name in sorted(declared())
        }


@dataclass
class Doc:
    board: Board
    clock: FakeClock
    tmp: Path
    store_url: str
    live: str = ""  # the healthy background worker's card

    @property
    def store(self) -> Store:
        return self.board.store

    def set(self, ref: str, **fields: Any) -> None:
        with self.store.write() as tx:
            c = tx.card(self.board.get(ref).id)
            assert c is not None and tx.update_card(c.id, c.version, fields)

    def enqueue(self, kind: str, ref: str, role: str = "worker", **row: Any) -> int:
        c = self.board.get(ref)
        with self.store.write() as tx:
            got = records.enqueue(
                tx, kind, c.id, role, c.project_id, MACHINE, str(self.tmp), 1, 1, {}
            )
            assert got is not None
            if row:
                records.set_row(tx, got.id, **row)
            return got.id

    def lane(self, ref: str, path: Path, state: str = "active") -> None:
        c = self.board.get(ref)
        with self.store.write() as tx:
            tx.run(
                "INSERT INTO lanes (card_id, round, project_id, repo, path, branch, base, "
                "base_commit, state, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, 'main', 'abc123', ?, ?, ?)",
                (c.id, c.delivery_round, c.project_id, str(self.tmp), str(path),
                 f"lb/{c.ref}", state, tx.now(), tx.now()),
            )  # fmt: skip

    def keep_alive(self) -> None:
        """The background worker heartbeats, as a live one does every few minutes."""
        self.board.heartbeat(agent("bg", self.board.get(self.live).id), self.live)

    def report(self) -> dict[str, Any]:
        """The report in process and through ``lb doctor --json``; both write nothing."""
        before = snapshot(self.store)
        rep = doctor_report(self.store, self.clock, AGENTS, machine=MACHINE)
        assert render(rep)
        assert snapshot(self.store) == before, "doctor_report wrote to the store"
        env = {
            **os.environ,
            "LANEBOARD_DATABASE_URL": self.store_url,
            "LANEBOARD_NOW": str(self.clock.now_ms()),
            "LANEBOARD_MACHINE": MACHINE,
            "LANEBOARD_DEFAULT_AGENT": "scripted",  # a kind that runs here: no attention
            "XDG_CONFIG_HOME": str(self.tmp / "cfg"),
            "XDG_STATE_HOME": str(self.tmp / "state"),
        }
        env.pop("LANEBOARD_TOKEN", None)
        env.pop("LANEBOARD_TOKEN_FILE", None)
        out = subprocess.run(
            [sys.executable, "-m", "laneboard.cli.main", "doctor", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert snapshot(self.store) == before, "lb doctor wrote to the store"
        assert json.loads(out.stdout) == json.loads(json.dumps(rep)), "CLI and report differ"
        return rep


@pytest.fixture
def doc(board: Board, clock: FakeClock, tmp_path: Path, store_url: str) -> Doc:
    """An otherwise healthy board: nothing on it needs a person."""
    board.add_project(ME, "D", path=str(tmp_path))
    done = board.create_card(ME, "D", "finished", acceptance_mode="off")
    board.claim(ME, done.ref)
    board.move(ME, done.ref, "done")
    board.create_card(ME, "D", "waiting its turn", assignee="worker")
    live = board.create_card(ME, "D", "being worked", assignee="bg")
    board.claim(agent("bg", live.id), live.ref)
    review = board.create_card(ME, "D", "a person reviews this", acceptance_mode="human")
    board.claim(ME, review.ref)
    board.report(ME, review.ref, "done")
    board.move(ME, review.ref, "in_review")
    d = Doc(board, clock, tmp_path, store_url, live=live.ref)
    rep = d.report()
    assert rep["attention"] is False and rep["reasons"] == []
    assert [i["card"] for i in rep["in_review_waiting_human"]] == [review.ref]
    return d


def _cards(items: list[dict[str, Any]]) -> list[str]:
    return [str(i["card"]) for i in items]


def _looping(kind: str) -> Callable[[dict[str, Any]], list[str]]:
    return lambda r: _cards(r["looping"].get(kind, []))


# -- the situations ---------------------------------------------------------------------
# Each build gets the harness and whether to reach the bound (False: one step short) and
# returns the subject its finding names.


def rework_rounds(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "came back again", assignee="worker")
    d.set(c.ref, delivery_round=4 if at else 3)
    return c.ref


def review_reopens_retry(d: Doc, at: bool) -> str:
    orig = d.board.create_card(ME, "D", "under review", assignee="worker")
    meta = {"review_of": orig.id, "review_of_ref": orig.ref, "review_round": 1}
    r = d.board.create_card(
        ME,
        "D",
        f"Review {orig.ref}",
        assignee="reviewer",
        meta={**meta, "review_retry": 2 if at else 1},
        idempotency_key=review_key(orig.ref, 1),
    )
    return r.ref


def review_reopens_round(d: Doc, at: bool) -> str:
    orig = d.board.create_card(ME, "D", "reviewed again", assignee="worker")
    rnd = 3 if at else 2
    d.set(orig.ref, delivery_round=rnd)
    r = d.board.create_card(
        ME,
        "D",
        f"Review {orig.ref}",
        assignee="reviewer",
        meta={"review_of": orig.id, "review_of_ref": orig.ref, "review_round": rnd},
        idempotency_key=review_key(orig.ref, rnd),
    )
    return r.ref


def handoffs(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "handed off again and again", assignee="worker")
    for _ in range(5 if at else 4):
        d.enqueue("handoff", c.ref, state="done")
    return c.ref


def exhausted_handoffs(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "exhausts its attempts", assignee="worker")
    for _ in range(2 if at else 1):
        d.enqueue("handoff", c.ref, state="failed", attempts=3, last_error="no start")
    d.enqueue("handoff", c.ref, state="done")
    return c.ref


def failed_turns(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "fails its turns", assignee="worker")
    outcomes = ["timed_out", "lost", "interrupted"] if at else ["failed", "failed", "ok"]
    with d.store.write() as tx:
        for outcome in [*outcomes, "running"]:
            t = records.start_turn(tx, None, c.id, 1, None, "scripted", None, "p")
            if outcome != "running":
                records.finish_turn(
                    tx, t, outcome, final_text="", error="boom", exit_code=1, usage={}
                )
    return c.ref


def deferrals(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "cannot be admitted", assignee="worker")
    with d.store.write() as tx:
        records.record_deferral(tx, c.id, "m", 3 if at else 2, tx.now() + 60_000, "lane missing")
    return c.ref


def held(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "stopped at a bound", assignee="worker")
    if at:
        with d.store.write() as tx:
            card = tx.card(c.id)
            assert card is not None
            d.board.hold(tx, system(), card, "dispatch", 3, "the agent cannot be started.")
    else:  # a person's block is normal waiting, not a loop
        d.board.move(ME, c.ref, "blocked", reason="external", note="vendor")
    d.clock.advance(minutes=5)
    d.keep_alive()
    return c.ref


def awaiting(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "needs an answer", assignee="worker")
    w = agent("worker", c.id)
    d.board.claim(w, c.ref)
    d.board.move(w, c.ref, "awaiting", reason="E3", question="Which vendor?")
    return c.ref


def question_row(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "asked, never answered", assignee="worker")
    w = agent("worker", c.id)
    d.board.claim(w, c.ref)
    d.board.comment(w, c.ref, "Which API?", "question")
    state = "failed" if at else "done"
    d.enqueue("question", c.ref, "director", state=state, attempts=2, last_error="no release")
    return c.ref


def route_row(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "nobody could route me")
    state = "failed" if at else "done"
    d.enqueue("route", c.ref, "director", state=state, attempts=2, last_error="no assignee")
    return c.ref


def unowned(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "nobody owns me")
    d.clock.advance(30 * MINUTE_MS + (1 if at else 0))  # the route window is 30 min
    d.keep_alive()
    return c.ref


def orphaned(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "its agent never returned", assignee="worker")
    w = agent("worker", c.id)
    d.board.claim(w, c.ref)
    with d.store.write() as tx:
        started = tx.now()
    d.enqueue("handoff", c.ref, state="processing", pid=os.getpid(), started_at=started)
    d.clock.advance(2 * TIME.turn_timeout * 1000 + (1 if at else 0))
    d.board.heartbeat(w, c.ref)  # the agent is alive and heartbeating: not stuck
    d.keep_alive()
    return c.ref


def stale_heartbeat(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "went quiet", assignee="worker")
    d.board.claim(agent("worker", c.id), c.ref)
    d.clock.advance(TIME.stale_same_holder * 1000 + (1 if at else 0))
    d.keep_alive()
    return c.ref


def unreadable_heartbeat(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "heartbeat lost", assignee="worker")
    d.board.claim(agent("worker", c.id), c.ref)
    d.set(c.ref, heartbeat_at=None if at else d.clock.now_ms() + MINUTE_MS)
    return c.ref


def stale_lane(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "its worktree vanished", assignee="worker")
    d.lane(c.ref, d.tmp / "gone" if at else d.tmp)
    return c.ref


def unlanded(d: Doc, at: bool) -> str:
    c = d.board.create_card(ME, "D", "accepted, never landed", assignee="worker")
    d.set(c.ref, status="done", meta={"accepted_by": "loop-review", "accepted_round": 1})
    d.lane(c.ref, d.tmp, "active" if at else "landed")
    return c.ref


def overdue_schedule(d: Doc, at: bool) -> str:
    d.clock.advance(minutes=1)  # armed at 00:01; the next occurrence is 01:00
    job = {"project": "D", "title": "hourly check", "assignee": "ops"}
    Schedules(d.store, d.clock).add(ME, "hourly", "0 * * * *", job, timezone="UTC")
    d.clock.advance(minutes=59)  # 01:00
    if not at:
        assert run_schedule_pass(d.store, d.clock, "test").fired
    d.clock.advance(minutes=1)  # 01:01: the 01:00 minute has ended
    d.keep_alive()
    return "hourly"


def _supervisor(d: Doc) -> str:
    with d.store.write() as tx:
        iid = instances.register(tx, MACHINE, TIME, {"pid": os.getpid()})
        patrol.mark(tx, f"patrol:{MACHINE}", {})
    return iid


def wedged(d: Doc, at: bool) -> str:
    iid = _supervisor(d)
    tick = d.clock.now_ms()
    d.clock.advance(2 * TIME.turn_timeout * 1000 + (1 if at else 0))
    with d.store.write() as tx:  # the pool still beats; one tick never ends
        instances.beat(tx, iid, tick_started_at=tick)
        patrol.mark(tx, f"patrol:{MACHINE}", {})
    d.keep_alive()
    return "wedged"


def unresponsive(d: Doc, at: bool) -> str:
    _supervisor(d)
    d.clock.advance(TIME.pool_stale * 1000 + (1 if at else 0))
    return "unresponsive"


def stale_patrol(d: Doc, at: bool) -> str:
    iid = _supervisor(d)
    d.clock.advance(3 * TIME.tick_interval * 1000 + (1 if at else 0))
    with d.store.write() as tx:
        instances.beat(tx, iid)
    d.keep_alive()
    return f"patrol:{MACHINE}"


@dataclass(frozen=True)
class Situation:
    id: str
    build: Callable[[Doc, bool], str]
    reason: str  # the one reason it adds
    finding: Callable[[dict[str, Any]], list[str]]  # the subjects the report names
    detail: Callable[[dict[str, Any], str], None] | None = None
    has_below: bool = True


def _held_detail(r: dict[str, Any], ref: str) -> None:
    [h] = r["looping"]["held"]
    assert (h["cycle"], h["bound"], h["reason"], h["held_round"]) == ("dispatch", 3, "resource", 1)
    assert h["held_age_min"] == 5.0 and h["status"] == "blocked"


def _field(
    get: Callable[[dict[str, Any]], Any], want: Any
) -> Callable[[dict[str, Any], str], None]:
    def check(r: dict[str, Any], ref: str) -> None:
        assert get(r) == want

    return check


def _stuck(reason: str) -> Callable[[dict[str, Any], str], None]:
    def check(r: dict[str, Any], ref: str) -> None:
        assert [i["reason"] for i in r["stuck"]] == [reason]

    return check


def _sup(r: dict[str, Any]) -> list[str]:
    state = r["supervisor"]["state"]
    return [state] if state in ("wedged", "unresponsive") else []


SITUATIONS = [
    Situation("rework_rounds", rework_rounds, "1 looping cards", _looping("rework_rounds")),
    Situation(
        "review_reopens-retry",
        review_reopens_retry,
        "1 looping cards",
        _looping("review_reopens"),
        _field(lambda r: r["looping"]["review_reopens"][0]["review_retry"], 2),
    ),
    Situation(
        "review_reopens-round", review_reopens_round, "1 looping cards", _looping("review_reopens")
    ),
    Situation(
        "dispatch_retries-5_handoffs", handoffs, "1 looping cards", _looping("dispatch_retries")
    ),
    Situation(
        "dispatch_retries-2_exhausted",
        exhausted_handoffs,
        "1 looping cards",
        _looping("dispatch_retries"),
    ),
    Situation(
        "failures-3_turns",
        failed_turns,
        "1 looping cards",
        _looping("failures"),
        _field(lambda r: r["looping"]["failures"][0]["failed_turns"], 3),
    ),
    Situation("deferrals-3", deferrals, "1 looping cards", _looping("deferrals")),
    Situation("held", held, "1 looping cards", _looping("held"), _held_detail),
    Situation(
        "awaiting",
        awaiting,
        "1 awaiting cards",
        lambda r: _cards(r["awaiting"]),
        _field(lambda r: r["awaiting"][0]["reason"], "E3"),
        has_below=False,
    ),
    Situation(
        "question_lane-question",
        question_row,
        "1 exhausted question or route rows",
        lambda r: _cards(r["question_lane"]),
        _field(
            lambda r: (r["question_lane"][0]["kind"], r["question_lane"][0]["last_error"]),
            ("question", "no release"),
        ),
    ),
    Situation(
        "question_lane-route",
        route_row,
        "1 exhausted question or route rows",
        lambda r: _cards(r["question_lane"]),
    ),
    Situation("unowned", unowned, "1 unowned todo cards", lambda r: _cards(r["unowned"])),
    Situation(
        "orphaned",
        orphaned,
        "1 orphaned rows",
        lambda r: _cards(r["orphaned"]),
        _field(lambda r: r["orphaned"][0]["pid"], os.getpid()),
    ),
    Situation(
        "stuck-stale",
        stale_heartbeat,
        "1 stuck cards",
        lambda r: _cards(r["stuck"]),
        _stuck("heartbeat stale"),
    ),
    Situation(
        "stuck-unreadable",
        unreadable_heartbeat,
        "1 stuck cards",
        lambda r: _cards(r["stuck"]),
        _stuck("heartbeat unreadable"),
    ),
    Situation("lanes-stale", stale_lane, "1 stale lanes", lambda r: _cards(r["lanes"]["stale"])),
    Situation(
        "lanes-unlanded",
        unlanded,
        "1 unlanded accepted cards",
        lambda r: _cards(r["lanes"]["unlanded"]),
    ),
    Situation(
        "schedules-overdue",
        overdue_schedule,
        "1 overdue schedules",
        lambda r: [s["name"] for s in r["schedules"]["overdue"]],
        _field(lambda r: r["schedules"]["overdue"][0]["missed"], iso(CLOCK_START + HOUR_MS)),
    ),
    Situation("supervisor-wedged", wedged, "supervisor wedged", _sup),
    Situation("supervisor-unresponsive", unresponsive, "supervisor unresponsive", _sup),
    Situation(
        "patrol-stale",
        stale_patrol,
        "patrol has not completed recently",
        lambda r: [r["patrol"]["marker"]] if r["patrol"]["stale"] else [],
    ),
]
PARAMS = [pytest.param(s, True, id=f"{s.id}-at_bound") for s in SITUATIONS] + [
    pytest.param(s, False, id=f"{s.id}-below") for s in SITUATIONS if s.has_below
]


@pytest.mark.parametrize(("sit", "at"), PARAMS)
def test_each_situation_alone(doc: Doc, sit: Situation, at: bool) -> None:
    subject = sit.build(doc, at)
    rep = doc.report()
    if not at:
        assert rep["attention"] is False, rep["reasons"]
        assert rep["reasons"] == [] and sit.finding(rep) == []
        return
    assert rep["attention"] is True
    assert rep["reasons"] == [sit.reason]
    assert sit.finding(rep) == [subject]
    if sit.reason == "1 looping cards":
        assert rep["looping"]["total"] == 1
    if sit.detail is not None:
        sit.detail(rep, subject)


def test_an_orphan_whose_agent_died_is_not_reported(doc: Doc) -> None:
    """Only a live agent past twice the turn timeout is an orphan; a dead one is the
    pool's to recover."""
    c = doc.board.create_card(ME, "D", "agent died", assignee="worker")
    w = agent("worker", c.id)
    doc.board.claim(w, c.ref)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    with doc.store.write() as tx:
        started = tx.now()
    doc.enqueue("handoff", c.ref, state="processing", pid=int(gone.stdout), started_at=started)
    doc.clock.advance(2 * TIME.turn_timeout * 1000 + MINUTE_MS)
    doc.board.heartbeat(w, c.ref)
    doc.keep_alive()
    rep = doc.report()
    assert rep["orphaned"] == [] and rep["attention"] is False


def test_an_epic_in_progress_is_never_stuck(doc: Doc) -> None:
    e = doc.board.create_card(ME, "D", "an epic", kind="epic")
    doc.set(e.ref, status="in_progress", heartbeat_at=None)
    doc.clock.advance(minutes=600)
    doc.keep_alive()
    rep = doc.report()
    assert rep["stuck"] == [] and rep["attention"] is False


def test_a_supervisor_that_just_started_has_no_stale_patrol(doc: Doc) -> None:
    with doc.store.write() as tx:
        instances.register(tx, MACHINE, TIME, {"pid": os.getpid()})
    doc.clock.advance(1000)
    rep = doc.report()
    assert rep["supervisor"]["state"] == "running"
    assert rep["patrol"]["stale"] is False and rep["attention"] is False


def test_another_machines_patrol_does_not_vouch_for_this_one(doc: Doc) -> None:
    with doc.store.write() as tx:
        iid = instances.register(tx, MACHINE, TIME, {"pid": os.getpid()})
        patrol.mark(tx, f"patrol:{MACHINE}", {})
    doc.clock.advance(3 * TIME.tick_interval * 1000 + MINUTE_MS)
    with doc.store.write() as tx:
        instances.beat(tx, iid)
        patrol.mark(tx, "patrol:elsewhere", {})
    doc.keep_alive()
    rep = doc.report()
    assert rep["patrol"]["stale"] is True
    assert rep["reasons"] == ["patrol has not completed recently"]


def test_a_released_hold_does_not_make_a_later_block_a_loop(doc: Doc) -> None:
    c = doc.board.create_card(ME, "D", "held once", assignee="worker")
    with doc.store.write() as tx:
        card = tx.card(c.id)
        assert card is not None
        doc.board.hold(tx, system(), card, "dispatch", 3, "the agent cannot be started.")
    doc.board.move(ME, c.ref, "todo")  # a person fixed it: a fresh epoch
    doc.clock.advance(minutes=10)
    doc.board.move(ME, c.ref, "blocked", reason="external", note="vendor")
    rep = doc.report()
    assert rep["looping"].get("held", []) == [] and rep["attention"] is False
