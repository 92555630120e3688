"""Every bound ends in a hold with its cycle's name, and the operator hears of it once."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.domain.timecontract import TimeContract
from laneboard.store import Store, open_store
from laneboard.supervisor import alerts, notifier, opening, records
from laneboard.supervisor.holds import hold_card
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.patrol import PATROL_ACTOR, PatrolSettings
from laneboard.supervisor.pool import Pool
from laneboard.supervisor.runtime import Runtime

from .helpers import (
    RealNowClock,
    Running,
    config,
    occupy_slot,
    settled,
    unadmittable_project,
    wait_for,
)


def _runtime(store: Store, tmp: Path, sink: Path | None = None) -> Runtime:
    rt = Runtime(store, config(tmp), "m", LogFile(str(tmp / "log")), pool_alive=lambda: True)
    if sink is not None:
        rt.patrol_settings = PatrolSettings(  # type: ignore[attr-defined]
            notify_command=f"cat >> {shlex.quote(str(sink))}"
        )
    return rt


def _lines(sink: Path) -> list[dict[str, Any]]:
    if not sink.exists():
        return []
    return [json.loads(line) for line in sink.read_text().splitlines() if line.strip()]


def _flush_until(rt: Runtime, n: int) -> list[dict[str, Any]]:
    """Flush until ``n`` alerts went out: on PostgreSQL an event is followed once it is
    settled (no older transaction of the server is still open)."""
    sent: list[dict[str, Any]] = []

    def more() -> bool:
        sent.extend(notifier.flush(rt))
        return len(sent) >= n

    wait_for(more, what=f"{n} alerts followed")
    return sent


def test_holds_and_workflow_alerts_reach_notify_once(store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "H", path=str(tmp_path))
    card = board.create_card(human(), "H", "loops")
    board.claim(agent("worker"), card.ref)
    sink = tmp_path / "notified.jsonl"
    rt = _runtime(store, tmp_path, sink)
    notifier.start(rt)
    held = hold_card(rt, card.id, "no_delivery", 1, "3 turns ended without a delivery")
    assert held is not None and held.status.value == "blocked"
    assert held.meta["hold_cycle"] == "no_delivery"
    with store.write() as tx:  # a workflow alert, and one the patrol sends itself
        alerts.raise_alert(
            tx, "workflow|rework_bound|1", "round=4", "warning", {"alert": "rework_bound"},
            actor=rt.actor, card_id=card.id,
        )  # fmt: skip
        alerts.raise_alert(tx, "patrol|x", "t1", "warning", {"row": "x"}, actor=PATROL_ACTOR)
    sent = _flush_until(rt, 2)
    got = _lines(sink)
    assert got == sent and len(got) == 2
    hold, workflow = got
    assert (hold["row"], hold["card"], hold["cycle"]) == ("hold", card.ref, "no_delivery")
    assert hold["reason"] == "resource" and "without a delivery" in hold["detail"]
    assert hold["release"] == f"lb card move {card.ref} todo"
    assert (workflow["alert"], workflow["card"]) == ("rework_bound", card.ref)
    assert notifier.flush(rt) == [] and len(_lines(sink)) == 2  # once
    again = _runtime(store, tmp_path, sink)  # a restarted supervisor does not repeat them
    notifier.start(again)
    assert notifier.flush(again) == [] and len(_lines(sink)) == 2
    assert hold_card(rt, card.id, "no_delivery", 1, "again") is not None  # already held
    assert notifier.flush(rt) == []
    store.close()


def test_recovery_closes_a_delivered_row_and_never_runs_it_again(
    store_url: str, tmp_path: Path
) -> None:
    """Killed after the agent delivered, before its turn row closed: the restart closes
    the row as delivered, counts no lost turn and holds nothing."""
    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "R", path=str(tmp_path))
    done, mid = (board.create_card(human(), "R", t, acceptance_mode="off") for t in "ab")
    rt = _runtime(store, tmp_path)
    rows = {}
    for c in (done, mid):
        with store.write() as tx:
            new = rt.board.claim_in(tx, rt.actor, c.id, "worker", None)
            row = records.enqueue(
                tx, "handoff", c.id, "worker", c.project_id, "m", str(tmp_path),
                new.delivery_round, new.claim_epoch, {"agent_kind": "scripted"},
            )  # fmt: skip
            assert row is not None
            # two crashes already counted: a third lost turn would hold the card
            records.set_row(tx, row.id, recoveries=2)
            assert records.take_row(tx, row.id, "m:gone:1")
            records.start_turn(tx, row.id, c.id, new.delivery_round, None, "scripted", "s", "p")
            rows[c.ref] = row.id
    worker = agent("worker")
    with store.write() as tx:
        fresh = tx.card(done.id)
        assert fresh is not None
        worker = replace(worker, card_id=fresh.id, epoch=fresh.claim_epoch)
    board.move(worker, done.ref, "done", reason="delivered")  # the delivery landed
    report = {r["queue"]: r for r in Pool(rt).recover()}
    assert report[rows[done.ref]] == {
        "queue": rows[done.ref], "action": "closed", "outcome": "delivered"
    }  # fmt: skip
    assert report[rows[mid.ref]]["action"] == "held"  # its own turn, lost a third time
    with store.read() as tx:
        outcomes = {t["queue_id"]: t["outcome"] for t in tx.all("SELECT * FROM turns")}
        closed = records.queue_row(tx, rows[done.ref])
    assert outcomes == {rows[done.ref]: "delivered", rows[mid.ref]: "lost"}
    assert closed is not None and closed.state == "done"
    assert board.get(done.ref).status.value == "done"
    held = board.get(mid.ref)
    assert held.status.value == "blocked" and held.meta["hold_cycle"] == "crash"
    assert Pool(rt).recover() == []  # nothing is recovered twice
    store.close()


def _short_turns(tmp: Path) -> Any:
    t = replace(TimeContract(), turn_timeout=60, tick_interval=50)
    return config(tmp, time=t.validate())


def test_a_hang_is_retried_once_then_held(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    proj = tmp_path / "proj"
    proj.mkdir()
    board.add_project(human(), "G", path=str(proj))
    marks = [proj / "hang1", proj / "hang2"]
    script = [
        {"run": f"touch {marks[0]}", "attempt": 1},
        {"run": f"touch {marks[1]}", "attempt": 2},
        {"hang": True},
    ]
    ref = board.create_card(
        human(), "G", "hangs", acceptance_mode="off", meta={"script": script}
    ).ref
    sink = tmp_path / "notified.jsonl"
    run = Running(sqlite_store_url, _short_turns(tmp_path), clock)
    run.rt.patrol_settings = PatrolSettings(  # type: ignore[attr-defined]
        notify_command=f"cat >> {shlex.quote(str(sink))}"
    )
    with run:
        for m in marks:
            wait_for(m.exists, what=f"the agent hanging ({m.name})")
            clock.advance(seconds=61)  # past the one-minute turn timeout
        wait_for(lambda: board.get(ref).status.value == "blocked", what="the hang's hold")
        wait_for(lambda: settled(store), what="turns recorded")
        wait_for(lambda: bool(_lines(sink)), what="the hold notified")
    card = board.get(ref)
    assert (card.meta["hold_cycle"], card.meta["hold_bound"]) == ("hang", 2)
    with store.read() as tx:
        turns = [t["outcome"] for t in tx.all("SELECT outcome FROM turns ORDER BY id")]
        failed = records.queue_rows(tx, states=("failed",))
    assert turns == ["timed_out", "timed_out"]
    assert failed and failed[0].last_error  # a held card's failed row says why
    (sent,) = _lines(sink)  # the one hold, sent by the tick after it
    assert (sent["card"], sent["cycle"]) == (ref, "hang")
    store.close()


def test_turns_that_never_deliver_end_in_a_hold(sqlite_store_url: str, tmp_path: Path) -> None:
    """A worker that ends every turn without delivering: one handoff of 3 turns, then a
    ``no_delivery`` hold — never a fresh set of turns from stale-claim recovery."""
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    proj = tmp_path / "proj"
    proj.mkdir()
    board.add_project(human(), "N", path=str(proj))
    ref = board.create_card(
        human(), "N", "idle worker", acceptance_mode="off", meta={"script": [{"say": "hmm"}]}
    ).ref
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value == "blocked", what="the no_delivery hold")
        wait_for(lambda: settled(store), what="turns recorded")
        clock.advance(minutes=31)  # past the stale-claim window: nothing starts again
        wait_for(lambda: settled(store), what="a quiet board")
    card = board.get(ref)
    assert card.meta["hold_cycle"] == "no_delivery"
    with store.read() as tx:
        assert [t["outcome"] for t in tx.all("SELECT outcome FROM turns")] == ["ok"] * 3
        assert len(records.queue_rows(tx, states=("failed",))) == 1
    assert [e.type for e in board.events(card=ref, limit=500)].count("card.claimed") == 1
    store.close()


def test_the_third_admission_failure_says_so_and_alerts(store_url: str, tmp_path: Path) -> None:
    from laneboard.supervisor.poll import backoff_ms, poll

    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    repo = unadmittable_project(tmp_path)
    board.add_project(human(), "G", path=str(repo))
    ref = board.create_card(human(), "G", "nowhere to run").ref
    occupy_slot(repo, ref)
    rt = _runtime(store, tmp_path)
    for n in range(1, 4):
        assert poll(rt).deferred[0]["failures"] == n
        clock.advance(seconds=backoff_ms(n) / 1000 + 1)
    notes = [c.body for c in board.comments(ref) if c.kind.value == "note"]
    assert len(notes) == 1 and "3 times" in notes[0] and "5th failure" in notes[0]
    sent = [e.payload for e in board.events(limit=500) if e.type == "alert"]
    assert [(a["alert"], a["card"], a["failures"]) for a in sent] == [("admission_failing", ref, 3)]
    store.close()


def test_no_resident_pool_alerts_once(store_url: str, tmp_path: Path) -> None:
    from laneboard.supervisor.poll import poll

    store = open_store(store_url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "Z", path=str(tmp_path))
    board.create_card(human(), "Z", "waits for a pool")
    alive = [False]
    rt = Runtime(
        store, config(tmp_path), "box", LogFile(str(tmp_path / "log")), pool_alive=lambda: alive[0]
    )

    def sent() -> list[dict[str, Any]]:
        return [e.payload for e in board.events(limit=500) if e.type == "alert"]

    assert "no resident pool" in (poll(rt).skipped or "")
    assert poll(rt).skipped and len(sent()) == 1  # once, not per poll
    assert (sent()[0]["alert"], sent()[0]["machine"]) == ("no_resident", "box")
    alive[0] = True
    assert poll(rt).claimed  # a pool runs: the alert is cleared
    alive[0] = False
    poll(rt)
    assert len(sent()) == 2  # the next absence is news again
    alive[0] = True
    assert not poll(rt).claimed  # its own absence alert: cleared by the next poll at once
    with store.read() as tx:
        assert tx.alert_row("no_resident|box") is None
    store.close()


def test_an_absence_alert_raised_elsewhere_is_read_once_a_minute(
    store_url: str, tmp_path: Path
) -> None:
    """While a pool runs here nobody raises its absence; one another process raised (it
    judged this pool gone) is read and cleared within a minute, not read by every poll."""
    from laneboard.supervisor.alerts import raise_alert
    from laneboard.supervisor.poll import ABSENCE_READ_MS, poll

    clock = RealNowClock()
    store = open_store(store_url, clock)
    Board(store).add_project(human(), "Y", path=str(tmp_path))
    rt = _runtime(store, tmp_path)
    poll(rt)
    with store.write() as tx:  # another process on this machine saw no pool
        raise_alert(tx, "no_resident|m", "absent", "warning", {"alert": "no_resident"},
                    actor=rt.actor)  # fmt: skip
    poll(rt)

    def absent() -> bool:
        with store.read() as tx:
            return tx.alert_row("no_resident|m") is not None

    assert absent()  # read at most once a minute
    clock.advance(seconds=ABSENCE_READ_MS / 1000)
    poll(rt)
    assert not absent()
    store.close()


def test_a_failed_dispatch_is_retried_after_a_backoff(store_url: str, tmp_path: Path) -> None:
    from laneboard.supervisor.poll import poll

    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "D", path=str(tmp_path))
    card = board.create_card(human(), "D", "its agent would not start")
    with store.write() as tx:  # what outcomes.dispatch_failed leaves after a first failure
        meta = {**card.meta, "dispatch_failures": 1, "dispatch_failed_at": tx.now()}
        tx.update_card(card.id, card.version, {"meta": meta})
    rt = _runtime(store, tmp_path)
    first = poll(rt)
    assert not first.claimed and first.deferred[0]["reason"] == "dispatch backoff"
    clock.advance(seconds=9)
    assert not poll(rt).claimed
    clock.advance(seconds=2)  # 10 s after the failure
    assert poll(rt).claimed == [card.ref]
    store.close()


def test_no_turn_starts_after_its_round_was_delivered(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delivery lands while the session opens (the check at the row's start saw the
    card in progress): the turn is not started, the row is closed as delivered."""
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    proj = tmp_path / "proj"
    proj.mkdir()
    board.add_project(human(), "T", path=str(proj))
    card = board.create_card(human(), "T", "fast", acceptance_mode="off")
    rt = _runtime(store, tmp_path)
    with store.write() as tx:
        new = rt.board.claim_in(tx, rt.actor, card.id, "worker", None)
        row = records.enqueue(
            tx, "handoff", card.id, "worker", card.project_id, "m", str(proj),
            new.delivery_round, new.claim_epoch, {"agent_kind": "scripted"},
        )  # fmt: skip
        assert row is not None and records.take_row(tx, row.id, "m:me:1")
        taken = records.queue_row(tx, row.id)
    pool = Pool(rt)
    opened = opening.open_turn

    def open_then_deliver(*args: Any) -> Any:
        got = opened(*args)
        worker = replace(agent("worker"), card_id=card.id, epoch=new.claim_epoch)
        board.move(worker, card.ref, "done", reason="delivered meanwhile")
        return got

    monkeypatch.setattr(opening, "open_turn", open_then_deliver)
    assert taken is not None
    try:
        pool._turn(taken)
    finally:
        pool.shutdown(wait_s=5)
    with store.read() as tx:
        assert tx.all("SELECT id FROM turns") == []
        closed = records.queue_row(tx, row.id)
    assert closed is not None and closed.state == "done"
    assert "delivered" in str(closed.payload.get("note"))
    store.close()
