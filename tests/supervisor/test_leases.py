"""A lease held by a dead holder never stalls the board, and status and doctor name it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store, open_store
from laneboard.supervisor import ticker as ticks
from laneboard.supervisor.doctor import doctor_report
from laneboard.supervisor.holds import hold_card
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.status import status_report

from .helpers import RealNowClock, config

TTL = 30 * 60_000  # the tick lease of a 30-minute turn timeout


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _setup(url: str, tmp: Path) -> tuple[Store, Board, Runtime]:
    store = open_store(url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "L", path=str(tmp))
    board.create_card(human(), "L", "ready")
    rt = Runtime(store, config(tmp), "m", LogFile(str(tmp / "log")), pool_alive=lambda: True)
    return store, board, rt


def test_a_dead_process_lease_is_named_then_taken_over(store_url: str, tmp_path: Path) -> None:
    store, _, rt = _setup(store_url, tmp_path)
    dead = f"m:{_dead_pid()}:1"
    with store.write() as tx:  # a supervisor SIGKILLed mid-tick left its lease
        assert tx.acquire_lock(ticks.tick_lock("m"), dead, TTL)
    (lease,) = status_report(store, machine="m")["leases"]
    assert (lease["name"], lease["holder"], lease["blocking"]) == ("tick:m", dead, True)
    assert "is gone" in lease["holder_dead"]
    reasons = doctor_report(store, machine="m")["reasons"]
    assert any("tick:m lease is held by " + dead in r for r in reasons), reasons
    result = ticks.Ticker(rt).tick()
    assert result.state == "ran"  # at once, not after the 30-minute TTL
    assert result.passes["poll"]["claimed"] == ["L-1"]
    assert status_report(store, machine="m")["leases"] == []  # released after the tick
    store.close()


def test_a_dead_instance_lease_is_taken_over(store_url: str, tmp_path: Path) -> None:
    store, _, rt = _setup(store_url, tmp_path)
    with store.write() as tx:  # another machine's supervisor, already marked dead
        tx.insert_supervisor("far:4242:1", "far", 4242, tx.now(), {})
        tx.mark_supervisor_dead("far:4242:1")
        assert tx.acquire_lock(ticks.tick_lock("m"), "far:4242:99", TTL)
    assert status_report(store, machine="m")["leases"][0]["blocking"] is True
    assert ticks.Ticker(rt).tick().state == "ran"
    store.close()


def test_a_live_holder_keeps_its_lease(store_url: str, tmp_path: Path) -> None:
    store, _, rt = _setup(store_url, tmp_path)
    alive = f"m:{os.getpid()}:other-ticker"
    with store.write() as tx:
        assert tx.acquire_lock(ticks.tick_lock("m"), alive, TTL)
    result = ticks.Ticker(rt).tick()
    assert result.state == "skipped" and alive in result.reason
    (lease,) = status_report(store, machine="m")["leases"]
    assert lease["blocking"] is False and lease["holder_dead"] is None
    assert not any("lease" in r for r in doctor_report(store, machine="m")["reasons"])
    store.close()


def test_doctor_counts_looping_cards_not_entries(store_url: str, tmp_path: Path) -> None:
    store, board, rt = _setup(store_url, tmp_path)
    card = board.get("L-1")
    with store.write() as tx:  # round 4 (rework rounds) and held: two entries, one card
        tx.update_card(card.id, card.version, {"delivery_round": 4})
    assert hold_card(rt, card.id, "no_delivery", 1, "never delivered") is not None
    report = doctor_report(store, machine="m")
    entries = [x for k, v in report["looping"].items() if k != "total" for x in v]
    assert len(entries) == 2 and report["looping"]["total"] == 1
    assert "1 looping cards" in report["reasons"]
    store.close()


def test_sessions_of_done_cards_close_and_records_tell_the_truth(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    from dataclasses import replace

    from laneboard.domain.timecontract import TimeContract
    from laneboard.supervisor import records

    from .helpers import Running, settled, wait_for

    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    proj = tmp_path / "proj"
    proj.mkdir()
    board.add_project(human(), "S", path=str(proj))
    refs = [
        board.create_card(
            human(), "S", f"c{i}", acceptance_mode="off", meta={"script": [{"deliver": "ok"}]}
        ).ref
        for i in range(3)
    ]
    cfg = config(tmp_path, time=replace(TimeContract(), ping_interval=1))
    with Running(sqlite_store_url, cfg, clock) as run:
        wait_for(lambda: all(board.get(r).status.value == "done" for r in refs), what="done")
        wait_for(lambda: settled(store), what="turns recorded")
        # within a ping, not after the idle TTL: a done card's session is closed
        wait_for(
            lambda: (
                run.sup.pool.describe()["open_sessions"] == 0
                and status_report(store, clock, cfg, "test-machine")["sessions"] == []
            ),
            what="sessions closed",
        )
    with store.read() as tx:
        states = {r.state for r in records.sessions(tx, ("open", "running", "idle", "closed"))}
    assert states == {"closed"}
    with store.write() as tx:  # a crash left a record claiming a process that is gone
        tx.insert_session("scripted", "worker:S-9:r1", {
            "card_id": None, "role": "worker", "cwd": str(proj), "native_id": "x", "round": 1,
            "state": "running", "replayed": False, "pid": _dead_pid(),
        })  # fmt: skip
    assert len(status_report(store, clock, cfg, "test-machine")["sessions"]) == 1
    with Running(sqlite_store_url, cfg, clock):
        pass  # a start settles what the crash left
    assert status_report(store, clock, cfg, "test-machine")["sessions"] == []
    store.close()


def test_a_landing_during_the_boundary_check_is_explained(
    sqlite_store_url: str, repo: Path, tmp_path: Path
) -> None:
    """A landing that merged but has not yet recorded its event when a turn ends: the
    post-turn check waits for it, and the merge is explained, not a violation."""
    import threading

    from laneboard.domain.model import system
    from laneboard.supervisor import boundary
    from laneboard.workspace.land import LANDING

    def git(cwd: Path, *args: str) -> str:
        return subprocess.run(
            ["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, check=True,
            capture_output=True, text=True,
        ).stdout  # fmt: skip

    store, board, rt = _setup(sqlite_store_url, tmp_path)
    card = board.get("L-1")
    before = boundary.fingerprint(str(repo))
    with store.read() as tx:
        mark = tx.max_event_id()
    git(repo, "switch", "-q", "-c", "lane/L-9")
    (repo / "x.txt").write_text("x\n")
    git(repo, "add", "x.txt")
    git(repo, "commit", "-q", "-m", "lane work")
    git(repo, "switch", "-q", "main")
    merged, proceed = threading.Event(), threading.Event()

    def landing() -> None:
        with LANDING:
            git(repo, "merge", "-q", "--no-ff", "-m", "Land L-9", "lane/L-9")
            merged.set()
            proceed.wait(30)
            commit = git(repo, "rev-parse", "HEAD").strip()
            with store.write() as tx:
                tx.append_event("lane.landed", system("lanes"), card_id=card.id,
                                payload={"merge_commit": commit})  # fmt: skip

    lander = threading.Thread(target=landing)
    lander.start()
    assert merged.wait(30)
    got: list[list[str]] = []
    checker = threading.Thread(
        target=lambda: got.append(boundary.check_after_turn(rt, card, str(repo), before, mark))
    )
    checker.start()
    checker.join(0.3)
    assert checker.is_alive()  # it waits for the landing to record its merge
    proceed.set()
    lander.join(30)
    checker.join(30)
    assert got == [[]]
    assert board.get("L-1").status.value == "todo"  # nothing held
    store.close()


def test_the_fingerprint_before_a_turn_waits_for_a_landing(
    sqlite_store_url: str, repo: Path, tmp_path: Path
) -> None:
    """The checkout is never read half-way through a landing's merge (which the check after
    the turn could not explain)."""
    import threading

    from laneboard.supervisor.pool import Pool
    from laneboard.workspace.land import LANDING
    from laneboard.workspace.lane_admit import LaneAdmitter

    store = open_store(sqlite_store_url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "B", path=str(repo))
    card = board.create_card(human(), "B", "in a lane")
    LaneAdmitter(board).admit(card, board.project("B"))
    rt = Runtime(store, config(tmp_path), "m", LogFile(str(tmp_path / "log")))
    got: list[object] = []
    with LANDING:  # a landing is merging
        reader = threading.Thread(target=lambda: got.append(Pool(rt)._before_turn(card)))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not got
    reader.join(30)
    checkout, before, _, has_lane = got[0]  # type: ignore[misc]
    assert has_lane
    assert checkout == str(repo.resolve()) or checkout == str(repo)
    assert before is not None
    store.close()


def test_a_resident_ticker_keeps_its_tick_lease_and_renews_it_at_half_ttl(
    store_url: str, tmp_path: Path
) -> None:
    store, board, rt = _setup(store_url, tmp_path)
    clock = store.clock
    assert isinstance(clock, RealNowClock)
    ticker = ticks.Ticker(rt)
    ticker.resident = True
    assert ticker.tick().state == "ran"
    with store.read() as tx:
        first = tx.lock_row(ticks.tick_lock("m"))
    assert first is not None and first["holder"] == ticker.holder  # kept after the tick
    writes: list[int] = []
    write = store.write

    def counted() -> Any:
        writes.append(1)
        return write()

    store.write = counted  # type: ignore[method-assign]
    board.create_card(human(), "L", "another")
    # a new card is news for the poll alone: no lease to take, give back or renew
    result = ticker.tick(news={"card.created"})
    assert result.state == "ran" and list(result.passes) == ["poll"]
    assert result.passes["poll"]["claimed"] == ["L-2"]
    claim_writes = len(writes)
    with store.read() as tx:
        assert tx.lock_row(ticks.tick_lock("m")) == first
    clock.advance(seconds=TTL / 2000 + 1)  # past half its TTL: the next tick renews it
    assert ticker.tick(news={"card.created"}).state == "ran"
    assert len(writes) == claim_writes + 1
    with store.read() as tx:
        renewed = tx.lock_row(ticks.tick_lock("m"))
    assert renewed is not None and renewed["holder"] == ticker.holder
    assert int(renewed["expires_at"]) > int(first["expires_at"])
    store.write = write  # type: ignore[method-assign]
    ticker.let_go()  # at the supervisor's shutdown
    assert status_report(store, machine="m")["leases"] == []
    store.close()


def test_a_resident_ticker_skips_while_another_process_holds_the_lease(
    store_url: str, tmp_path: Path
) -> None:
    store, _, rt = _setup(store_url, tmp_path)
    alive = f"m:{os.getpid()}:a-one-shot-tick"
    with store.write() as tx:
        assert tx.acquire_lock(ticks.tick_lock("m"), alive, TTL)
    ticker = ticks.Ticker(rt)
    ticker.resident = True
    result = ticker.tick()
    assert result.state == "skipped" and alive in result.reason
    with store.write() as tx:
        assert tx.release_lock(ticks.tick_lock("m"), alive)
    assert ticker.tick().state == "ran"
    with store.read() as tx:
        assert tx.lock_row(ticks.tick_lock("m"))["holder"] == ticker.holder
    store.close()


def test_the_heartbeat_carries_the_running_ticks_start_for_the_wedged_verdict(
    store_url: str, tmp_path: Path
) -> None:
    from laneboard.supervisor import instances
    from laneboard.supervisor.loop import Supervisor

    store, _, rt = _setup(store_url, tmp_path)
    sup = Supervisor(rt)
    with store.write() as tx:
        rt.instance = instances.register(tx, "m", rt.config.time, {})
    t = rt.config.time
    sup.ticker.started_at = rt.now() - 2 * t.turn_timeout * 1000 - 1  # a tick stuck this long
    sup.pulse_once()
    with store.read() as tx:
        row = instances.current(tx, "m")
        assert row is not None and row["tick_started_at"] == sup.ticker.started_at
        assert instances.verdict(row, tx.now(), t).state == "wedged"
    sup.ticker.started_at = None  # between ticks
    sup.pulse_once()
    with store.read() as tx:
        row = instances.current(tx, "m")
        assert row is not None and row["tick_started_at"] is None
        assert instances.verdict(row, tx.now(), t).state == "running"
    store.close()


def test_a_tick_says_whether_its_poll_queued_rows_for_the_pool_to_drain(
    store_url: str, tmp_path: Path
) -> None:
    store, board, rt = _setup(store_url, tmp_path)
    ticker = ticks.Ticker(rt)
    assert ticker.tick().passes["poll"]["claimed"] == ["L-1"]
    assert ticker.queued  # the loop drains the queue after this tick
    assert ticker.tick(force=True).passes["poll"]["claimed"] == []
    assert not ticker.queued  # nothing new: the queue is not read after it
    board.create_card(human(), "L", "one more")
    assert ticker.tick(news={"card.created"}).passes["poll"]["claimed"] == ["L-2"]
    assert ticker.queued
    assert list(ticker.tick(news={"report.added"}).passes) == ["workflow"]
    assert not ticker.queued  # a tick that did not poll queued nothing
    store.close()


def test_status_shows_the_agent_a_running_supervisor_was_started_with(
    store_url: str, tmp_path: Path
) -> None:
    """``lb start --agent scripted`` puts every role on scripted: ``lb status``, another
    process without that flag, says so from the running instance's row instead of
    judging the roles by its own settings ("claims none of its cards")."""
    from dataclasses import replace

    from laneboard.supervisor.loop import Supervisor

    store, _, rt = _setup(store_url, tmp_path)
    rt.config = replace(rt.config, force_agent="scripted")
    sup = Supervisor(rt)
    sup.start()
    try:
        plain = replace(rt.config, force_agent="")  # the settings of the `lb status` process
        b = status_report(store, machine="m", config=plain)["boundary"]
        assert b["force_agent"] == "scripted"
        assert {c["kind"] for c in b["agents"]} == {"scripted"} and b["unrunnable"] == []
    finally:
        sup.shutdown()
        store.close()
