"""Session eviction at the cap and the pool verdicts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.domain.timecontract import TimeContract
from laneboard.store import open_store
from laneboard.supervisor import instances

from .helpers import RealNowClock, Running, config, settled, wait_for


def test_lru_eviction_keeps_the_session_id(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "V", path=str(proj))
    a = board.create_card(
        human(),
        "V",
        "comes back",
        acceptance_mode="off",
        meta={
            "script": [
                {"lb": "card release {card}", "attempt": 1},
                {"deliver": "back", "attempt": 2},
            ]
        },
    ).ref
    b = board.create_card(human(), "V", "plain", acceptance_mode="off").ref
    cfg = config(tmp_path, max_concurrency=1, pool_max_sessions=1)
    with Running(sqlite_store_url, cfg, clock):
        wait_for(
            lambda: (
                board.get(a).status.value in ("in_review", "done")
                and board.get(b).status.value in ("in_review", "done")
            ),
            what="both delivered",
        )
        wait_for(lambda: settled(store), what="turns recorded")
    log = Path(cfg.state_path("supervisor.log")).read_text()
    assert "evicted idle session (id kept)" in log
    with store.read() as tx:
        turns = tx.all(
            "SELECT c.ref, t.native_id FROM turns t JOIN cards c ON c.id = t.card_id ORDER BY t.id"
        )
    order = [t["ref"] for t in turns]
    assert order == [a, b, a]  # b's session evicted a's; a came back afterwards
    a_ids = [t["native_id"] for t in turns if t["ref"] == a]
    assert a_ids[0] == a_ids[1]  # resumed by its kept id in a new process
    store.close()


def test_pool_verdicts() -> None:
    t = TimeContract()
    now = 10_000_000
    me = os.getpid()

    def row(**kw: object) -> dict[str, object]:
        base = {
            "id": "m:1",
            "pid": me,
            "started_at": now - 100_000,
            "heartbeat_at": now - 1000,
            "tick_started_at": None,
            "state": "running",
        }
        base.update(kw)
        return base

    assert instances.verdict(None, now, t).state == "absent"
    assert instances.verdict(row(), now, t).state == "running"
    assert (
        instances.verdict(row(state="starting", started_at=now - 1000), now, t).state == "starting"
    )
    assert instances.verdict(row(heartbeat_at=now - 61_000), now, t).state == "unresponsive"
    assert (
        instances.verdict(row(tick_started_at=now - 2 * t.turn_timeout * 1000 - 1), now, t).state
        == "wedged"
    )
    assert instances.verdict(row(pid=2**22 + 12345), now, t).state == "absent"
    assert instances.verdict(row(state="stopped"), now, t).state == "stopped"


def _turn_rows(store) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    with store.read() as tx:
        return tx.all("SELECT native_id, prompt, outcome FROM turns ORDER BY id")


def test_lost_native_session_is_replayed(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "Y", path=str(proj))
    script = [
        {"run": "rm -f $LANEBOARD_AGENT_STATE/sessions/*.json", "attempt": 1},
        {"crash": 5, "attempt": 1},
        {"deliver": "after replay", "attempt": 2},
    ]
    ref = board.create_card(
        human(), "Y", "loses its session", acceptance_mode="off", meta={"script": script}
    ).ref
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value in ("in_review", "done"), what="delivery")
        wait_for(lambda: settled(store), what="turns recorded")
    turns = _turn_rows(store)
    assert [t["outcome"] for t in turns] == ["failed", "ok"]
    assert turns[0]["native_id"] != turns[1]["native_id"]  # a fresh native session
    assert "could not be restored" in str(turns[1]["prompt"])
    assert "> You are the" in str(turns[1]["prompt"])  # the transcript carries the handoff
    with store.read() as tx:
        rec = tx.one("SELECT resumed_by_replay FROM sessions")
    assert rec is not None and rec["resumed_by_replay"] == 1
    store.close()


def test_a_resume_that_fails_at_once_is_replayed_next(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "Z", path=str(proj))
    script = [
        {"crash": 5, "attempt": 1},
        {"crash": 6, "attempt": 2},
        {"deliver": "third time", "attempt": 3},
    ]
    ref = board.create_card(
        human(), "Z", "fails twice", acceptance_mode="off", meta={"script": script}
    ).ref
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value in ("in_review", "done"), what="delivery")
        wait_for(lambda: settled(store), what="turns recorded")
    turns = _turn_rows(store)
    assert [t["outcome"] for t in turns] == ["failed", "failed", "ok"]
    assert turns[0]["native_id"] == turns[1]["native_id"]  # the 2nd attempt resumed
    assert "continues" in str(turns[1]["prompt"])
    assert "could not be restored" in str(turns[2]["prompt"])  # the 3rd replayed
    store.close()


def test_a_turn_that_ends_undelivered_is_continued_then_bounded(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    """A turn that ends well with its card still in progress is continued in the same
    session; after three such turns the row fails and the card waits for recovery."""
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "U", path=str(proj))
    late = board.create_card(
        human(),
        "U",
        "delivers on the second turn",
        acceptance_mode="off",
        meta={
            "script": [
                {"write": "half.txt", "content": "half\n", "attempt": 1},
                {"say": "I stopped early.", "attempt": 1},
                {"deliver": "finished", "attempt": 2},
            ]
        },
    ).ref
    never = board.create_card(
        human(), "U", "never delivers", acceptance_mode="off",
        meta={"script": [{"say": "nothing to show"}]},
    ).ref  # fmt: skip
    asks = board.create_card(
        human(), "U", "asks and stops", acceptance_mode="off",
        meta={"script": [{"lb": "card ask {card} 'Q1: which format? I recommend JSON.'"}]},
    ).ref  # fmt: skip
    cfg = config(tmp_path)
    with Running(sqlite_store_url, cfg, clock):
        wait_for(lambda: board.get(late).status.value in ("in_review", "done"), what="late")
        wait_for(
            lambda: _row_states(store, never) == ["failed"] and settled(store),
            what="the undelivered row exhausted",
        )
    with store.read() as tx:
        turns = tx.all(
            "SELECT c.ref, t.native_id, t.prompt, t.outcome FROM turns t "
            "JOIN cards c ON c.id = t.card_id ORDER BY t.id"
        )
    by = {ref: [t for t in turns if t["ref"] == ref] for ref in (late, never, asks)}
    assert [t["outcome"] for t in by[late]] == ["ok", "ok"]
    assert by[late][0]["native_id"] == by[late][1]["native_id"]  # the same session
    assert "still in progress and was not delivered" in by[late][1]["prompt"]
    assert len(by[never]) == 3  # the handoff bound
    got = board.get(never)
    assert got.status.value == "blocked" and got.meta["hold_cycle"] == "no_delivery"
    assert len(by[asks]) == 1  # waiting on its question: not pushed to continue
    assert _row_states(store, asks) == ["done"]
    store.close()


def _row_states(store: object, ref: str) -> list[str]:
    from laneboard.store import Store

    assert isinstance(store, Store)
    with store.read() as tx:
        return [
            str(r["state"])
            for r in tx.all(
                "SELECT q.state FROM queue q JOIN cards c ON c.id = q.card_id "
                "WHERE c.ref = ? AND q.kind = 'handoff' ORDER BY q.id",
                (ref,),
            )
        ]


def test_one_read_finds_the_stop_requests_of_every_running_turn(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    """Two turns run at once; the pool reads the stop requests of both together: a stop
    on one ends that turn only, and a later stop on the other ends it too."""
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "W", path=str(proj))
    hang = {"script": [{"hang": True, "attempt": 1}, {"deliver": "after", "attempt": 2}]}
    a = board.create_card(me, "W", "first", acceptance_mode="off", meta=hang).ref
    b = board.create_card(me, "W", "second", acceptance_mode="off", meta=hang).ref
    with Running(sqlite_store_url, config(tmp_path), clock) as run:
        wait_for(lambda: all(board.transcript(r)["running"] for r in (a, b)), what="both run")
        turns = {r: int(board.transcript(r)["running"]) for r in (a, b)}
        with store.read() as tx:
            assert tx.stop_requests(sorted(turns.values())) == {}
        board.stop_turn(me, a)
        with store.read() as tx:
            assert tx.stop_requests(sorted(turns.values())) == {turns[a]: "alice"}
        wait_for(lambda: board.get(a).status.value == "blocked", what="the stopped card held")
        assert board.get(b).status.value == "in_progress"
        assert run.sup.pool.stop_request(turns[b]) is None
        board.stop_turn(me, b)
        wait_for(lambda: board.get(b).status.value == "blocked", what="the second one held")
        wait_for(lambda: settled(store), what="turns recorded")
    for ref in (a, b):
        assert [t["outcome"] for t in board.transcript(ref)["turns"]] == ["stopped"]
    store.close()


def test_under_a_loop_reading_the_log_stop_requests_are_read_on_their_news(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the supervisor's loop tells the pool of each logged stop request, the
    watchdogs read the requests once, then again only on that news (or after
    ``STOP_QUIET_S``), instead of every ``STOP_CHECK_S`` for as long as turns run."""
    from laneboard.supervisor import pool as pool_mod
    from laneboard.supervisor.logs import LogFile
    from laneboard.supervisor.runtime import Runtime

    store = open_store(sqlite_store_url)
    rt = Runtime(store, config(tmp_path), "m", LogFile(str(tmp_path / "log")))
    pool = pool_mod.Pool(rt)
    reads: list[list[int]] = []
    now = [100.0]
    monkeypatch.setattr(pool_mod.time, "monotonic", lambda: now[0])

    class Tx:
        def stop_requests(self, ids: list[int]) -> dict[int, str]:
            reads.append(ids)
            return {7: "alice"} if len(reads) > 1 else {}

    class Reads:
        def __enter__(self) -> Tx:
            return Tx()

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(store, "autocommit", Reads)
    pool.stops_follow_news = True
    assert pool.stop_request(7) is None and len(reads) == 1
    now[0] += pool_mod.STOP_CHECK_S * 3
    assert pool.stop_request(7) is None and len(reads) == 1  # no news: nothing read
    pool.stops_news()
    assert pool.stop_request(7) == "alice" and len(reads) == 2  # the news: read at once
    now[0] += pool_mod.STOP_CHECK_S * 2
    pool.stop_request(7)
    assert len(reads) == 2
    now[0] += pool_mod.STOP_QUIET_S
    pool.stop_request(7)
    assert len(reads) == 3  # and now and then without news
    pool.stops_follow_news = False  # no loop tells it: every STOP_CHECK_S, as before
    now[0] += pool_mod.STOP_CHECK_S * 2
    pool.stop_request(7)
    assert len(reads) == 4
    store.close()


def test_evicting_a_finished_cards_session_records_it_closed(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    """At the cap the least recently used idle session is closed: its record says
    ``closed`` when its card is finished (it will not be resumed), ``idle`` otherwise."""
    from laneboard.supervisor import records
    from laneboard.supervisor.logs import LogFile
    from laneboard.supervisor.pool import Pool
    from laneboard.supervisor.runtime import Runtime

    store = open_store(sqlite_store_url)
    board = Board(store)
    board.add_project(human(), "V", path=str(tmp_path))
    done = board.create_card(human(), "V", "finished")
    board.move(human(), done.ref, "canceled")
    open_ = board.create_card(human(), "V", "open")
    rt = Runtime(store, config(tmp_path, pool_max_sessions=1), "m", LogFile(str(tmp_path / "l")))
    pool = Pool(rt)

    class Quiet:
        pid = None

        def close(self) -> None:
            return None

    def evict(card_id: int, key: str) -> str:
        with store.write() as tx:
            records.save_session(
                tx, "scripted", key, card_id=card_id, role="worker", cwd=str(tmp_path),
                native_id=key, round_=1, state="open",
            )  # fmt: skip
        pool.remember("scripted", key, card_id, Quiet())  # type: ignore[arg-type]
        with pool.lock:
            pool.live[("scripted", key)].busy = False
        pool.evict_if_full()
        assert not pool.live
        with store.read() as tx:
            rec = records.session_record(tx, "scripted", key)
        assert rec is not None
        return rec.state

    assert evict(done.id, "lane-done") == "closed"
    assert evict(open_.id, "lane-open") == "idle"
    store.close()


def _taken_row(store_url: str, tmp_path: Path) -> tuple[Any, Board, Any, Any, Any]:
    """A registered supervisor's runtime and a card's handoff row it has taken
    (``processing``), as a turn thread holds it: (store, board, card, runtime, row)."""
    from laneboard.supervisor import records
    from laneboard.supervisor.logs import LogFile
    from laneboard.supervisor.runtime import Runtime

    store = open_store(store_url)
    board = Board(store)
    board.add_project(human(), "W", path=str(tmp_path))
    card = board.create_card(human(), "W", "work")
    rt = Runtime(store, config(tmp_path), "m", LogFile(str(tmp_path / "l")))
    with store.write() as tx:
        rt.instance = instances.register(tx, "m", rt.config.time, {"pid": os.getpid()})
    claimed = board.claim(human(), card.ref, holder="worker")
    with store.write() as tx:
        queued = records.enqueue(tx, "handoff", card.id, "worker", card.project_id, "m",
                                 str(tmp_path), 1, claimed.claim_epoch, {})  # fmt: skip
        assert queued is not None
        row = records.taken_row(tx, queued.id, rt.instance)
    assert row is not None
    return store, board, card, rt, row


def test_a_turn_that_ends_while_the_database_is_away_is_handed_back_later(
    store_url: str, tmp_path: Path
) -> None:
    """A turn thread that cannot record its end, or hand its row back, because the
    database is out of reach leaves its row ``processing`` under this live supervisor;
    the next recovery (``ping``) finds no thread for it and requeues it."""
    from laneboard.errors import LaneboardError
    from laneboard.supervisor import records
    from laneboard.supervisor.pool import Pool

    store, _, card, rt, row = _taken_row(store_url, tmp_path)
    pool = Pool(rt)
    away = LaneboardError("STORE_UNAVAILABLE", "the database is away", "wait")

    def turn(_row: object) -> None:
        raise away  # the turn's own records fail: the database went away

    real_write = store.write

    def write() -> object:
        raise away

    pool._turn = turn  # type: ignore[method-assign]
    store.write = write  # type: ignore[method-assign]
    try:
        pool._run(row)  # the thread's body: no exception escapes it
    finally:
        store.write = real_write  # type: ignore[method-assign]
    assert "will be handed back" in (tmp_path / "l").read_text()
    assert pool.hand_back_due.is_set()  # the loop's next round pings
    with store.read() as tx:
        (left,) = records.queue_rows(tx, card_id=card.id)
    assert (left.state, left.owner) == ("processing", rt.instance)
    pool.recover()  # the database is back: that ping requeues it
    with store.read() as tx:
        (back,) = records.queue_rows(tx, card_id=card.id)
    assert back.state == "pending" and back.owner is None
    store.close()


def test_a_crashed_turn_whose_session_process_lives_on_is_recovered_not_stuck(
    store_url: str, tmp_path: Path
) -> None:
    """A turn that crashed while the database was away (a server restart) left its row
    ``processing`` with the pid of its session's process, which this pool keeps alive
    between turns. No turn runs in it: the recovery closes that session and requeues the
    row, instead of waiting forever for a process that will never end on its own."""
    import subprocess

    from laneboard.errors import LaneboardError
    from laneboard.supervisor import records
    from laneboard.supervisor.pool import Pool

    store, _, card, rt, row = _taken_row(store_url, tmp_path)
    agent = subprocess.Popen(["sleep", "300"])

    class Pooled:  # a session whose agent process stays up between turns
        pid = agent.pid

        def close(self) -> None:
            agent.kill()
            agent.wait(10)

    pool = Pool(rt)
    away = LaneboardError("STORE_UNAVAILABLE", "the database is away", "wait")
    real_write = store.write

    def failing_write() -> object:
        raise away

    def crash(_row: object) -> None:  # the session opened, its pid recorded, then the crash
        pool.remember("scripted", "lane-w", card.id, Pooled())  # type: ignore[arg-type]
        with store.write() as tx:
            records.set_row(tx, row.id, pid=agent.pid)
        store.write = failing_write  # type: ignore[method-assign]
        raise away

    pool._turn = crash  # type: ignore[method-assign]
    try:
        try:
            pool._run(row)  # the thread's body: no exception escapes it
        finally:
            store.write = real_write  # type: ignore[method-assign]
        with store.read() as tx:
            (left,) = records.queue_rows(tx, card_id=card.id)
        assert (left.state, left.pid) == ("processing", agent.pid)
        pool.recover()  # the database is back
        with store.read() as tx:
            (back,) = records.queue_rows(tx, card_id=card.id)
        assert back.state == "pending" and back.owner is None
        assert agent.poll() is not None  # its session was closed
        assert not pool.live
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
        store.close()


def _last_handoff_turn(
    board: Board, tmp_path: Path, role: str, payload: dict[str, object]
) -> tuple[Any, Any, Any]:
    """(runtime, card, row): a card of a new project claimed by ``role``, its queue row
    (with ``payload``) taken for its last handoff attempt."""
    from laneboard.supervisor import outcomes, records
    from laneboard.supervisor.logs import LogFile
    from laneboard.supervisor.runtime import Runtime

    store = board.store
    board.add_project(human(), "W", path=str(tmp_path))
    card = board.create_card(human(), "W", f"{role}'s card")
    rt = Runtime(store, config(tmp_path), "m", LogFile(str(tmp_path / "l")))
    claimed = board.claim(human(), card.ref, holder=role)
    with store.write() as tx:
        queued = records.enqueue(tx, "handoff", card.id, role, card.project_id, "m",
                                 str(tmp_path), 1, claimed.claim_epoch, {})  # fmt: skip
        assert queued is not None
        records.set_row(tx, queued.id, attempts=outcomes.HANDOFF_ATTEMPTS - 1, payload=payload)
        row = records.taken_row(tx, queued.id, "m:test")  # its last attempt
    assert row is not None and row.attempts == outcomes.HANDOFF_ATTEMPTS
    return rt, card, row


def test_a_turn_whose_card_was_sent_back_meanwhile_uses_up_no_attempt(
    store_url: str, tmp_path: Path
) -> None:
    """A reviewer reports, the workflow finds the verdict unusable and reopens the review
    while the reviewer's turn is still ending: the turn delivered, so it is not one of the
    row's turns that ended without a delivery. The session hears the workflow's reason and
    the row keeps its attempts; a turn that then delivers nothing counts as usual."""
    import json

    from laneboard.supervisor import outcomes, records
    from laneboard.supervisor.pool import Pool

    store = open_store(store_url)
    board = Board(store)
    rt, card, row = _last_handoff_turn(board, tmp_path, "reviewer", {})
    reopened = {"round": 1, "at": row.created_at + 1, "reason": "your verdict could not be used",
                "detail": "Report again."}  # fmt: skip
    with store.write() as tx:
        tx.run(
            "UPDATE cards SET meta = ? WHERE id = ?",
            (json.dumps({"loop_resume": reopened}), card.id),
        )
    fresh = board.get(card.ref)

    class Idle:
        pid = None

    pool = Pool(rt)
    assert outcomes.continue_undelivered(pool, row, fresh, None, Idle())  # type: ignore[arg-type]
    with store.read() as tx:
        (again,) = records.queue_rows(tx, card_id=card.id)
    assert again.state == "pending"
    assert again.attempts == outcomes.HANDOFF_ATTEMPTS - 1  # that turn was not one of them
    assert again.payload["resume_reason"] == reopened["reason"]
    assert board.get(card.ref).status.value == "in_progress"  # not held
    with store.write() as tx:
        row = records.taken_row(tx, again.id, "m:test")
    assert row is not None
    assert outcomes.continue_undelivered(pool, row, fresh, None, Idle())  # type: ignore[arg-type]
    with store.read() as tx:
        (last,) = records.queue_rows(tx, card_id=card.id, states=("failed",))
    assert last.state == "failed"  # reason said once: a turn without a delivery counts
    store.close()


def test_a_turn_whose_agent_found_the_board_away_is_not_counted_up_to_a_bound(
    store_url: str, tmp_path: Path
) -> None:
    """A turn that ended undelivered after some of its agent's calls were refused because
    the database was out of reach keeps the row's attempts, and the session is told why it
    is asked again; past ``BOARD_AWAY_BOUND`` such turns of one row they count again, so a
    board that refuses the agent for good still ends in a hold."""
    from laneboard.supervisor import outcomes, records
    from laneboard.supervisor.pool import Pool

    store = open_store(store_url)
    board = Board(store)
    away = {"board_away_turns": outcomes.BOARD_AWAY_BOUND - 1}
    rt, card, row = _last_handoff_turn(board, tmp_path, "worker", away)
    fresh = board.get(card.ref)

    class Idle:
        pid = None

    pool = Pool(rt)
    assert outcomes.continue_undelivered(pool, row, fresh, None, Idle(), 2)  # type: ignore[arg-type]
    with store.read() as tx:
        (again,) = records.queue_rows(tx, card_id=card.id)
    assert again.state == "pending" and again.recoveries == 0
    assert again.attempts == outcomes.HANDOFF_ATTEMPTS - 1  # that turn was not one of them
    assert again.payload["board_away_turns"] == outcomes.BOARD_AWAY_BOUND
    assert again.payload["resume_reason"] == outcomes.BOARD_AWAY_REASON
    assert "the board was out of reach" in (tmp_path / "l").read_text()
    with store.write() as tx:
        row = records.taken_row(tx, again.id, "m:test")
    assert row is not None
    assert outcomes.continue_undelivered(pool, row, fresh, None, Idle(), 1)  # type: ignore[arg-type]
    with store.read() as tx:
        (last,) = records.queue_rows(tx, card_id=card.id, states=("failed",))
    assert last.state == "failed"  # past the bound: the turn counts, and the card is held
    assert board.get(card.ref).status.value == "blocked"
    store.close()


def test_a_session_a_running_turn_uses_is_not_closed_for_a_crashed_row(
    store_url: str, tmp_path: Path
) -> None:
    """A session shared by lane (a reviewer's, per directory) may serve another card's turn
    while a crashed row still names its process: that session is left alone."""
    import subprocess
    import threading

    from laneboard.supervisor import records
    from laneboard.supervisor.pool import Pool, Running

    store, _, card, rt, row = _taken_row(store_url, tmp_path)
    agent = subprocess.Popen(["sleep", "300"])

    class Pooled:
        pid = agent.pid

        def close(self) -> None:
            agent.kill()
            agent.wait(10)

    try:
        with store.write() as tx:
            records.set_row(tx, row.id, pid=agent.pid)  # the crashed turn's row
        pool = Pool(rt)
        shared = Pooled()
        pool.remember("scripted", "review-lane", card.id, shared)  # type: ignore[arg-type]
        pool.running[row.id + 1] = Running(row, threading.current_thread(), 0, session=shared)  # type: ignore[arg-type]
        pool._close_orphaned_sessions()
        assert agent.poll() is None and ("scripted", "review-lane") in pool.live
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
        store.close()


def test_a_crashed_turn_handed_back_is_recorded_lost_not_left_running(
    store_url: str, tmp_path: Path
) -> None:
    """A turn whose thread crashed after its turn record started (its session closed under
    it at a shutdown) hands its row back; the turn is recorded ``lost`` in that same write,
    not left ``running`` forever while the next turn of the row runs."""
    from laneboard.supervisor import records
    from laneboard.supervisor.pool import Pool

    store, _, card, rt, row = _taken_row(store_url, tmp_path)
    pool = Pool(rt)

    def crash(_row: object) -> None:
        with store.write() as tx:
            records.start_turn(tx, row.id, card.id, 1, None, "scripted", "s", "prompt")
        raise ValueError("write to closed file")

    pool._turn = crash  # type: ignore[method-assign]
    pool._run(row)
    with store.read() as tx:
        (back,) = records.queue_rows(tx, card_id=card.id)
        turns = tx.turns_for_card(card.id)
    assert back.state == "pending"
    assert [t["outcome"] for t in turns] == ["lost"]
    store.close()
