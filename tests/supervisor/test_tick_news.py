"""The loop reads what was logged, not only that something was: the turn path's own
records wake no tick, and an event tick runs the passes its news is for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import human, system
from laneboard.store import Store, open_store
from laneboard.supervisor import loop
from laneboard.supervisor import ticker as ticks
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime

from .helpers import RealNowClock, config


def _log(store: Store, *types: str) -> None:
    with store.write() as tx:
        for t in types:
            tx.append_event(t, system("test"), payload={})


def test_log_news_names_the_types_logged_since_the_marks(store_url: str) -> None:
    store, other = open_store(store_url), open_store(store_url)
    try:
        with store.autocommit() as tx:
            marks = tx.log_marks()
        _log(store, "turn.output", "card.created")
        _log(other, "report.added")  # another connection, as another process writes
        with store.autocommit() as tx:
            later, types = tx.log_news(marks)
            assert types == {"turn.output", "card.created", "report.added"}
        _log(other, "card.moved")
        with store.autocommit() as tx:
            _, types = tx.log_news(later)
        # an event not yet settled at ``later`` (an older transaction elsewhere still
        # open, on PostgreSQL) may be named again, never one missed
        assert types is not None and "card.moved" in types
        assert types <= {"card.moved", "turn.output", "card.created", "report.added"}
    finally:
        store.close()
        other.close()


def test_log_news_that_is_too_long_to_tell_says_so(store_url: str) -> None:
    store = open_store(store_url)
    try:
        with store.autocommit() as tx:
            marks = tx.log_marks()
        _log(store, "a.x", "b.x", "c.x")
        with store.autocommit() as tx:
            head, types = tx.log_news(marks, limit=2)
            assert types is None
            assert head.last == tx.log_marks().last
    finally:
        store.close()


def _runtime(store_url: str, tmp_path: Path) -> Runtime:
    store = open_store(store_url, RealNowClock())
    Board(store).add_project(human(), "N", path=str(tmp_path))
    return Runtime(
        store, config(tmp_path), "m", LogFile(str(tmp_path / "log")), pool_alive=lambda: True
    )


def test_the_turn_paths_own_records_wake_no_tick(store_url: str, tmp_path: Path) -> None:
    rt = _runtime(store_url, tmp_path)
    sup = loop.Supervisor(rt)
    try:
        with rt.store.autocommit() as tx:
            marks = tx.log_marks()
        _log(rt.store, "turn.started", "turn.output", "token.created", "card.claimed")
        marks, news = sup._news(marks)
        assert news == set()  # read, and nothing for a pass
        _log(rt.store, "turn.output", "card.created")
        marks, news = sup._news(marks)
        assert news == {"card.created"}
        assert sup._news(marks)[1] == set()  # an event seen is never news again
    finally:
        rt.store.close()


def _names(passes: list[tuple[str, ticks.PassFn]]) -> list[str]:
    return [name for name, _ in passes]


def test_an_event_tick_runs_the_passes_its_news_is_for(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = _runtime(sqlite_store_url, tmp_path)
    try:
        ticker = ticks.Ticker(rt)
        every = _names(ticks.registered_passes())
        assert _names(ticker.wanted(None)) == every
        # patrol is time-based: the first event tick runs it, then once a minute at most
        assert _names(ticker.wanted({"report.added"})) == ["patrol", "workflow"]
        got = ticker.tick(news={"report.added"})
        assert got.state == "ran"
        assert set(got.passes) == {"patrol", "workflow"}  # and no alert: no notifier
        assert _names(ticker.wanted({"card.moved"})) == ["workflow", "lanes", "cleanup", "poll"]
        assert _names(ticker.wanted({ticks.FREED})) == ["workflow", "poll"]
        assert _names(ticker.wanted({"some.new_type"})) == [
            "workflow", "lanes", "cleanup", "poll"
        ]  # fmt: skip
        assert _names(ticker.wanted({"card.created"})) == ["poll"]
        got = ticker.tick(news={"alert"})
        assert set(got.passes) == {"notify"}
        got = ticker.tick(force=True)  # the periodic tick (or lb loop tick): every pass
        assert set(got.passes) == {*every, "notify"}
        monkeypatch.setattr(ticks, "PATROL_EVENT_S", 0.0)
        assert "patrol" in _names(ticker.wanted({"report.added"}))
    finally:
        rt.store.close()


def test_a_write_announces_its_event_types_and_a_quiet_listener_skips_noise(
    store_url: str,
) -> None:
    """On PostgreSQL the NOTIFY of a write names its events' types; the supervisor's
    broadcaster is not woken by one that names only the turn path's own records."""
    if not store_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    import psycopg

    from laneboard.store.notify import Broadcaster
    from laneboard.store.postgres import PostgresStore

    store = open_store(store_url)
    assert isinstance(store, PostgresStore)
    try:
        main, noise = store.notify_channel(), store.notify_channel(quiet=True)
        with psycopg.connect(store.url, autocommit=True) as raw:
            raw.execute(f'LISTEN "{main}"')
            raw.execute(f'LISTEN "{noise}"')
            _log(store, "turn.output", "card.created", "turn.output")
            _log(store, "turn.output")
            got = [(n.channel, n.payload) for n in raw.notifies(timeout=5, stop_after=2)]
        # a write of only the turn path's records goes to the quiet channel
        assert got == [(main, "card.created,turn.output"), (noise, "turn.output")]
        quiet = Broadcaster(store, quiet=loop.NOISE)
        assert quiet._ignored("turn.output")
        assert quiet._ignored("token.created,turn.started")
        assert not quiet._ignored("card.created,turn.output")
        assert not quiet._ignored("")  # a write that could not name its types wakes
        assert not Broadcaster(store)._ignored("turn.output")
    finally:
        store.close()


def test_a_local_write_of_noise_wakes_no_quiet_broadcaster(store_url: str) -> None:
    """In process too: a write whose events are all the turn path's own records does not
    wake the supervisor's loop (on PostgreSQL, where the commit knows every event it
    writes); any other write, and every write on SQLite, does."""
    from laneboard.store.notify import Broadcaster

    store = open_store(store_url)
    heard: list[frozenset[str] | None] = []

    def hook(_cursor: object, types: frozenset[str] | None) -> None:
        heard.append(types)

    store.add_typed_commit_hook(hook)
    b = Broadcaster(store, listen=False, quiet=loop.NOISE).start()
    try:
        seen = b.generation
        _log(store, "turn.output", "turn.started")
        pg = store.dialect == "postgresql"
        assert heard == [frozenset({"turn.output", "turn.started"}) if pg else None]
        assert (b.generation == seen) is pg
        seen = b.generation
        _log(store, "turn.output", "card.created")
        assert b.generation != seen
    finally:
        b.close()
        store.remove_typed_commit_hook(hook)
        store.close()


def test_a_one_statement_write_of_noise_wakes_no_quiet_broadcaster(store_url: str) -> None:
    """A claim (``card.claimed``) and, on PostgreSQL, a transcript flush (``turn.output``)
    are one statement each that names its event's type: in process as on the channel,
    they do not wake the supervisor's loop; a move does."""
    from laneboard.domain.model import agent
    from laneboard.store.notify import Broadcaster
    from laneboard.store.transcript_sql import append_output

    store = open_store(store_url)
    board = Board(store)
    me = human("t")
    board.add_project(me, "P")
    first = board.create_card(me, "P", "one", status="todo")
    b = Broadcaster(store, listen=False, quiet=loop.NOISE).start()
    try:
        seen = b.generation
        board.claim_next(agent("w"), include_unassigned=True)
        assert b.generation == seen
        if store.dialect == "postgresql":
            append_output(store, agent("w"), first, 1, [(1, 1, {"type": "text", "text": "x"})])
            assert b.generation == seen
        board.move(agent("w"), first.ref, "blocked")
        assert b.generation != seen
    finally:
        b.close()
        store.close()


def test_every_machine_cleans_its_own_lanes_while_another_runs_the_cluster_passes(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Landing closed cards is once per cluster; cleaning lanes and pruning session files
    is each machine's own work (a lane in a clone is only its machine's), so it runs on a
    supervisor that holds none of the cluster's passes."""
    from laneboard.supervisor import cluster

    assert "cleanup" not in cluster.CLUSTER_PASSES and "lanes" in cluster.CLUSTER_PASSES
    rt = _runtime(sqlite_store_url, tmp_path)
    try:
        others = {name: "b" for name in cluster.CLUSTER_PASSES}
        monkeypatch.setattr(cluster, "take", lambda tx, rt, names: ({}, others))
        monkeypatch.setattr(ticks, "IDLE", {})  # as when they have work to do
        got = ticks.Ticker(rt).tick(force=True)
        assert got.passes["lanes"] == {"skipped": "running on b"}
        assert got.passes["workflow"] == {"skipped": "running on b"}
        assert set(got.passes["cleanup"]) == {"cleaned", "swept", "orphans", "pruned"}
    finally:
        rt.store.close()


def test_the_runs_are_read_often_only_while_some_are_driven_or_one_has_news(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading the runs every 0.25 s costs a statement each time: with none to drive, the
    loop reads them on a run's event and otherwise every ``RUNS_IDLE_S``."""
    from types import SimpleNamespace

    now = [1000.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    sup: Any = SimpleNamespace(runs=SimpleNamespace(health={}))
    due = loop.Supervisor._runs_due
    last = now[0]
    now[0] += loop.RUNS_READ_S * 2
    assert not due(sup, False, last)  # nothing driven, no news: not yet
    assert due(sup, True, last)  # a run's event: read at once
    now[0] = last + loop.RUNS_IDLE_S
    assert due(sup, False, last)  # and now and then without news
    sup.runs.health[1] = object()  # a run is driven here: its own clock
    now[0] = last + loop.RUNS_READ_S * 2
    assert due(sup, False, last)


def test_a_row_a_turn_could_not_hand_back_is_recovered_at_the_next_round(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that ended while the database was away could not hand its row back: the
    loop's next round (once the database answers) runs the recovery at once, not at the
    next ping a minute later; while the database is still away it stays due."""
    rt = _runtime(store_url, tmp_path)
    sup = loop.Supervisor(rt)
    recovered: list[int] = []
    away = [True]

    def recover() -> list[dict[str, Any]]:
        if away[0]:
            raise OSError("the database is away")
        recovered.append(1)
        return []

    monkeypatch.setattr(sup.pool, "recover", recover)
    try:
        with rt.store.autocommit() as tx:
            st = loop.LoopState(tx.log_marks(), {})
        now = rt.now()
        st.next_beat, st.next_ping = now + 60_000, now + 60_000  # the ping is a minute away
        sup.pool.hand_back_due.set()
        with pytest.raises(OSError):
            sup._round(st)
        assert st.next_ping <= rt.now() and not recovered  # still due
        away[0] = False
        sup._round(st)
        assert recovered == [1] and st.next_ping > rt.now()
    finally:
        rt.store.close()
