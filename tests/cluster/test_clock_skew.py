"""Machines whose clocks disagree: failover compares each host's heartbeats in the
database's time (each host measures how far its clock is from the server's at its beats
and declares it), so a host whose clock runs a minute ahead does not fence a healthy one,
and a silent host is still fenced after its bound. Leases are stamped and compared in the
server's time too, so a host whose clock runs minutes ahead never takes a pass another
holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from tests.supervisor.helpers import config

from laneboard.board import schedules
from laneboard.domain.clock import SystemClock
from laneboard.store import Store, open_store
from laneboard.supervisor import cluster, instances, leases
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime

AHEAD_MS = 60_000  # more than the default failover bound (3 beats of 15 s)
LEAPS_MS = 3 * 60_000  # past every lease's time to live: a pass's (60 s), the schedules' (2 min)


class Ahead(SystemClock):
    """The wall clock of a machine whose time runs ``ms`` ahead."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return super().now_ms() + self.ms


Hosts = Callable[[int], tuple[Runtime, Runtime]]


@pytest.fixture
def hosts(pg_url: str, tmp_path: Path) -> Iterator[Hosts]:
    """Two registered hosts on one board: ``a`` on the wall clock, ``b`` some ms ahead."""
    stores: list[Store] = []

    def host(name: str, clock: SystemClock) -> Runtime:
        store = open_store(pg_url, clock)
        stores.append(store)
        rt = Runtime(store, config(tmp_path / name), name, LogFile(str(tmp_path / f"{name}.log")))
        rt.pool_alive = lambda: True
        with store.write() as tx:
            rt.instance = instances.register(
                tx, name, rt.config.time, {"pid": 1, **cluster.declared(rt)}
            )
        return rt

    try:
        yield lambda ahead_ms: (host("a", SystemClock()), host("b", Ahead(ahead_ms)))
    finally:
        for s in stores:
            s.close()


def test_a_host_whose_clock_runs_ahead_does_not_fence_a_healthy_one(hosts: Hosts) -> None:
    a, b = hosts(AHEAD_MS)
    assert abs(cluster.declared(b)["clock_offset_ms"] - AHEAD_MS) < 5_000
    assert cluster.sweep(b) == []  # a beat just now, by its own clock and the server's
    assert cluster.sweep(a) == []  # and b, seen from a, is no more silent than it is
    with a.store.write() as tx:  # a falls silent: its last beat is long past
        tx.run(
            "UPDATE supervisors SET heartbeat_at = heartbeat_at - ? WHERE id = ?",
            (cluster.failover_bound_ms(a) + 5_000, a.instance),
        )
    assert [f["instance"] for f in cluster.sweep(b)] == [a.instance]


def test_a_host_whose_clock_runs_ahead_does_not_take_a_pass_lease_another_holds(
    hosts: Hosts,
) -> None:
    a, b = hosts(LEAPS_MS)
    for rt in (a, b):  # the shortest turn timeout: a pass lease lives 60 s (by default 30 min)
        rt.config = replace(rt.config, time=replace(rt.config.time, turn_timeout=60))
    assert cluster.pass_ttl_ms(b) == 60_000 < LEAPS_MS
    with a.store.write() as tx:
        runs, busy = cluster.take(tx, a, ["workflow"])
    assert list(runs) == ["workflow"] and busy == {}
    with b.store.write() as tx:  # a's lease was taken a moment ago, in anyone's time
        runs, busy = cluster.take(tx, b, ["workflow"])
    assert runs == {} and busy == {"workflow": cluster.holder_of(a)}
    b.clock_offset_ms = 0  # as before its first beat measures it: the server's clock decides
    assert cluster.held_elsewhere(b, ["workflow"]) == {"workflow": cluster.holder_of(a)}
    with b.store.read() as tx:
        (line,) = leases.describe(tx, tx.lease_now(), b.machine)
    assert line["expired"] is False and 0 <= line["held_s"] < 30


def test_a_host_whose_clock_runs_ahead_does_not_take_the_schedules_lease(hosts: Hosts) -> None:
    a, b = hosts(LEAPS_MS)
    assert schedules.acquire_tick_lock(a.store, "a:1:schedules") is None
    assert schedules.acquire_tick_lock(b.store, "b:1:schedules") == "a:1:schedules"
