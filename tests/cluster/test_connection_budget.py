"""Each process keeps to a budget of connections to a PostgreSQL board.

A supervisor's turns, its board socket and its passes each take a pooled connection for
a transaction. The pool had no bound: a supervisor running tens of agents held one per
busy thread (16 each for 3 supervisors at 30 agents), and a cluster of such machines
reached the server's ``max_connections`` (or a role's ``CONNECTION LIMIT``, as managed
databases set): connecting then failed, the turns that needed one crashed, and after
three crashes a card was held for a person. Now a process opens at most
``LANEBOARD_DB_CONNECTIONS`` (default 8) and a thread that needs one more waits for one
to be given back; a thread that already holds one (a read inside a write) never waits
for a second, so nesting cannot deadlock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.cluster.conftest import board_role
from tests.conftest import PG_BASE
from tests.supervisor.helpers import RealNowClock, wait_for
from tests.supervisor.test_loud_failures import LB, lb_env, spawn_start

from laneboard.board.service import Board
from laneboard.domain.model import Status, human
from laneboard.errors import LaneboardError
from laneboard.store import open_store


def server_connections(url: str) -> int:
    name = url.rsplit("application_name=", 1)[1]
    with psycopg.connect(PG_BASE, autocommit=True) as admin:
        got = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    return int(got[0]) if got else 0


def test_threads_beyond_the_budget_wait_for_a_connection(
    named_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_DB_CONNECTIONS", "2")
    store: Any = open_store(named_pg_url, create=True)
    store._drop_idle()  # the migration's connection: the count below starts from none
    inside, release, errors = [0], threading.Event(), []
    lock = threading.Lock()

    def reader() -> None:
        try:
            with store.read() as tx:
                tx.one("SELECT 1 AS x")
                with lock:
                    inside[0] += 1
                release.wait(60)
                with lock:
                    inside[0] -= 1
        except BaseException as exc:  # the test asserts there were none
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: inside[0] == 2 and store.pool_waiting == 4, timeout=30,
                 what="two readers in, four waiting")  # fmt: skip
        assert server_connections(named_pg_url) == 2
    finally:
        release.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert inside[0] == 0 and store.pool_waiting == 0
    assert server_connections(named_pg_url) <= 2
    store.close()


def test_a_thread_that_holds_a_connection_gets_a_second_without_waiting(
    named_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_DB_CONNECTIONS", "1")
    store = open_store(named_pg_url, create=True)
    done: list[int] = []

    def nested() -> None:
        with store.write() as tx, store.read() as inner:
            done.append(int(inner.one("SELECT 1 AS x")["x"]) + int(tx.one("SELECT 1 AS x")["x"]))

    t = threading.Thread(target=nested, daemon=True)
    t.start()
    t.join(30)
    assert done == [2], "a read inside a write waited for the write's own connection"
    with store.read() as tx:  # and the pool is back within its budget afterwards
        assert tx.one("SELECT 3 AS x") == {"x": 3}
    assert server_connections(named_pg_url) <= 1
    store.close()


def test_a_budget_that_stays_used_is_refused_as_unavailable(
    named_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_DB_CONNECTIONS", "1")
    store: Any = open_store(named_pg_url, create=True)
    store.pool_wait_s = 0.0  # no time to wait: the refusal at once
    held, release, got = threading.Event(), threading.Event(), []

    def holder() -> None:
        with store.read():
            held.set()
            release.wait(60)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(30)
        with pytest.raises(LaneboardError) as refused, store.read() as tx:
            got.append(tx.one("SELECT 1 AS x"))
    finally:
        release.set()
        t.join(30)
    assert refused.value.code == "STORE_UNAVAILABLE"
    assert "LANEBOARD_DB_CONNECTIONS" in refused.value.fix
    assert store.unavailable(refused.value)  # a resident process waits and tries again
    assert got == []
    with store.read() as tx:
        assert tx.one("SELECT 1 AS x") == {"x": 1}
    store.close()


@pytest.mark.parametrize("bad", ["0", "many", "-3", "100001"])
def test_a_bad_budget_is_refused_with_the_fix(
    named_pg_url: str, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("LANEBOARD_DB_CONNECTIONS", bad)
    with pytest.raises(LaneboardError) as refused:
        open_store(named_pg_url, create=True)
    assert refused.value.code == "CONFIG_INVALID"
    assert f"LANEBOARD_DB_CONNECTIONS={bad!r}" in refused.value.message
    assert "LANEBOARD_DB_CONNECTIONS=8" in refused.value.fix


def test_the_cli_refuses_a_bad_budget_in_one_line(named_pg_url: str) -> None:
    open_store(named_pg_url, create=True).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_DATABASE_URL=named_pg_url, LANEBOARD_DB_CONNECTIONS="many")
    got = subprocess.run([*LB, "card", "list"], env=env, capture_output=True, text=True)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr.splitlines() == [
        "error CONFIG_INVALID: LANEBOARD_DB_CONNECTIONS='many' is not a number of connections"
        " — use a whole number from 1 to 10000, e.g. LANEBOARD_DB_CONNECTIONS=8"
    ]


@pytest.fixture
def limited_role(named_pg_url: str) -> Iterator[str]:
    """The board's URL as a role the server lets hold 4 connections at once (as a managed
    database limits its roles), owning the board's schema."""
    with board_role(named_pg_url, "lb_limited_", "CONNECTION LIMIT 4") as (url, _):
        yield url


def test_a_supervisor_of_many_agents_stays_within_the_servers_limit(
    limited_role: str, tmp_path: Path
) -> None:
    """Eight agents at once under a role limited to 4 connections: with a budget of 3 (one
    more is the wake-up listener's), every card is done, no turn crashed, none was held."""
    store = open_store(limited_role, RealNowClock(), create=True)
    board = Board(store)
    (tmp_path / "proj").mkdir()
    board.add_project(human(), "B", path=str(tmp_path / "proj"))
    script = {"script": [{"say": "working"}, {"deliver": "ok"}]}
    refs = [
        board.create_card(human(), "B", f"c{i}", acceptance_mode="off", meta=script).ref
        for i in range(24)
    ]
    store.close()  # the test's own connection is not the supervisor's to count
    config = (
        '[supervisor]\nsandbox = "off"\nsandbox_reason = "the connection test"\n'
        "max_concurrency = 8\n"
    )
    env = lb_env(tmp_path, limited_role, config, os.environ["PATH"])
    env["LANEBOARD_DB_CONNECTIONS"] = "3"
    proc = spawn_start(env)
    try:

        def settled() -> bool:
            with psycopg.connect(PG_BASE, autocommit=True) as admin:
                schema = limited_role.split("search_path%3D", 1)[1].split("&", 1)[0]
                open_ = admin.execute(
                    f"SELECT count(*) FROM {schema}.cards WHERE status NOT IN ('done', 'blocked')"
                ).fetchone()
            return (open_ is not None and open_[0] == 0) or proc.poll() is not None

        wait_for(settled, timeout=240, what="every card done or held")
        assert proc.poll() is None, "the supervisor exited"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    log = (tmp_path / "xdg-state" / "laneboard" / "supervisor.log").read_text()
    assert "too many connections" not in log, log[-3000:]
    assert "turn crashed" not in log, log[-3000:]
    assert "Traceback" not in err, err
    with psycopg.connect(PG_BASE, autocommit=True) as admin:
        schema = limited_role.split("search_path%3D", 1)[1].split("&", 1)[0]
        rows = admin.execute(f"SELECT ref, status FROM {schema}.cards").fetchall()
    assert {ref: status for ref, status in rows} == {r: Status.DONE.value for r in refs}


def test_doctor_says_when_the_supervisors_may_need_more_than_the_server_allows(
    limited_role: str,
) -> None:
    """Two supervisors whose budgets (3 each, and a listener each) add up to more than the
    role's 4 connections: ``lb doctor`` names it, with what to change; one fits."""
    from laneboard.config import SupervisorConfig
    from laneboard.supervisor import instances
    from laneboard.supervisor.doctor import doctor_report

    store = open_store(limited_role, RealNowClock(), create=True)
    time = SupervisorConfig().time
    with store.write() as tx:
        instances.register(tx, "a", time, {"pid": 1, "db_connections": 3})
    fits = doctor_report(store, machine="a")
    assert fits["connections"] == {"need": 4, "allowed": 4, "supervisors": 1}
    assert not any("database connections" in r for r in fits["reasons"])
    with store.write() as tx:
        instances.register(tx, "b", time, {"pid": 2, "db_connections": 3})
    over = doctor_report(store, machine="a")
    assert over["connections"] == {"need": 8, "allowed": 4, "supervisors": 2}
    assert over["attention"]
    assert (
        "database connections: the running supervisors may open 8, the database allows 4 "
        "(lower LANEBOARD_DB_CONNECTIONS or raise the server's max_connections: "
        "docs/cluster.md)"
    ) in over["reasons"]
    store.close()


def test_a_supervisor_declares_its_budget(named_pg_url: str, tmp_path: Path) -> None:
    from tests.cluster.test_passes_failover import Hosts

    from laneboard.supervisor.cluster import declared

    open_store(named_pg_url, create=True).close()
    hosts = Hosts(named_pg_url, tmp_path, RealNowClock())
    try:
        assert declared(hosts.runtime("a", register=False))["db_connections"] == 8
    finally:
        hosts.close()
