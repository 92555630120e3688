"""The PostgreSQL server ends every session (a restart, a failover of a managed database,
an administrator's ``pg_terminate_backend``): the store replaces the connections it kept,
and a running supervisor rides it out and goes on draining the board."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.conftest import PG_BASE
from tests.supervisor.helpers import RealNowClock, wait_for
from tests.supervisor.test_loud_failures import lb_env, spawn_start

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store


@pytest.fixture
def pg_url(named_pg_url: str) -> str:
    return named_pg_url


def _end_sessions(url: str) -> int:
    """End every server session of the board's processes (named by ``application_name``),
    and wait until they are gone, as after a restart."""
    name = url.rsplit("application_name=", 1)[1]
    with psycopg.connect(PG_BASE, autocommit=True) as admin:
        pids = [
            r[0]
            for r in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchall()
        ]
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        left = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
        wait_for(lambda: admin.execute(left, (pids,)).fetchone() == (0,), timeout=30,
                 what="the sessions ended")  # fmt: skip
    return len(pids)


def test_the_store_replaces_connections_the_server_ended(pg_url: str) -> None:
    store = open_store(pg_url, create=True)
    with store.write() as tx:  # two connections kept idle in the pool
        with store.read() as tx2:
            tx2.one("SELECT 1 AS x")
        tx.one("SELECT 1 AS x")
    assert _end_sessions(pg_url) >= 2
    assert store.query("SELECT 1 AS x") == [{"x": 1}]  # no AdminShutdown
    with store.write() as tx:
        assert tx.one("SELECT 2 AS x") == {"x": 2}
    with store.read() as tx:
        assert tx.one("SELECT 3 AS x") == {"x": 3}
    store.close()


def test_a_supervisor_rides_out_the_database_ending_its_sessions(
    pg_url: str, tmp_path: Path
) -> None:
    store = open_store(pg_url, RealNowClock(), create=True)
    board = Board(store)
    (tmp_path / "proj").mkdir()
    board.add_project(human(), "G", path=str(tmp_path / "proj"))

    def add(n: int) -> list[str]:
        script = {"script": [{"deliver": "ok"}]}
        return [
            board.create_card(human(), "G", f"c{i}", acceptance_mode="off", meta=script).ref
            for i in range(n)
        ]

    def done(refs: list[str]) -> bool:
        return all(board.get(r).status.value == "done" for r in refs)

    config = '[supervisor]\nsandbox = "off"\nsandbox_reason = "the database test"\n'
    env = lb_env(tmp_path, pg_url, config, os.environ["PATH"])
    proc = spawn_start(env)
    try:
        first = add(3)
        wait_for(lambda: done(first), timeout=120, what="the first cards done")
        assert _end_sessions(pg_url) >= 1
        second = add(3)
        wait_for(lambda: done(second) or proc.poll() is not None, timeout=120,
                 what="the cards made after the sessions ended")  # fmt: skip
        assert proc.poll() is None, "the supervisor exited"
        assert done(second)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 0
    store.close()


def test_a_supervisor_waits_while_the_database_is_down(pg_url: str, tmp_path: Path) -> None:
    """While no connection can be made, the loop waits and tries again, saying so in its
    log; once the database is back it ticks again. Stopping it meanwhile ends cleanly."""
    import threading
    from dataclasses import replace

    from tests.cluster.test_passes_failover import Hosts

    from laneboard.supervisor.loop import Supervisor

    open_store(pg_url, create=True).close()
    hosts = Hosts(pg_url, tmp_path, RealNowClock())
    try:
        a = hosts.runtime("a", register=False)
        a.config = replace(a.config, time=replace(a.config.time, pool_heartbeat=1, pool_stale=5))
        store: Any = a.store
        real, down = store._connect, threading.Event()

        def connect() -> Any:
            if down.is_set():
                raise psycopg.OperationalError("connection refused (the test's outage)")
            return real()

        store._connect = connect
        sup = Supervisor(a)
        failed: list[BaseException] = []

        def run() -> None:
            try:
                sup.run()
            except BaseException as exc:  # the test says what ended it
                failed.append(exc)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        try:
            wait_for(lambda: sup.ticks >= 1, timeout=60, what="the first tick")
            down.set()
            _end_sessions(pg_url)
            log = tmp_path / "a.log"
            wait_for(lambda: "the database is out of reach" in log.read_text() or bool(failed),
                     timeout=60, what="the loop saying the database is away")  # fmt: skip
            assert runner.is_alive() and not failed, failed
            down.clear()
            ticks = sup.ticks
            Board(a.store).add_project(human(), "BACK")  # news: the loop ticks for it
            wait_for(lambda: sup.ticks > ticks or bool(failed), timeout=60,
                     what="a tick after the database came back")  # fmt: skip
            assert not failed, failed
            wait_for(lambda: "the database is reachable again" in log.read_text(), timeout=60,
                     what="the loop saying the database is back")  # fmt: skip
            down.set()  # and a stop while it is away again ends cleanly
            _end_sessions(pg_url)
        finally:
            sup.stop_event.set()
            runner.join(60)
        assert not runner.is_alive() and not failed, failed
        assert "signing off failed" in (tmp_path / "a.log").read_text()
    finally:
        hosts.close()


def test_a_call_that_finds_the_database_gone_is_refused_as_unavailable() -> None:
    """What the board socket and ``lb serve`` answer for a call the server ended under it
    (``AdminShutdown`` and its kin are ``OperationalError``s by class, not by name)."""
    from laneboard.ops.endpoint import store_error

    for exc in (
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.OperationalError("connection refused"),
        psycopg.InterfaceError("the connection is closed"),
    ):
        known = store_error(exc)
        assert known is not None and known.code == "STORE_UNAVAILABLE", exc
        assert known.http_status == 503
    assert store_error(ValueError("a bug")) is None


def test_a_refusal_says_when_nothing_of_the_call_reached_the_database(pg_url: str) -> None:
    """No connection could be made, or the transaction's ``BEGIN`` failed: the refusal says
    ``nothing_written`` (remote ``lb`` then makes even a write again). A statement that
    fails once the transaction runs may have been committed: no such word."""
    from laneboard.ops.endpoint import store_error

    store: Any = open_store(pg_url, create=True)
    try:
        store._drop_idle()
        real = store._connect
        store._connect = lambda: (_ for _ in ()).throw(psycopg.OperationalError("refused"))
        with pytest.raises(psycopg.OperationalError) as gone, store.write() as tx:
            tx.run("SELECT 1")
        known = store_error(gone.value)
        assert known is not None and known.details == {"nothing_written": True}
        store._connect = real
        with pytest.raises(psycopg.OperationalError) as broke, store.write() as tx:
            tx.run("SELECT pg_terminate_backend(pg_backend_pid())")
        known = store_error(broke.value)
        assert known is not None and known.code == "STORE_UNAVAILABLE" and not known.details
    finally:
        store.close()


def test_a_local_command_whose_database_goes_away_fails_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store failure in the middle of a local command is the one-line
    ``STORE_UNAVAILABLE`` refusal, never a traceback."""
    from laneboard.cli import local
    from laneboard.errors import LaneboardError
    from laneboard.ops.table import by_name

    url = f"sqlite:///{tmp_path / 'b.db'}"
    open_store(url, create=True).close()
    runner = local.LocalRunner(url)

    def gone(*_a: object, **_k: object) -> object:
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")

    monkeypatch.setattr(local, "invoke", gone)
    with pytest.raises(LaneboardError) as err:
        runner.call(by_name()["card.list"], {})
    assert err.value.code == "STORE_UNAVAILABLE" and "\n" not in err.value.line()


class Scripted:
    """A runner that answers a follower's calls from a list (an error is raised), and
    records the cursor each call resumed from."""

    def __init__(
        self, answers: list[Any], asked: list[Any], notes: Callable[[Any], dict[str, Any]]
    ) -> None:
        self.answers, self.asked, self.notes = answers, asked, notes

    def call(self, _op: object, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        self.asked.append(params.get("after"))
        got = self.answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got, self.notes(got)


def test_a_follower_waits_for_the_board_to_come_back_and_misses_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``lb events tail --follow`` while the board is out of reach (the database restarting,
    ``lb serve`` restarting): it says so once, keeps its cursor, and goes on from it."""
    from laneboard.errors import LaneboardError
    from laneboard.ops.board import EVENTS, follow_events

    def event(i: int) -> dict[str, Any]:
        return {"id": i, "cursor": str(i), "at": "2026-12-06T10:00:00.000Z", "type": "card.moved",
                "actor": "human:alice", "payload": {}}  # fmt: skip

    asked: list[str | None] = []
    answers: list[Any] = [
        [event(1)],
        LaneboardError("STORE_UNAVAILABLE", "no board answers", "start it"),
        LaneboardError("STORE_UNAVAILABLE", "no board answers", "start it"),
        [event(2), event(3)],
    ]

    def notes(got: Any) -> dict[str, Any]:
        return {"cursor": got[-1]["cursor"] if got else "0"}

    cli = {"follow": True, "max_events": 3, "interval": 0.001}
    assert follow_events(Scripted(answers, asked, notes), EVENTS, {}, cli, as_json=True) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1, 2, 3]
    assert asked == [None, "1", "1", "1"]  # each try resumes from the same cursor
    assert err.count("out of reach") == 1 and "back" in err


def test_a_transcript_follower_waits_for_the_board_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from laneboard.errors import LaneboardError
    from laneboard.ops.turns import TRANSCRIPT_OP, follow_transcript

    def entry(i: int) -> dict[str, Any]:
        return {"id": i, "seq": i, "turn": 1, "type": "message", "text": f"step {i}",
                "at": "2026-12-06T10:00:00.000Z"}  # fmt: skip

    asked: list[Any] = []
    answers: list[Any] = [
        {"entries": [entry(1)], "running": {"turn": 1}, "cursor": 1},
        LaneboardError("STORE_UNAVAILABLE", "no board answers", "start it"),
        {"entries": [entry(2)], "running": None, "cursor": 2},
    ]

    runner = Scripted(answers, asked, lambda _got: {})
    cli = {"follow": True, "interval": 0.001}
    assert follow_transcript(runner, TRANSCRIPT_OP, {"ref": "W-1"}, cli, as_json=True) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1, 2]
    assert asked == [None, 1, 1] and err.count("out of reach") == 1


def test_a_connection_on_a_descriptor_past_1024_is_checked_too(pg_url: str) -> None:
    """A supervisor with many sessions has descriptors past ``select``'s 1024: the idle
    check still tells a live connection from a dead one there."""
    from tests.descriptors import past_1024

    with past_1024():
        store = open_store(pg_url, create=True)
        with store.read() as tx:
            tx.one("SELECT 1 AS x")
        raw: Any = store
        assert max(c.pgconn.socket for c in raw._all) > 1024
        assert store.query("SELECT 1 AS x") == [{"x": 1}]
        assert len(raw._all) == 1  # the same connection, found alive: none was made
        _end_sessions(pg_url)
        assert store.query("SELECT 2 AS x") == [{"x": 2}]
        store.close()
