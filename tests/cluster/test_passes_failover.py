"""Several supervisors on one board: a cluster pass runs on one of them at a time, and a
host that stops heartbeating is fenced and its cards taken over at once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.supervisor.helpers import RealNowClock, config, count_calls

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store
from laneboard.supervisor import cluster, instances, patrol, records
from laneboard.supervisor import ticker as ticks
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Supervisor
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.status import status_report


class Hosts:
    """Runtimes of simulated machines on one board, each with its own store.

    Their clock moves only when a test advances it (``FakeClock``): a failover bound is
    board time, and the real time a loaded machine spends between two steps must not
    count toward it. A test that runs a real supervisor, whose heartbeat thread waits
    on real time, passes a clock that moves with real time (``RealNowClock``).
    """

    def __init__(self, url: str, tmp: Path, clock: FakeClock | RealNowClock | None = None) -> None:
        self.url, self.tmp = url, tmp
        self.clock = clock if clock is not None else FakeClock()
        self.stores: list[Store] = []

    def runtime(self, machine: str, *, register: bool = True) -> Runtime:
        store = open_store(self.url, self.clock)
        self.stores.append(store)
        cfg = config(self.tmp / machine)
        rt = Runtime(store, cfg, machine, LogFile(str(self.tmp / f"{machine}.log")))
        rt.pool_alive = lambda: True
        if register:
            with store.write() as tx:
                rt.instance = instances.register(tx, machine, cfg.time, {"pid": 1})
        return rt

    def close(self) -> None:
        for s in self.stores:
            s.close()


@pytest.fixture
def hosts(store_url: str, tmp_path: Path) -> Iterator[Hosts]:
    h = Hosts(store_url, tmp_path)
    board = Board(h.runtime("setup", register=False).store)
    (tmp_path / "proj").mkdir()
    board.add_project(human(), "E", path=str(tmp_path / "proj"))
    try:
        yield h
    finally:
        h.close()


def test_a_cluster_pass_runs_on_one_machine_at_a_time(hosts: Hosts) -> None:
    a, b = hosts.runtime("a"), hosts.runtime("b")
    inner: list[ticks.TickResult] = []

    def patrol_that_overlaps(rt: Runtime, _dry: bool) -> dict[str, Any]:
        if rt is a and not inner:  # machine b ticks while a is in the middle of its patrol
            inner.append(ticks.Ticker(b).tick(force=True))
        return {"ran on": rt.machine}

    ticks.PASSES["patrol"] = patrol_that_overlaps
    try:
        outer = ticks.Ticker(a).tick(force=True)
        later = ticks.Ticker(b).tick(force=True)
    finally:
        ticks.PASSES["patrol"] = patrol.patrol_pass
    assert outer.passes["patrol"] == {"ran on": "a"}
    assert inner[0].state == "ran"  # b ticked: its own machine's passes ran
    assert inner[0].passes["patrol"] == {"skipped": f"running on {a.instance}"}
    assert "budget" in inner[0].passes["poll"]  # its poll pass ran (per machine)
    assert later.passes["patrol"] == {"ran on": "b"}  # once a finished, b may run it
    with a.store.read() as tx:
        runs = tx.pass_runs("patrol")
        assert [r["machine"] for r in runs] == ["a", "b"]
        assert runs[0]["finished_at"] <= runs[1]["started_at"]
        assert tx.pass_leases() == []  # released after each pass
    report = status_report(a.store, hosts.clock, a.config, "a")
    last = {r["pass"]: r["machine"] for r in report["cluster"]["last_runs"]}
    assert last == {"patrol": "b"}  # workflow and lanes had nothing to do: never run
    assert {i["machine"] for i in report["instances"]} == {"a", "b"}


def test_a_silent_host_is_fenced_and_its_cards_taken_over(hosts: Hosts) -> None:
    a = hosts.runtime("a")
    board = a.board
    card = board.create_card(human(), "E", "work", acceptance_mode="off")
    assert ticks.Ticker(a).tick(force=True).state == "ran"  # a claims it for its pool
    held = board.get(card.ref)
    assert held.status is Status.IN_PROGRESS
    old_epoch = held.claim_epoch
    with a.store.write() as tx:  # a's agent is mid-turn in its session when a goes silent
        (row,) = records.queue_rows(tx, card_id=card.id)
        session = records.save_session(
            tx, "scripted", f"worker:{card.ref}", card_id=card.id, role="worker",
            cwd="/nowhere", native_id="n1", round_=1, state="open", pid=4242,
        )  # fmt: skip
        turn = records.start_turn(tx, row.id, card.id, 1, session.id, "scripted", "n1", "go")
    hosts.clock.advance(seconds=3 * a.config.time.pool_heartbeat - 1)
    b = hosts.runtime("b")
    assert cluster.sweep(b) == []  # not silent for three heartbeat intervals yet
    hosts.clock.advance(seconds=2)
    fenced = cluster.sweep(b)
    assert [(f["instance"], f["cards"]) for f in fenced] == [(a.instance, [card.ref])]
    assert cluster.sweep(hosts.runtime("c")) == []  # fenced once, by one supervisor
    now = board.get(card.ref)
    assert (now.status, now.holder, now.claim_epoch) == (Status.TODO, None, old_epoch + 1)
    with b.store.read() as tx:
        assert records.queue_rows(tx, machine="a") == []  # a's rows are closed
        assert tx.supervisor_state(a.instance or "") == "fenced"
        # its session and its turn end interrupted: nothing is left looking alive
        assert tx.one("SELECT state, pid FROM sessions WHERE id = ?", (session.id,)) == {
            "state": "interrupted",
            "pid": None,
        }
        assert tx.scalar("SELECT outcome FROM turns WHERE id = ?", (turn,)) == "interrupted"
    types = [e.type for e in board.events(0, limit=1000)]
    assert types[-2:] == ["card.fenced", "supervisor.fenced"]
    with pytest.raises(LaneboardError) as err:  # what the old host's agent still writes
        board.heartbeat(agent(held.holder or "worker", card.id, old_epoch), card.ref)
    assert err.value.code == "STALE_CLAIM"
    assert ticks.Ticker(b).tick(force=True).state == "ran"  # taken over at once
    again = board.get(card.ref)
    assert again.status is Status.IN_PROGRESS and again.claim_epoch == old_epoch + 2
    with b.store.read() as tx:
        assert [r.machine for r in records.queue_rows(tx, card_id=card.id)] == ["b"]
    # the old host comes back: it finds itself fenced, registers anew, starts nothing
    sup = Supervisor(a)
    first = a.instance
    sup._beat()
    assert a.instance != first and cluster.fenced(a) is False
    assert sup.pool.drain() == 0
    with a.store.read() as tx:
        assert records.queue_rows(tx, machine="a", states=("pending", "processing")) == []


def test_a_host_that_beats_less_often_is_fenced_by_its_own_bound(hosts: Hosts) -> None:
    """Machines may set different heartbeat intervals: each is fenced after its own
    ``failover_beats`` intervals, which it declares, not after the sweeper's."""
    slow = hosts.runtime("slow", register=False)
    slow.config = replace(
        slow.config, time=replace(slow.config.time, pool_heartbeat=60, pool_stale=240)
    )
    with slow.store.write() as tx:
        slow.instance = instances.register(
            tx, "slow", slow.config.time, {"pid": 1, **cluster.declared(slow)}
        )
    b = hosts.runtime("b")  # beats every 15 s: its own bound is 45 s
    assert cluster.failover_bound_ms(b) < cluster.failover_bound_ms(slow) == 180_000
    hosts.clock.advance(seconds=59)  # one of slow's intervals, not yet its next beat
    assert cluster.sweep(b) == []  # a healthy host between two of its beats
    with slow.store.write() as tx:
        instances.beat(tx, slow.instance or "", info={"pid": 1, **cluster.declared(slow)})
    hosts.clock.advance(seconds=179)
    assert cluster.sweep(b) == []
    hosts.clock.advance(seconds=2)  # silent for three of its own intervals
    assert [f["instance"] for f in cluster.sweep(b)] == [slow.instance]


def test_the_old_hosts_agent_writes_nothing_once_its_card_moved_on(hosts: Hosts) -> None:
    """A fenced host's agent that wakes up (the host was paused) after another host took
    its card over and delivered it: each write with its stale credential is refused with
    STALE_CLAIM and changes nothing: it would have replaced the delivered round's report
    under review, commented, edited or moved the card."""
    a = hosts.runtime("a")
    board = a.board
    card = board.create_card(human(), "E", "work", acceptance_mode="off")
    assert ticks.Ticker(a).tick(force=True).state == "ran"
    held = board.get(card.ref)
    stale = agent(held.holder or "worker", card.id, held.claim_epoch)
    hosts.clock.advance(seconds=3 * a.config.time.pool_heartbeat + 1)
    b = hosts.runtime("b")
    assert [f["cards"] for f in cluster.sweep(b)] == [[card.ref]]
    with pytest.raises(LaneboardError) as err:  # nor does it claim the fenced card back
        board.claim(stale, card.ref)
    assert err.value.code == "STALE_CLAIM"
    assert ticks.Ticker(b).tick(force=True).state == "ran"  # b takes it over
    now = board.get(card.ref)
    board.deliver(agent(now.holder or "worker", card.id, now.claim_epoch), card.ref, "b's work")
    assert board.get(card.ref).status is Status.IN_REVIEW
    before = [(e.id, e.type) for e in board.events(0, limit=10_000)]
    writes: list[tuple[str, Callable[[], object]]] = [
        ("report", lambda: board.report(stale, card.ref, "a's late report")),
        ("comment", lambda: board.comment(stale, card.ref, "a's late comment")),
        ("move", lambda: board.move(stale, card.ref, "blocked")),
        ("edit", lambda: board.edit(stale, card.ref, title="a renames it")),
        ("deliver", lambda: board.deliver(stale, card.ref, "a's late delivery")),
        ("heartbeat", lambda: board.heartbeat(stale, card.ref)),
    ]
    for name, write in writes:
        with pytest.raises(LaneboardError) as err:
            write()
        assert err.value.code == "STALE_CLAIM", (name, err.value.line())
    assert [r.body for r in board.reports(card.ref)] == ["b's work"]
    after = board.get(card.ref)
    assert (after.status, after.title) == (Status.IN_REVIEW, "work")
    assert [(e.id, e.type) for e in board.events(0, limit=10_000)] == before


def test_a_long_tick_keeps_beating_and_is_not_fenced(store_url: str, tmp_path: Path) -> None:
    """The heartbeat has its own thread: a tick stuck in a pass (a landing running its
    checks) for longer than the failover bound is not mistaken for a dead host."""
    import threading
    from dataclasses import replace

    hosts = Hosts(store_url, tmp_path, RealNowClock())
    try:
        a = hosts.runtime("a", register=False)
        a.config = replace(a.config, time=replace(a.config.time, pool_heartbeat=1, pool_stale=5))
        inside, release = threading.Event(), threading.Event()

        def slow_patrol(_rt: Runtime, _dry: bool) -> dict[str, Any]:
            inside.set()
            assert release.wait(60)
            return {}

        ticks.PASSES["patrol"] = slow_patrol
        sup = Supervisor(a)
        runner = threading.Thread(target=sup.run, daemon=True)
        runner.start()
        try:
            assert inside.wait(60)
            hosts.clock.advance(seconds=30)  # ten failover bounds pass while the tick is stuck

            def beat_after_advance() -> bool:
                with a.store.read() as tx:
                    row = tx.one("SELECT heartbeat_at FROM supervisors WHERE id = ?", (a.instance,))
                return row is not None and int(row["heartbeat_at"]) >= hosts.clock.now_ms() - 2000

            deadline = time.monotonic() + 30
            while not beat_after_advance():
                assert time.monotonic() < deadline, "no heartbeat while the tick ran"
                time.sleep(0.05)
            b = hosts.runtime("b")
            b.config = a.config
            assert cluster.sweep(b) == []
        finally:
            release.set()
            sup.stop_event.set()
            runner.join(60)
            ticks.PASSES["patrol"] = patrol.patrol_pass
    finally:
        hosts.close()


def test_a_resident_tick_skips_a_pass_held_elsewhere_without_a_transaction(
    hosts: Hosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ticks, "IDLE", {})  # as when the workflow has work to do
    a, b = hosts.runtime("a"), hosts.runtime("b")
    ticker = ticks.Ticker(b)
    ticker.resident = True
    assert ticker.tick(force=True).state == "ran"  # its first tick takes its tick lease
    with a.store.write() as tx:  # a runs the workflow pass now
        runs, busy = cluster.take(tx, a, ["workflow"])
    assert list(runs) == ["workflow"] and busy == {}
    writes = count_calls(monkeypatch, b.store, "write")
    alone = count_calls(monkeypatch, b.store, "write_statement")
    got = ticker.tick(news={"report.added"})  # news for the workflow pass alone
    assert got.passes == {"workflow": {"skipped": f"running on {a.instance}"}}
    assert writes == alone == []  # one read found it held: nothing taken, nothing given back
    with a.store.write() as tx:  # a's supervisor stops: its lease is anyone's at once
        instances.stop(tx, str(a.instance))
    got = ticker.tick(news={"report.added"})
    assert "actions" in got.passes["workflow"]  # it ran here
    # taken (breaking a's), then given back; on PostgreSQL a statement of its own first
    # tries the leases that are free (``cluster.take_alone``), and gives them back
    assert (len(writes), len(alone)) == ((1, 2) if cluster.one_statement(b) else (2, 0))
    with b.store.read() as tx:
        assert [r["machine"] for r in tx.pass_runs("workflow")] == ["b", "a", "b"]


def test_a_cluster_pass_with_nothing_to_do_takes_no_lease(
    hosts: Hosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = hosts.runtime("b")
    ticker = ticks.Ticker(b)
    ticker.resident = True
    assert ticker.tick(force=True).state == "ran"
    writes = count_calls(monkeypatch, b.store, "write")
    got = ticker.tick(news={"report.added"})  # news for the workflow pass alone
    assert got.passes["workflow"]["actions"] == []  # the result of a pass with no work
    assert writes == []  # one read said so: no lease taken or given back
    board = b.board
    card = board.create_card(human(), "E", "done by hand", acceptance_mode="off")
    worker = agent("worker")
    claimed = board.claim(worker, card.ref)
    worker = replace(worker, card_id=claimed.id, epoch=claimed.claim_epoch)
    board.report(worker, card.ref, "did it")
    board.move(worker, card.ref, "in_review")
    got = ticker.tick(news={"card.moved"})
    assert [r["action"] for r in got.passes["workflow"]["results"]] == ["auto_accept"]
    assert board.get(card.ref).status is Status.DONE
    with b.store.read() as tx:  # it ran under its lease, once there was work
        assert [r["machine"] for r in tx.pass_runs("workflow")] == ["b"]
        assert tx.pass_leases() == []


def test_a_tick_that_fails_after_taking_leases_gives_them_back(
    hosts: Hosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a resident takes the free pass leases in one statement, then looks at
    those another holds in a transaction: when that fails, what it took goes back at once
    (their runs ended), not after the leases' time to live."""
    monkeypatch.setattr(ticks, "IDLE", {})  # as when the workflow and lanes have work
    a, b = hosts.runtime("a"), hosts.runtime("b")
    ticker = ticks.Ticker(b)
    ticker.resident = True
    assert ticker.tick(force=True).state == "ran"
    with a.store.write() as tx:  # a, alive, runs the workflow pass now
        cluster.take(tx, a, ["workflow"])

    def broken(*_args: Any) -> Any:
        raise RuntimeError("the transaction failed")

    monkeypatch.setattr(cluster, "take", broken)
    with pytest.raises(RuntimeError):
        ticker.tick(news={"card.moved"})  # news for the workflow and lanes passes
    with b.store.read() as tx:
        assert {r["name"]: r["holder"] for r in tx.pass_leases()} == {"pass:workflow": a.instance}
        assert all(r["finished_at"] is not None for r in tx.pass_runs() if r["machine"] == "b")
