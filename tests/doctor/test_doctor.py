"""lb doctor: each stuck / looping / orphaned situation is reported with attention: true;
a healthy board reports attention: false; the report writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import human, system
from laneboard.store import Store, open_store
from laneboard.supervisor import records
from laneboard.supervisor.doctor import doctor_report, render

ME = human("alice")

AGENTS = SupervisorConfig(default_agent="scripted")  # every role has a kind here


def _report(store: Store, clock: FakeClock) -> dict[str, Any]:
    with store.read() as tx:
        before = [dict(r) for r in tx.all("SELECT * FROM cards ORDER BY id")]
        events = tx.max_event_id()
    rep = doctor_report(store, clock, AGENTS, machine="doctor-test")
    with store.read() as tx:
        assert [dict(r) for r in tx.all("SELECT * FROM cards ORDER BY id")] == before
        assert tx.max_event_id() == events, "doctor wrote an event"
    assert render(rep)
    return rep


def _cards(items: list[dict[str, Any]]) -> list[str]:
    return [str(i["card"]) for i in items]


def _set(board: Board, ref: str, **fields: Any) -> None:
    with board.store.write() as tx:
        c = board.get(ref)
        assert tx.update_card(c.id, c.version, fields)


def test_a_healthy_board_needs_no_attention(board: Board, clock: FakeClock) -> None:
    board.add_project(ME, "H")
    board.create_card(ME, "H", "waiting its turn")
    busy = board.create_card(ME, "H", "being worked")
    board.claim(ME, busy.ref)
    done = board.create_card(ME, "H", "finished", acceptance_mode="off")
    board.claim(ME, done.ref)
    board.move(ME, done.ref, "done")
    clock.advance(minutes=5)
    rep = _report(board.store, clock)
    assert rep["attention"] is False, rep["reasons"]
    assert rep["looping"]["total"] == 0 and rep["stuck"] == []


def test_stuck_cards(board: Board, clock: FakeClock) -> None:
    board.add_project(ME, "S")
    stale = board.create_card(ME, "S", "stale")
    board.claim(ME, stale.ref)
    broken = board.create_card(ME, "S", "unreadable")
    board.claim(ME, broken.ref)
    _set(board, broken.ref, heartbeat_at=None)
    epic = board.create_card(ME, "S", "an epic", kind="epic")
    _set(board, epic.ref, status="in_progress", heartbeat_at=clock.now_ms())
    clock.advance(minutes=31)
    rep = _report(board.store, clock)
    assert rep["attention"] is True
    reasons = {i["card"]: i["reason"] for i in rep["stuck"]}
    assert reasons == {stale.ref: "heartbeat stale", broken.ref: "heartbeat unreadable"}


def test_review_waiting_and_blocked_acceptance(board: Board, clock: FakeClock) -> None:
    board.add_project(ME, "R")
    human_card = board.create_card(ME, "R", "needs a person", acceptance_mode="human")
    board.claim(ME, human_card.ref)
    board.report(ME, human_card.ref, "done")
    board.move(ME, human_card.ref, "in_review")
    clock.advance(minutes=10)
    rep = _report(board.store, clock)
    assert _cards(rep["in_review_waiting_human"]) == [human_card.ref]
    assert rep["in_review_waiting_human"][0]["age_min"] == 10.0
    assert rep["attention"] is False, "waiting on a person is a fact, not an alarm"
    _set(board, human_card.ref, meta={"accepted_by": "loop-review", "accepted_round": 1})
    rep = _report(board.store, clock)
    assert _cards(rep["blocked_acceptance"]) == [human_card.ref] and rep["attention"] is True


def test_looping_cards(board: Board, clock: FakeClock, tmp_path: Path) -> None:
    board.add_project(ME, "L", path=str(tmp_path))
    sysactor = system()
    rework = board.create_card(ME, "L", "came back three times")
    _set(board, rework.ref, delivery_round=4)
    review = board.create_card(
        ME, "L", "review", meta={"review_of": rework.ref, "review_round": 4, "review_retry": 2}
    )
    retried = board.create_card(ME, "L", "five handoffs")
    exhausted = board.create_card(ME, "L", "two exhausted handoffs")
    failing = board.create_card(ME, "L", "three failed turns")
    deferred = board.create_card(ME, "L", "three deferrals")
    held = board.create_card(ME, "L", "held")
    awaiting = board.create_card(ME, "L", "awaiting")
    asked = board.create_card(ME, "L", "question row exhausted")
    orphan = board.create_card(ME, "L", "orphaned row")
    with board.store.write() as tx:
        for i in range(5):
            row = records.enqueue(
                tx, "handoff", retried.id, "worker", retried.project_id, "m", str(tmp_path),
                1, i, {},
            )  # fmt: skip
            assert row is not None
            records.set_row(tx, row.id, state="done")
        for _ in range(2):
            row = records.enqueue(
                tx, "handoff", exhausted.id, "worker", exhausted.project_id, "m",
                str(tmp_path), 1, 1, {},
            )  # fmt: skip
            assert row is not None
            records.set_row(tx, row.id, state="failed", attempts=3)
        for _ in range(3):
            t = records.start_turn(tx, None, failing.id, 1, None, "scripted", None, "p")
            records.finish_turn(tx, t, "failed", final_text="", error="boom", exit_code=1, usage={})
        records.record_deferral(tx, deferred.id, "m", 3, tx.now() + 60_000, "lane missing")
        row = records.enqueue(
            tx, "question", asked.id, "director", asked.project_id, "m#director",
            str(tmp_path), 1, 1, {"question": 1},
        )  # fmt: skip
        assert row is not None
        records.set_row(tx, row.id, state="failed", attempts=2, last_error="no release")
        row = records.enqueue(
            tx, "handoff", orphan.id, "worker", orphan.project_id, "m", str(tmp_path), 1, 1, {}
        )
        assert row is not None
        records.set_row(tx, row.id, state="processing", pid=os.getpid(), started_at=tx.now())
        card = tx.card(held.id)
        assert card is not None
        board.hold(tx, sysactor, card, "rework", 4, "it keeps coming back.", reason="decision")
    board.claim(ME, awaiting.ref)
    board.move(ME, awaiting.ref, "awaiting", reason="E3", question="Which vendor?")
    unowned = board.create_card(ME, "L", "nobody owns me")
    clock.advance(minutes=61)  # past the route window and 2 x the turn timeout
    rep = _report(board.store, clock)
    assert rep["attention"] is True
    loop = rep["looping"]
    assert _cards(loop["rework_rounds"]) == [rework.ref]
    assert _cards(loop["review_reopens"]) == [review.ref]
    assert sorted(_cards(loop["dispatch_retries"])) == sorted([retried.ref, exhausted.ref])
    assert _cards(loop["failures"]) == [failing.ref]
    assert _cards(loop["deferrals"]) == [deferred.ref]
    [h] = loop["held"]
    assert h["card"] == held.ref and h["cycle"] == "rework" and h["held_age_min"] == 61.0
    assert loop["total"] == 7
    [a] = rep["awaiting"]
    assert a["card"] == awaiting.ref and a["reason"] == "E3"
    assert _cards(rep["question_lane"]) == [asked.ref]
    assert rep["question_lane"][0]["last_error"] == "no release"
    assert unowned.ref in _cards(rep["unowned"])
    [o] = rep["orphaned"]
    assert o["card"] == orphan.ref and o["pid"] == os.getpid()


def test_lb_doctor_json_subprocess(tmp_path: Path) -> None:
    db = tmp_path / "board.db"
    clock = FakeClock()
    store = open_store(str(db), clock)
    board = Board(store)
    board.add_project(ME, "C")
    c = board.create_card(ME, "C", "stuck")
    board.claim(ME, c.ref)
    store.close()
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": str(db),
        "LANEBOARD_DEFAULT_AGENT": "scripted",
        "LANEBOARD_NOW": str(clock.now_ms() + 31 * 60_000),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["attention"] is True
    assert _cards(rep["stuck"]) == [c.ref]
    env["LANEBOARD_NOW"] = str(clock.now_ms() + 60_000)
    out = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(out.stdout)["attention"] is False


def test_a_machine_without_a_supervisor_does_not_judge_its_agents_in_a_cluster(
    tmp_path: Path,
) -> None:
    """On a machine that only looks at the board (a laptop, while other machines run the
    cluster's supervisors), the agent kinds it lacks are not a reason for attention:
    that machine runs no agent. With no supervisor anywhere they still are (a setup being
    checked before its first start)."""
    import os as _os

    from laneboard.domain.timecontract import TimeContract
    from laneboard.supervisor import instances

    clock = FakeClock()
    store = open_store(f"sqlite:///{tmp_path / 'b.db'}", clock)
    none = SupervisorConfig(default_agent="no-such-kind")  # this machine can run no role
    alone = doctor_report(store, clock, none, machine="laptop")
    assert any("has no available agent kind" in r for r in alone["reasons"]), alone["reasons"]
    with store.write() as tx:  # a supervisor runs on another machine of the cluster
        instances.register(tx, "worker1", TimeContract(), {"pid": _os.getpid()})
    rep = doctor_report(store, clock, none, machine="laptop")
    assert not any("has no available agent kind" in r for r in rep["reasons"]), rep["reasons"]
    assert "no supervisor runs on this machine" in render(rep)
    store.close()
